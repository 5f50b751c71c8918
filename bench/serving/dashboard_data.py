"""A recorded history for the dashboard: sessions of turns with next states, verdicts, feedback
and finished training runs, written through the real Store. bench/serving/dashboard.py builds 10,000
turns with it, tests/test_dashboard.py a few dozen.

The token ids are random and never reach a model. Two things the Store has no API for are
written through a connection of our own, as the trainer does: the training runs (which turns
were trained on) and the turns' timestamps, spread back over the past days so that the reward
trend has a time axis.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time

from clawd.store.records import Feedback, Judgment, NextState, ToolCall, Turn

# (request, answer, approving next message, correcting next message, the hint a correction gives)
EXCHANGES = [
    ("How do I list the files in a directory, newest first?", "Use `ls -lt`; add `-a` to include hidden files.",
     "Thanks, that's it.", "No, I meant from Python.", "The user wanted Python, not a shell command."),
    ("Convert 5 miles to kilometres.", "5 miles is about 8.05 km.", "Perfect.", "Use metric only, no miles.",
     "Answer in metric units only."),
    ("Summarize this paragraph in one sentence.", "The paragraph argues that small models can learn from use.",
     "Great, thanks.", "Too long — keep it to one short sentence.", "Keep summaries to one short sentence."),
    ("What's the capital of Australia?", "Canberra.", "Right, thanks.", "That doesn't answer it.", None),
    ("Write a regex that matches an ISO date.", "`\\d{4}-\\d{2}-\\d{2}` matches dates like 2024-05-17.",
     "Works, thanks!", "It also matches 2024-13-45; validate the month.", "Validate month and day ranges."),
    ("Rename every .txt file in this folder to .md.", None, "exit code 0", "mv: cannot stat '*.txt'",
     "Check that the files exist before renaming them."),
    ("Explain what a LoRA adapter is, briefly.", "A LoRA adapter adds small low-rank matrices to a model's "
     "layers, so it can be fine-tuned by training only those.", "Clear, thanks.", "Shorter.", "Shorter."),
    ("Give me a name for a cat.", "How about Miso?", "Love it.", "Something less common, please.", None),
]
TOOL = {"type": "function", "function": {"name": "exec", "description": "Run a shell command in the workspace and "
        "return its output. " * 6, "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                 "required": ["command"]}}}
SYSTEM = ("You are a personal assistant running inside OpenClaw. Tools are available; call one when it helps. "
          "Answer briefly, in the user's language. ")


def seed(store, turns: int, per_session: int = 12, prompt_tokens: int = 600, system_chars: int = 2000,
         tools: int = 4, seed: int = 0, days: float = 6.0, improving: bool = True, fast: bool = False) -> dict:
    """Write `turns` turns in sessions of about `per_session`, oldest first. With `improving`, later
    turns are approved more often (so the trend has a shape to draw). Returns what was written."""
    rng = random.Random(seed)
    db = sqlite3.connect(str(store.path), isolation_level=None, timeout=30)
    if fast:
        # bench only: 50,000 single-row transactions with an fsync each would take minutes here;
        # durability is not what the bench measures
        store._db.execute("PRAGMA synchronous=OFF")
    system = (SYSTEM * (system_chars // len(SYSTEM) + 1))[:system_chars]
    now, span = time.time(), days * 86400
    made, trained, sessions = [], [], []
    n_sessions = max(1, turns // per_session)
    for s in range(n_sessions):
        sid = store.open_session(f"seed-{seed}-{s:05d}")
        sessions.append(sid)
        count = turns // n_sessions + (1 if s < turns % n_sessions else 0)
        history: list[dict] = []
        prefix = [rng.randrange(49152) for _ in range(prompt_tokens)]  # a session re-sends its prefix
        for i in range(count):
            k = len(made)
            q, a, good, bad, hint = EXCHANGES[rng.randrange(len(EXCHANGES))]
            p_good = 0.25 + 0.55 * k / max(1, turns - 1) if improving else 0.55
            outcome = rng.random()
            approved, corrected = outcome < p_good, p_good <= outcome < p_good + 0.3
            messages = [{"role": "system", "content": system}, *history[-8:], {"role": "user", "content": q}]
            request = {"messages": messages, "stream": True, "max_completion_tokens": 1024,
                       "tools": [TOOL] * tools if tools else None}
            t = Turn(session_id=sid, index=i, kind="main", completion_id=f"chatcmpl-seed{seed}-{k}", request=request,
                     prompt_ids=prefix + [rng.randrange(49152) for _ in range(40 * len(history))])
            store.insert_turn(t)
            n_out = rng.randrange(12, 160)
            t.completion_ids = [rng.randrange(49152) for _ in range(n_out)]
            t.logprobs = [-rng.random() * 2 for _ in range(n_out)]
            t.text, t.status, t.finish_reason = a or "", "ok", "stop" if a else "tool_calls"
            if a is None:
                t.tool_calls = [ToolCall(id=f"call_{k}", name="exec", arguments='{"command": "mv *.txt *.md"}')]
            store.finish_turn(t)
            made.append(t.id)
            if i + 1 < count or rng.random() < 0.5:  # the session's last turn often has no next state
                role = "tool" if a is None else "user"
                content = good if approved else bad if corrected else "Ok. Another question then."
                store.add_next_state(NextState(turn_id=t.id, role=role, content=content,
                                               messages=[{"role": role, "content": content}]))
                score = 1 if approved else -1 if corrected else 0
                if rng.random() < 0.9:
                    store.add_judgment(Judgment(turn_id=t.id, method="ask", score=score, judge_model="seed",
                                                hint=hint if score < 0 else None))
                if rng.random() < 0.04:
                    store.set_feedback(Feedback(turn_id=t.id, score=1 if approved else -1,
                                                comment=None if approved else bad, hint=None if approved else bad))
                if score != 0 and rng.random() < 0.5:
                    trained.append(t.id)
            history += [{"role": "user", "content": q}, {"role": "assistant", "content": a or ""}]
    # spread the turns over the past `days`, oldest first; a session's turns minutes apart
    stamps = sorted(now - span + span * rng.random() for _ in made)
    db.execute("BEGIN")
    db.executemany("UPDATE turns SET created = ? WHERE id = ?", list(zip(stamps, made)))
    db.execute("UPDATE sessions SET first_seen = (SELECT MIN(created) FROM turns WHERE session_id = sessions.id),"
               " last_seen = (SELECT MAX(created) FROM turns WHERE session_id = sessions.id)"
               " WHERE id IN (SELECT DISTINCT session_id FROM turns)")
    for chunk in range(0, len(trained), 16):  # finished rounds of 16 turns (a round's size before 8), as the trainer records them
        ids = trained[chunk:chunk + 16]
        run = db.execute("INSERT INTO train_runs (method, status, turn_ids, started, finished) VALUES"
                         " ('combined', 'done', ?, ?, ?)", (json.dumps(ids), now, now)).lastrowid
        db.executemany("INSERT INTO train_uses (turn_id, run_id) VALUES (?, ?)", [(i, run) for i in ids])
    db.execute("COMMIT")
    db.close()
    return {"turns": made, "sessions": sessions, "trained": trained}
