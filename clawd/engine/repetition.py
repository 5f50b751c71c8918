"""What makes an answer say nothing, read from its tokens and words: shared by the gate (an adapter
whose answers are degenerate, echo their question or repeat themselves more than the base's is
rejected) and GRPO's scorer (a sampled answer that loops or echoes gets the least reward, whatever
the user's form it is in)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any


def degenerate(ids: list[int], text: str) -> str | None:
    """Why an answer is degenerate, or None: empty, one token repeated 8 times in a row, or
    most of its token trigrams repeats."""
    if not text.strip():
        return "empty"
    run = best = 1
    for a, b in itertools.pairwise(ids):
        run = run + 1 if a == b else 1
        best = max(best, run)
    if best >= 8:
        return f"token repeated {best}×"
    return loops(ids)


def loops(seq: Sequence[Any]) -> str | None:
    """Why a sequence runs in circles ("a black hole is a black hole is …"), or None: of its
    trigrams (16 at least), fewer than half distinct. Tokens here; words in the learning bench,
    which reads answers as text whatever the model's tokenizer."""
    grams = _trigrams(seq)
    if len(grams) >= 16 and len(set(grams)) / len(grams) < 0.5:
        return f"loops ({len(set(grams))}/{len(grams)} distinct trigrams)"
    return None


def distinct_share(seq: Sequence[Any]) -> float:
    """The share of a sequence's trigrams that are distinct: 1.0 when none repeats (or it has none),
    falling toward 0 as it runs in circles."""
    grams = _trigrams(seq)
    return len(set(grams)) / len(grams) if grams else 1.0


def _trigrams(seq: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [tuple(seq[i:i + 3]) for i in range(len(seq) - 2)]


def words(text: str) -> list[str]:
    """Lower-case words and numbers ("don't" one word): how the probes and the echo check read text."""
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


# An echo is made of the question's words: at least this share of them, and no word the question
# lacks but these (a fraction of words; "The capital of Germany is Berlin." has new content).
ECHO_COVER = 0.8
_FUNCTION_WORDS = frozenset("a an the is are was it of to in and or so do does you i".split())


def echoes(question: str, answer: str) -> bool:
    """The answer repeats the question back, word for word or nearly, and adds nothing."""
    q, a = set(words(question)), words(answer)
    if len(a) < 3 or not q:
        return False
    covered = len(q & set(a)) / len(q)
    new = [w for w in a if w not in q and w not in _FUNCTION_WORDS]
    return covered >= ECHO_COVER and not new
