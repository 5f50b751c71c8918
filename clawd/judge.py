"""Judge (design §6): the served model scores each main turn from what came next, and writes hints.

Two verdicts per turn, both on the base weights in the engine's background context:
- *evaluation* (Binary RL): +1 the turn worked, -1 it did not, 0 no evidence. Reached either by
  `vote` (m sampled answers that reason and end in \\boxed{}, majority of the valid ones) or by
  `score` (one forward pass with the answer forced up to `\\boxed{`, reading P("1"), P("-1"),
  P("0"); the most likely verdict if its margin clears a threshold, else 0). Small models judge
  far better by score (design §12; `bench/judge.py` measures both).
- *hint* (OPD): m sampled answers; \\boxed{1} plus a hint between markers when the next state shows
  how the turn should have been different. The longest hint over 10 characters among the positive
  votes is kept; none → no OPD sample.

Each turn is judged once: `Store.add_judgment` ignores a second verdict for a turn, so a crash
mid-backlog only redoes the turn that was in progress.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from .config import Settings
from .background import BackgroundContext, Cancelled
from .engine import Engine
from .records import Judgment, NextState, Turn, Vote
from .store import Store

log = logging.getLogger("clawd.judge")

HINT_START, HINT_END = "[HINT_START]", "[HINT_END]"
VERDICTS = ("1", "-1", "0")
SCORE_PREFILL = "Score: \\boxed{"
MAX_ATTEMPTS = 3  # a turn whose judging raised this often is stored as 0

EVAL_SYSTEM = """You grade one reply of an AI assistant by what happened right after it.

Score 1 if the reply worked: the user moves on to the next thing, thanks the assistant, a tool call succeeded, or the environment confirms the result.
Score -1 if it did not: the user repeats, retries or rephrases the same request, corrects the assistant ("no, I meant ..."), asks for a change, or a tool or the environment reports an error.
Score 0 if what came next is ambiguous or unrelated to the reply.

Think in one or two short sentences, then end with the score: \\boxed{1}, \\boxed{-1} or \\boxed{0}."""

HINT_SYSTEM = f"""You review one reply of an AI assistant in hindsight, knowing what happened right after it.

