"""Judge (design §6): the served model scores each main turn from what came next.

The verdict: +1 the turn worked, -1 it did not, 0 no evidence. A 0.5B model asked for a verdict
reads a short change request in the imperative ("Shorter.", "In French.") as approval. The
default method, `ask`, shows it worked examples (SHOTS, a cached prefix), then the turn in their
form, and reads two things at the place where the verdict comes: log P of each verdict word
(" bad", " unclear", " good"), and the model's hidden state there, halfway up its layers. A
softmax regression fitted per model file on the shipped labeled cases turns them into P(-1),
P(0), P(+1) (`calibration.py`); the hidden state carries what the three words miss (a
sarcastic thanks, a terse request). A verdict is given only past a confidence chosen by cross-validation
on those cases; below it, 0. `score`, the older method (P of each `\\boxed{}` value after a forced
prefix), is kept as the baseline `bench/judge/run.py` compares against, and is calibrated the same way.

Hints for OPD come from the evidence, not from the judge's pen (`hints.py`).

Each turn is judged once: `Store.add_judgment` ignores a second verdict for a turn, so a crash
mid-backlog only redoes the turn that was in progress.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..config import Settings
from ..engine.background import BackgroundContext, Cancelled
from ..engine.engine import Engine
from ..store.hints import evidence_hint, text_of
from ..store.records import Judgment, NextState, Turn
from ..store.store import Store
from .calibration import Calibration, Calibrator, top_verdict

log = logging.getLogger("clawd.judge")

VERDICTS = ("1", "-1", "0")
SCORE_PREFILL = "Score: \\boxed{"
MAX_ATTEMPTS = 3  # a turn whose judging raised this often is stored as 0

EVAL_SYSTEM = """You grade one reply of an AI assistant by what happened right after it.

Score 1 if the reply worked: the user moves on to the next thing, thanks the assistant, a tool call succeeded, or the environment confirms the result.
Score -1 if it did not: the user repeats, retries or rephrases the same request, corrects the assistant ("no, I meant ..."), asks for a change, or a tool or the environment reports an error.
Score 0 if what came next is ambiguous or unrelated to the reply.

