"""What makes an answer degenerate, read from its tokens: shared by the gate (an adapter whose
answers are degenerate or repeat themselves more than the base's is rejected) and GRPO's scorer (a
sampled answer that is degenerate gets the least reward, whatever the user's form it is in)."""

from __future__ import annotations

import itertools
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