Does what came next show how the reply should have been different (a correction, a preference, missing information, an error to avoid)?
If yes, write \\boxed{{1}} and then a concrete, actionable hint to the assistant in 1-3 sentences between {HINT_START} and {HINT_END}.
If no, write \\boxed{{-1}} and nothing else."""

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
# Small judges write the markers loosely ("HINT_START", "**[HINT_START]**") and often stop without
# the end marker; a hint then runs to the end of its paragraph.
_HINT = re.compile(r"\[?HINT_START\]?\**:?(.*?)(?:\**\[?HINT_END\]?|\n\s*\n|$)", re.S | re.I)


# -- parsing and voting: pure ----------------------------------------------------------------
def parse_boxed(text: str, allowed: tuple[int, ...] = (1, -1, 0)) -> int | None:
    """The value of the LAST \\boxed{...}; None (a failed vote) if there is none or it is not
    one of `allowed` ("+1" counts as 1; "2", "yes", "" do not)."""
    found = _BOXED.findall(text)
    if not found:
        return None
    raw = found[-1].strip()
    if not re.fullmatch(r"[+-]?\d+", raw):
        return None
    value = int(raw)
    return value if value in allowed else None


def parse_hint(text: str) -> str | None:
    """The text after the last hint marker, up to the end marker, a blank line or the end."""
    found = [re.sub(r"\n\s*\d+\.$", "", h.strip()).strip() for h in _HINT.findall(text)]
    return found[-1] or None if found else None


def majority(values: list[int | None]) -> int:
    """Most common valid value; a tie at the top, or no valid vote, is 0."""
    counts = Counter(v for v in values if v is not None).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return 0
    return counts[0][0]


def choose_hint(votes: list[Vote]) -> str | None:
    """The longest hint over 10 characters among positive hint votes (the most informative)."""
    hints = [v.hint for v in votes if v.value == 1 and v.hint and len(v.hint) > 10]
    return max(hints, key=len) if hints else None


def verdict_from_probs(probs: dict[str, float], margin: float) -> int:
    """The most likely verdict if it beats the runner-up by `margin`, else 0."""
    ranked = sorted(VERDICTS, key=lambda k: probs[k], reverse=True)
    return int(ranked[0]) if probs[ranked[0]] - probs[ranked[1]] >= margin else 0


# -- what the judge reads ---------------------------------------------------------------------
def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return content or ""


def _calls(calls: list[dict[str, Any]]) -> str:
    return "\n".join(f"[tool call] {c['function']['name']}({c['function'].get('arguments') or ''})" for c in calls)


def render_messages(messages: list[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        role = m.get("role", "user")
        body = "\n".join(x for x in (_text(m.get("content")), _calls(m.get("tool_calls") or [])) if x)
        label = {"tool": f"Tool result ({m.get('name') or 'tool'})", "developer": "System"}.get(role, role.capitalize())
        lines.append(f"{label}: {body}")
    return "\n\n".join(lines)


def cut_middle(text: str, keep: int) -> str:
    """Keep the first third and last two thirds of `keep` characters: the start says what the
    conversation is, the end is what the judged turn answers."""
    if len(text) <= keep:
        return text
    head = keep // 3
    tail = keep - head
    return f"{text[:head]}\n[... {len(text) - keep} characters omitted ...]\n{text[len(text) - tail:]}"


class Judge:
    def __init__(self, engine: Engine, store: Store | None, settings: Settings):
        self.engine, self.store, self.settings = engine, store, settings
        self._failures: dict[int, int] = {}  # turn id -> failed attempts, in this process

    @property
    def context(self) -> BackgroundContext:
        # budget for the prompt, the judge's answer, and a few tokens of forced verdict
        s = self.settings
        return self.engine.background_context(s.judge_budget_tokens + s.judge_max_tokens + 16)

    # -- prompts ---------------------------------------------------------------------------
    def sections(self, turn: Turn, ns: NextState) -> tuple[str, list[str]]:
        """The conversation before the last user message (may be shortened) and the parts that
        are never cut: the request from its last user message on, the output, the next state."""
        msgs = turn.request.get("messages", [])
        last_user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=max(len(msgs) - 1, 0))
        output = render_messages([{"role": "assistant", "content": turn.text,
                                   "tool_calls": [c.to_openai() for c in turn.tool_calls]}])
        evidence = "the tool's result" if ns.role == "tool" else "the user's next message"
        return render_messages(msgs[:last_user]), [
            f"## The request\n{render_messages(msgs[last_user:])}",
            f"## The assistant's reply (judge this)\n{output}",
            f"## What came next ({evidence})\n{render_messages(ns.messages)}",
        ]

    def _render(self, system: str, history: str, parts: list[str], prefill: str) -> str:
        body = "\n\n".join(([f"## Earlier in the conversation\n{history}"] if history else []) + parts)
        return self.engine.template.render([{"role": "system", "content": system}, {"role": "user", "content": body}],
                                           prefill=prefill)

    def prompt(self, system: str, turn: Turn, ns: NextState, prefill: str = "") -> tuple[str, dict[str, Any]]:
        """The judge's prompt text, shortened in the middle to fit `judge_budget_tokens`."""
        budget = self.settings.judge_budget_tokens
        def count(text: str) -> int:
            return len(self.engine.tokenize(text))

        history, parts = self.sections(turn, ns)
        info: dict[str, Any] = {"history_cut": False, "protected_cut": False}
        text = self._render(system, history, parts, prefill)
        n = count(text)
        if n <= budget:
            info["prompt_tokens"] = n
            return text, info
        fixed = count(self._render(system, "", parts, prefill))
        if fixed > budget:
            # Last resort, logged and flagged: the never-cut parts alone overflow (a huge tool result).
            log.warning("turn %s: request, reply and next state exceed the judge budget (%d > %d tokens); "
                        "cutting them too", turn.id, fixed, budget)
            info["protected_cut"] = True
            history = ""
            ratio = budget / fixed
            for _ in range(50):  # 0.9**50: down to the markers alone
                ratio *= 0.9
                text = self._render(system, "", [cut_middle(p, int(len(p) * ratio)) for p in parts], prefill)
                if count(text) <= budget:
                    break
        else:
            info["history_cut"] = True
            room = budget - fixed
            keep = int(len(history) * room / max(count(history), 1))
            while True:
                text = self._render(system, cut_middle(history, keep), parts, prefill)
                if count(text) <= budget or keep == 0:
                    break
                keep = int(keep * 0.85)
        info["prompt_tokens"] = count(text)
        return text, info

    # -- one turn ------------------------------------------------------------------------------
    def _sample(self, text: str, cancel: threading.Event | None) -> str:
        s = self.settings
        ids = self.context.generate(self.engine.tokenize(text), s.judge_temperature, s.judge_max_tokens,
                                    seed=int.from_bytes(os.urandom(4), "little"), cancel=cancel)
        return self.engine.detokenize(ids)

    def verdict_probs(self, text: str, cancel: threading.Event | None = None) -> dict[str, float]:
        """P of each verdict after the forced prefix, normalized over the three; `mass` is how much
        of the model's probability the three got together. Each verdict is scored as the whole
        text "<prompt>1}" etc., from the longest token prefix all three share, because a tokenizer
        may merge across the brace (Qwen writes "{-" as one token)."""
        full = [self.engine.tokenize(text + v + "}") for v in VERDICTS]
        common = 0
        while all(common < len(f) - 1 for f in full) and len({f[common] for f in full}) == 1:
            common += 1
        logps = self.context.score(full[0][:common], [f[common:] for f in full], cancel=cancel)
        raw = [math.exp(lp) for lp in logps]
        mass = sum(raw)
        probs = {v: (r / mass if mass > 0 else 1 / 3) for v, r in zip(VERDICTS, raw)}
        return {**probs, "mass": mass}

    def judge_turn(self, turn: Turn, ns: NextState, method: str | None = None,
                   cancel: threading.Event | None = None) -> Judgment:
        """Judge one turn (nothing is stored): evaluation by `method`, then hint votes."""
        s = self.settings
        method = method or s.judge_method
        ctx = self.context
        waited0, t0 = ctx.waited_s, time.perf_counter()
        votes: list[Vote] = []
        probs = None
        if method == "score":
            text, info = self.prompt(EVAL_SYSTEM, turn, ns, prefill=SCORE_PREFILL)
            probs = self.verdict_probs(text, cancel)
            score = verdict_from_probs(probs, s.judge_margin)
        elif method == "vote":
            text, info = self.prompt(EVAL_SYSTEM, turn, ns)
            for _ in range(s.judge_votes):
                raw = self._sample(text, cancel)
                votes.append(Vote(kind="eval", raw=raw, value=parse_boxed(raw)))
            score = majority([v.value for v in votes if v.kind == "eval"])
        else:
            raise ValueError(f"unknown judge method {method!r}: 'vote' or 'score'")
        t1 = time.perf_counter()
        hint = None
        if s.judge_hint_votes:
            text, _ = self.prompt(HINT_SYSTEM, turn, ns)
            for _ in range(s.judge_hint_votes):
                raw = self._sample(text, cancel)
                value = parse_boxed(raw, allowed=(1, -1))
                votes.append(Vote(kind="hint", raw=raw, value=value, hint=parse_hint(raw) if value == 1 else None))
            hint = choose_hint([v for v in votes if v.kind == "hint"])
        t2 = time.perf_counter()
        timings = {"eval_s": round(t1 - t0, 3), "hint_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3),
                   "waited_for_users_s": round(ctx.waited_s - waited0, 3), **info}
        return Judgment(turn_id=turn.id, method=method, score=score, judge_model=self.engine.model_path.name,  # type: ignore[arg-type]
                        votes=votes, probs=probs, hint=hint, judge_adapter=None, timings=timings)

    # -- the backlog -------------------------------------------------------------------------------
    def backlog_size(self) -> int:
        assert self.store is not None
        return self.store.count_unjudged()

    def run_backlog(self, stop: threading.Event | None = None,
                    on_judged: Callable[[Turn, Judgment], None] | None = None) -> int:
        """Judge every unjudged main turn with a next state, oldest first, until none is left or
        `stop` is set (checked between decode steps). Returns how many verdicts were stored.
        What the daemon's scheduler calls when idle, and what `clawd judge --once` runs."""
        assert self.store is not None, "run_backlog needs a store"
        done = 0
        skipped: set[int] = set()
        while stop is None or not stop.is_set():
            batch = [t for t in self.store.unjudged_turns(limit=len(skipped) + 16) if t.id not in skipped]
            if not batch:
                break
            for turn in batch:
                ns = self.store.next_state(turn.id)  # type: ignore[arg-type]
                try:
                    j = self.judge_turn(turn, ns, cancel=stop)  # type: ignore[arg-type]
                except Cancelled:
                    log.info("judging stopped; turn %s will be judged next time", turn.id)
                    return done
                except Exception as e:  # one bad turn must not stall the backlog forever
                    skipped.add(turn.id)  # type: ignore[arg-type]
                    self._failures[turn.id] = n = self._failures.get(turn.id, 0) + 1  # type: ignore[index]
                    if n < MAX_ATTEMPTS:
                        log.exception("judging turn %s failed (attempt %d of %d)", turn.id, n, MAX_ATTEMPTS)
                        continue
                    # Give up with a 0 (no training signal), or the idle scheduler would retry it forever.
                    log.exception("judging turn %s failed %d times; stored as 0", turn.id, n)
                    j = Judgment(turn_id=turn.id, method=self.settings.judge_method, score=0,  # type: ignore[arg-type]
                                 judge_model=self.engine.model_path.name, timings={"error": repr(e)[:500], "attempts": n})
                if self.store.add_judgment(j):
                    done += 1
                    log.info("turn %s judged %+d by %s%s in %.1fs", turn.id, j.score, j.method,
                             " with a hint" if j.hint else "", j.timings.get("total_s", 0.0))
                else:
                    log.info("turn %s was already judged elsewhere; kept the first verdict", turn.id)
                if on_judged is not None:
                    on_judged(turn, j)
                if stop is not None and stop.is_set():
                    break
        return done