Think in one or two short sentences, then end with the score: \\boxed{1}, \\boxed{-1} or \\boxed{0}."""

ASK_SYSTEM = ("Each example shows a user's request, an AI assistant's reply, and what came right after the reply. "
              "The verdict is good if the reply worked (the user thanks, approves or builds on it, or the tool "
              "succeeded), bad if it did not (the user corrects it, asks for any change, repeats the request, "
              "complains, or the tool failed), unclear otherwise.")
# Worked examples, written apart from both splits of the labeled corpus. A 0.5B model reads the
# verdict from examples far better than from instructions: asked yes/no questions it said "No" to
# everything (bench/results/judge-*.json). They sit in the cached prefix, so they cost one prefill.
# (request, reply, who came next, what came next, verdict)
SHOTS = (
    ("How many ounces are in a pound?", "There are 16 ounces in a pound.", "user", "great, that's what I needed", "good"),
    ("Write a haiku about rain.", "Soft rain on the roof / gray clouds weep all afternoon / the garden drowns slow", "user", "Less gloomy.", "bad"),
    ("Delete the build folder.", '[tool call] exec({"command": "rm -rf build"})', "tool", "rm: cannot remove 'build/cache': Permission denied\n(exit code 1)", "bad"),
    ("Write a SQL query that counts the users.", "SELECT COUNT(*) FROM users;", "user", "Now only the ones created this year.", "good"),
    ("Who painted the Mona Lisa?", "It was painted by Michelangelo.", "user", "Nope, Leonardo da Vinci painted it.", "bad"),
    ("Suggest a name for my cat.", "How about Whiskers?", "user", "What's the best way to learn piano?", "unclear"),
    ("Show me the README.", '[tool call] read({"path": "README.md"})', "tool", "# myapp\nA small web service.\n## Install\npip install myapp", "good"),
    ("Summarize this paragraph for me.", "Here is a detailed summary in twelve paragraphs. First, ...", "user", "Oh wonderful, a summary longer than the text itself. Thanks a lot.", "bad"),
    ("Give me a packing list for a weekend trip.", "- Clothes\n- Toothbrush\n- Phone charger", "user", "Could you write it as a paragraph instead, please?", "bad"),
    ("Write a function that parses a date string.", "def parse(s):\n    return datetime.strptime(s, '%Y-%m-%d')", "user", "Next, make it accept times too.", "good"),
    ("What's the weather like on Mars?", "Mars is the fourth planet from the Sun.", "user", "I asked about the weather there. What is it like?", "bad"),
    ("Run the tests.", '[tool call] exec({"command": "pytest -q"})', "tool", "12 passed in 0.84s", "good"),
    ("Explain recursion.", "Recursion is when a function calls itself on a smaller input until it reaches a base case.", "user", "In German.", "bad"),
    ("Recommend a book on statistics.", "Try 'The Art of Statistics' by David Spiegelhalter.", "user", "hmm", "unclear"),
    ("Translate 'good morning' into French.", "Bonjour.", "user", "Merci, parfait !", "good"),
    ("Fix the typo in config.toml.", '[tool call] edit({"path": "config.toml", "oldText": "prot", "newText": "port"})', "tool", "Error: oldText not found in config.toml", "bad"),
    ("How do I undo my last git commit?", "Run git reset --soft HEAD~1; your changes stay staged.", "user", "And how do I push that to the remote?", "good"),
    ("Write a tagline for a coffee shop.", "Wake up and smell the excellence!", "user", "Brilliant. Exactly the cliché I wanted to avoid.", "bad"),
    ("What is 7 times 8?", "7 times 8 is 54.", "user", "That's not right, it's 56.", "bad"),
    ("Give me three ideas for a birthday party.", "1. A picnic 2. A karaoke night 3. A board game evening", "user", "By the way, how tall is Mount Everest?", "unclear"),
    ("List the files here.", '[tool call] ls({"path": "."})', "tool", "README.md\nmain.py\nrequirements.txt", "good"),
    # thanks that are thanks, thanks that are sarcasm, and moving on (issue 12: the first two were
    # confused, which left real thanks undecided); chosen by the tuning split's cross-validation only
    ("Convert 5 km to miles.", "5 km is about 3.1 miles.", "user", "Perfect, thank you!", "good"),
    ("Write a short bio for my profile.", "John is a passionate, dynamic, results-driven synergist who leverages paradigms.", "user", "Wow, thanks. Now I sound like a buzzword generator.", "bad"),
    ("Suggest a dinner recipe.", "Try a lemon garlic pasta: boil spaghetti, toss with garlic, lemon, olive oil and parmesan.", "user", "Sounds good. What wine goes with it?", "good"),
    ("Fix the grammar: 'me and him goes to school'.", "He and I go to school.", "user", "ok cheers", "good"),
    ("Give me a motivational quote.", "Believe you can and you're halfway there.", "user", "Gee, how original. Thanks so much.", "bad"),
    ("Describe the water cycle.", "Water evaporates, condenses into clouds, and falls as rain or snow.", "user", "Thanks!", "good"),
)
LABELS = {"bad": -1, "unclear": 0, "good": 1}  # the verdict words, in the feature order

# What each section of the exchange keeps, in characters (cut in the middle): about 250 tokens
# in all, so a turn costs ~2 s of prompt on 2 CPU cores with the 0.5B model.
REQUEST_CHARS, REPLY_CHARS, NEXT_CHARS = 300, 400, 400
ASK_TOKENS = 2048
PLAIN = 4  # features before the hidden state: the three verdicts' log P and whether a tool answered
# Which block's output the calibration reads, as a share of the model's depth. Chosen on the
# tuning split's cross-validation alone (456 cases, 4 shuffles of 5 folds, 96 components): on
# Qwen2.5-Coder-0.5B the block outputs at 12-13 of 24 gave log-loss 0.19 against 0.36 for the
# final hidden state (accuracy at the 3% wrong-sign threshold 0.90 against 0.76); on SmolLM2-135M
# 16 of 30 gave 0.29 against 0.53. Both peak near half depth, and fall off toward the top, where
# the model turns to predicting the next token.
LAYER_DEPTH = 0.5
PROMPTS = json.dumps([EVAL_SYSTEM, ASK_SYSTEM, SHOTS, REQUEST_CHARS, REPLY_CHARS, NEXT_CHARS, LAYER_DEPTH])  # calibration cache key


# -- what the judge reads ---------------------------------------------------------------------
def _calls(calls: list[dict[str, Any]]) -> str:
    return "\n".join(f"[tool call] {c['function']['name']}({c['function'].get('arguments') or ''})" for c in calls)


def render_messages(messages: list[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        role = m.get("role", "user")
        body = "\n".join(x for x in (text_of(m.get("content")), _calls(m.get("tool_calls") or [])) if x)
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
        self.calibrator = Calibrator(settings.home / "judge", settings.judge_min_accuracy, settings.judge_max_wrong_sign)
        self._failures: dict[int, int] = {}  # turn id -> failed attempts, in this process
        self._calibration: Calibration | None = None
        self.progress: dict[str, Any] | None = None

    @property
    def context_tokens(self) -> int:
        # room for method 'score''s prompt (judge_budget_tokens) or method 'ask''s (its examples,
        # ~1.3k tokens, and a turn cut to ~1.1k characters: under 2k), plus a forced verdict
        return max(self.settings.judge_budget_tokens, ASK_TOKENS) + 16

    @property
    def context(self) -> BackgroundContext:
        return self.engine.background_context(self.context_tokens)

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

    @staticmethod
    def example(request: str, reply: str, role: str, after: str) -> str:
        then = "Tool result" if role == "tool" else "User's next message"
        return (f"Request: {cut_middle(request, REQUEST_CHARS)}\nReply: {cut_middle(reply, REPLY_CHARS) or '(nothing)'}\n"
                f"{then}: {cut_middle(after, NEXT_CHARS) or '(nothing)'}\nVerdict:")

    def ask_prompt(self, turn: Turn, ns: NextState) -> str:
        """Method `ask`: the instructions and worked examples (a fixed, cached prefix), then this
        turn in their form: its last user request, the reply, what came next. The history before
        the request is left out: it distracts a small judge (the reference's judge shows only the
        reply and the next state)."""
        msgs = turn.request.get("messages", [])
        request = next((text_of(m.get("content")) for m in reversed(msgs) if m.get("role") == "user"), "")
        reply = render_messages([{"role": "assistant", "content": turn.text,
                                  "tool_calls": [c.to_openai() for c in turn.tool_calls]}]).removeprefix("Assistant: ")
        after = "\n".join(text_of(m.get("content")) for m in ns.messages)
        shots = "\n\n".join(f"{self.example(*s[:4])} {s[4]}" for s in SHOTS)
        return f"{ASK_SYSTEM}\n\n{shots}\n\n{self.example(request, reply, ns.role, after)}"

    @property
    def layer(self) -> int:
        """The block whose output the calibration reads: the one at half depth (Qwen2.5-0.5B: 12
        of 24; SmolLM2-135M: 15 of 30)."""
        return min(int(self.context.n_layer * LAYER_DEPTH), self.context.n_layer - 2)  # the last block is not tappable

    def features(self, turn: Turn, ns: NextState, method: str | None = None,
                 cancel: threading.Event | None = None) -> tuple[list[float], dict[str, Any]]:
        """What the calibration reads for one turn: PLAIN features, then the model's state at the
        block at half depth (`layer`) where it reads the verdict, (n_embd,). See `raw_features`."""
        plain, hidden, info = self.raw_features(turn, ns, method, (self.layer,), cancel)
        return plain + hidden[self.layer].tolist(), info

    def raw_features(self, turn: Turn, ns: NextState, method: str | None, layers: tuple[int | None, ...],
                     cancel: threading.Event | None = None) -> tuple[list[float], dict[int | None, np.ndarray], dict[str, Any]]:
        """log P of each verdict word (method `ask`: " bad", " unclear", " good" after the
        examples; `score`: "-1", "0", "1" in a forced \\boxed{}), normalized over the three, and 1
        if a tool answered (else 0): the PLAIN features; then the model's state at the verdict's
        place after each of `layers` (BackgroundContext.hidden: a block's output, or None for the
        final hidden state), (n_embd,) each. The verdict words read one direction of the final
        state (the lm head's row for each); the calibration finds others that tell a sarcastic
        thanks or a terse change request from approval, best halfway up the model (issue 12)."""
        method = method or self.settings.judge_method
        info: dict[str, Any] = {}
        if method == "ask":
            text = self.ask_prompt(turn, ns)
            lps = np.array(self.choice_logps(text, [f" {w}" for w in LABELS], cancel))
        elif method == "score":
            text, info = self.prompt(EVAL_SYSTEM, turn, ns, prefill=SCORE_PREFILL)
            probs = self.verdict_probs(text, cancel)
            lps = np.log([max(probs[v], 1e-9) for v in ("-1", "0", "1")])
        else:
            raise ValueError(f"unknown judge method {method!r}: 'ask' or 'score'")
        tokens = self.engine.tokenize(text)
        hidden = self.context.hidden(tokens, layers, cancel)  # the KV cache holds the prompt: one token's work
        # and who answered: a tool's result is never "no evidence", a user's message may be
        plain = [round(float(v), 4) for v in lps - np.logaddexp.reduce(lps)] + [float(ns.role == "tool")]
        return plain, hidden, {**info, "prompt_tokens": len(tokens)}

    def choice_logps(self, text: str, endings: list[str], cancel: threading.Event | None = None) -> list[float]:
        """log P(text + ending | text) for each ending: one forward pass over the longest token
        prefix all the texts share, then the chain rule over each one's own tokens (a tokenizer
        may merge across the boundary: Qwen writes "{-" as one token)."""
        full = [self.engine.tokenize(text + e) for e in endings]
        common = 0
        while all(common < len(f) - 1 for f in full) and len({f[common] for f in full}) == 1:
            common += 1
        return self.context.score(full[0][:common], [f[common:] for f in full], cancel=cancel)

    def verdict_probs(self, text: str, cancel: threading.Event | None = None) -> dict[str, float]:
        """Method `score`: P of each verdict after the forced prefix, normalized over the three;
        `mass` is how much of the model's probability the three got together."""
        raw = [math.exp(lp) for lp in self.choice_logps(text, [v + "}" for v in VERDICTS], cancel)]
        mass = sum(raw)
        probs = {v: (r / mass if mass > 0 else 1 / 3) for v, r in zip(VERDICTS, raw)}
        return {**probs, "mass": mass}

    # -- one turn ------------------------------------------------------------------------------
    def calibration(self, cancel: threading.Event | None = None) -> Calibration:
        """This model's calibration: from the cache, or measured now on the shipped cases
        (background work, cancellable; minutes on CPU, once per model file)."""
        if self._calibration is None:
            self._calibration = self.calibrator.load_or_fit(
                lambda turn, ns: self.features(turn, ns, cancel=cancel)[0], self.settings.judge_method,
                self.engine.model_path, PROMPTS, plain=PLAIN, progress=self._on_progress)
        return self._calibration

    def trust(self) -> dict[str, Any]:
        """How far the loop trusts this judge, for status: the calibration's mode and figures,
        or that it is still being measured."""
        cal = self._calibration or self.calibrator.cached(
            self.calibrator.key(self.engine.model_path, self.settings.judge_method, PROMPTS))
        if cal is not None:
            self._calibration = cal
            return cal.summary()
        return {"mode": "calibrating" if self.progress else "not measured yet", "progress": self.progress}

    def _on_progress(self, done: int, total: int) -> None:
        self.progress = {"calibrating": done, "of": total}

    def judge_turn(self, turn: Turn, ns: NextState, cancel: threading.Event | None = None) -> Judgment:
        """Judge one turn (nothing is stored): the calibrated verdict, and its evidence hint."""
        cal = self.calibration(cancel)
        t0 = time.perf_counter()
        waited0 = self.context.waited_s
        x, info = self.features(turn, ns, cal.method, cancel)
        p = cal.probs(x)
        score = cal.verdict(p)
        # The hint follows the most likely verdict, confident or not: it only quotes the evidence,
        # and a teacher that reads a user's praise as a "correction" still finds the reply likely,
        # so a misread costs little, unlike a wrong-sign reward. A judge no confidence makes safe
        # (feedback_only) writes none: then only the user's own feedback teaches.
        hint = evidence_hint(turn, ns, top_verdict(p)) if cal.mode != "feedback_only" else None
        probs = {"1": p[2], "0": p[1], "-1": p[0], **{f"x_{i}": round(v, 4) for i, v in enumerate(x[:PLAIN])}}
        timings = {"total_s": round(time.perf_counter() - t0, 3),
                   "waited_for_users_s": round(self.context.waited_s - waited0, 3), **info}
        return Judgment(turn_id=turn.id, method=cal.method, score=score, judge_model=self.engine.model_path.name,  # type: ignore[arg-type]
                        probs=probs, hint=hint, judge_adapter=None, timings=timings)

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
        try:
            self.calibration(stop)
        except Cancelled:
            log.info("judge calibration stopped; it goes on at the next idle moment")
            return 0
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
                    assert turn.id is not None  # read from the database
                    skipped.add(turn.id)
                    self._failures[turn.id] = n = self._failures.get(turn.id, 0) + 1
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

