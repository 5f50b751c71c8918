"""The gate's probe set (probes.jsonl, shipped in the package) and how its answers are read.

Answer-checked probes have one right answer: arithmetic, facts, an instruction to follow
("answer in one word", "reply in uppercase") and a short tool call (one tool offered; its name
and arguments are checked). 24 of them sit nearer the edge of a 0.5B model's competence
(two-digit sums, less common facts): a set of only easy ones lost nothing on an adapter that cost
the bench's harder questions three answers (these have not yet been seen to catch one either).
Each fact is asked twice in different words, so that one fact an adapter has come to believe
wrongly costs two probes whichever way it is asked. General probes are open questions with no
answer to check: the gate measures KL to the base weights on them. Open probes are everyday
"why" and "how" questions answered at length (`GateConfig.open_tokens`), for the repetition
check alone: adapters that looped on 7 of 52 of the learning bench's held-out answers did so after
80-150 words, where no other probe's answer reaches (docs/learning.md, stop 56).

None of these questions is one of bench/personalize/scenarios.py's: the benchmark measures what
training costs, and a gate tuned on its questions would hide exactly that.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from ..engine.repetition import words

KINDS = ("arithmetic", "fact", "instruction", "tool", "general", "open")
UNCHECKED = ("general", "open")  # no answer to check


@dataclass(frozen=True)
class Probe:
    id: str
    kind: str
    q: str
    accept: tuple[str, ...] = ()  # right when the answer holds one of these as a whole word
    format: str | None = None  # instruction probes: what the whole answer must look like (FORMATS)
    tool: dict[str, Any] | None = field(default=None, hash=False)  # tool probes: the one tool offered
    call: dict[str, Any] | None = field(default=None, hash=False)  # ... and the call expected

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.q}]

    def tools(self) -> list[dict[str, Any]] | None:
        return [self.tool] if self.tool else None


@lru_cache(maxsize=1)
def load_probes() -> tuple[Probe, ...]:
    text = resources.files(__package__).joinpath("probes.jsonl").read_text()
    probes = []
    for line in text.splitlines():
        if line.strip():
            d = json.loads(line)
            probes.append(Probe(**{**d, "accept": tuple(d.get("accept", ()))}))
    return tuple(probes)


def accepted_at(text: str, accepted: tuple[str, ...]) -> list[int]:
    """Where in `text` an accepted answer begins, as a whole word, so that "2" is not found in "12"
    nor "cat" in "catch" (case-blind: the accepted answers are written in lower case)."""
    low = text.lower()
    return [m.start() for a in accepted for m in re.finditer(rf"(?<!\w){re.escape(a)}(?!\w)", low)]


def contains(text: str, accepted: tuple[str, ...]) -> bool:
    return bool(accepted_at(text, accepted))


def _letters(text: str) -> str:
    return "".join(c for c in text if c.isalpha())


FORMATS = {
    "one_word": lambda t: len(words(t)) == 1,
    "uppercase": lambda t: bool(_letters(t)) and _letters(t).isupper(),
    "lowercase": lambda t: bool(_letters(t)) and _letters(t).islower(),
    "yes_no": lambda t: words(t) in (["yes"], ["no"]),
    "number": lambda t: re.fullmatch(r"\s*-?\d[\d,]*(?:\.\d+)?\s*\.?\s*", t) is not None,
}


def tool_call(text: str) -> dict[str, Any] | None:
    """The first JSON object naming a function anywhere in the answer: inside <tool_call> tags,
    a ``` fence or bare, which is how small models write calls. Arguments given as a JSON string
    are decoded."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", obj.get("parameters", {}))
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    args = None
            return {"name": obj["name"], "arguments": args if isinstance(args, dict) else None}
    return None


def _argument_right(expected: Any, got: Any) -> bool:
    if isinstance(expected, str):
        return isinstance(got, str) and expected.lower() in got.lower()
    try:
        return float(got) == float(expected)
    except (TypeError, ValueError):
        return False


def right(probe: Probe, text: str) -> bool | None:
    """Whether `text` answers `probe` rightly; None for a general or open probe (nothing to check)."""
    if probe.kind in UNCHECKED:
        return None
    if probe.kind == "tool":
        call = tool_call(text)
        want = probe.call or {}
        return (call is not None and call["name"] == want.get("name") and call["arguments"] is not None
                and all(_argument_right(v, call["arguments"].get(k)) for k, v in want.get("arguments", {}).items()))
    ok = contains(text, probe.accept)
    if probe.format is not None:
        ok = ok and FORMATS[probe.format](text)
    return ok


# A refusal opens the answer: an apology or "I", then that it cannot or will not. Every probe is a
# harmless question, so an adapter that newly refuses one has learned to refuse (seen on no_lists:
# a second adapter answered two of the probes it lost "I'm sorry, but I can't assist with that.").
_REFUSAL = re.compile(r"^\W*(?:(?:i'?m |i am |i )?(?:so )?(?:sorry|apologi[sz]e)\b[^.!?\n]{0,40}?\b|as an ai\b[^.!?\n]{0,40}?\b)?"
                      r"i (?:can ?not|can'?t|am unable to|'?m unable to|am not able to|won'?t|will not)\s+"
                      r"(?:assist|help|answer|provide|comply|do that|fulfill|respond)")


def refuses(answer: str) -> bool:
    """The answer opens by declining to answer ("I'm sorry, but I can't assist with that.")."""
    return bool(_REFUSAL.match(answer.strip().lower().replace("\u2019", "'")))


STAMP_WORDS = 4  # an n-gram this long that recurs across unrelated answers is stamped, not said


def _grams(text: str, n: int = STAMP_WORDS) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def stamped_phrase(candidate: list[str], base: list[str]) -> dict[str, Any] | None:
    """A phrase of STAMP_WORDS words in more than half of the candidate's answers and in at most
    half as large a share of the base's answers; None if there is none."""
    cand = Counter(g for t in candidate for g in _grams(t))
    base_grams = [_grams(t) for t in base]
    for gram, n in cand.most_common():
        if n * 2 <= len(candidate):
            return None
        n_base = sum(gram in g for g in base_grams)
        if n_base * 2 * len(candidate) <= n * max(len(base), 1):
            return {"phrase": " ".join(gram), "candidate": n, "answers": len(candidate), "base": n_base,
                    "base_answers": len(base)}
    return None
