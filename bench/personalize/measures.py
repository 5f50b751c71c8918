"""Continuous measures of an answer, and bootstrap intervals: what the learning bench reports beside
each pass rate, so that a change too small to flip a checker still shows (issue 27).

A pass rate over 32 prompts moves in steps of 1/32; the mean sentence count or list-line count of
the same answers moves before any answer crosses the line. Every figure comes with a percentile
bootstrap 95% interval over prompts (`interval`); a gain is the mean of per-prompt differences on
the same prompts (`paired`), so the spread between prompts does not widen it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from bench.personalize.checkers import (
    _FENCE,
    _IMPERIAL,
    _LIST_LINE,
    _MARKUP,
    _METRIC,
    _function_words,
    count_sentences,
    preamble,
    signed_off,
)
from clawd.engine.repetition import loops


def runs_in_circles(reply: str) -> bool:
    """The reply loops: `engine.repetition.loops` on its words, as the bench reads any answer
    (text, whatever the model's tokenizer)."""
    return loops(reply.lower().split()) is not None


def measures(reply: str) -> dict[str, float]:
    """The continuous measures of one reply (pure): each a number, so a mean over prompts is defined.

    - sentences: count_sentences, the brevity checker's count;
    - list_lines: lines that open with a bullet or a number ("- ", "2. ");
    - words: answer length in words;
    - metric_units, imperial_units: unit mentions of each system;
    - sign_off: 1 if the reply ends with the sign-off, else 0;
    - french_share: French function words / (French + English ones), 0 with neither;
    - code_fences: ``` fence lines (2 a block);
    - markup: bold spans and heading lines;
    - preamble: 1 if the reply opens with a preamble, else 0;
    - paragraphs: blocks of text between blank lines;
    - loops: 1 if the reply runs in circles (most of its word trigrams repeats, `engine.repetition.loops`), else 0.
    """
    fr, en = _function_words(reply)
    return {
        "sentences": float(count_sentences(reply)),
        "list_lines": float(len(_LIST_LINE.findall(reply))),
        "words": float(len(reply.split())),
        "metric_units": float(len(_METRIC.findall(reply))),
        "imperial_units": float(len(_IMPERIAL.findall(reply))),
        "sign_off": float(signed_off(reply)),
        "french_share": fr / (fr + en) if fr + en else 0.0,
        "code_fences": float(len(_FENCE.findall(reply))),
        "markup": float(len(_MARKUP.findall(reply))),
        "preamble": float(preamble(reply)),
        "paragraphs": float(sum(1 for block in reply.strip().split("\n\n") if block.strip())),
        "loops": float(runs_in_circles(reply)),
    }


def mean_measures(replies: Sequence[str]) -> dict[str, float]:
    rows = [measures(r) for r in replies]
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]} if rows else {}


RESAMPLES = 10_000


def interval(values: Sequence[float], resamples: int = RESAMPLES, seed: int = 0,
             level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its percentile bootstrap interval at `level`, from `resamples`
    resamples of `values` with replacement, seeded so a report is reproducible. Quantiles are the
    order statistics at floor(q · resamples) (clamped), no interpolation: on a small sample the
    bootstrap distribution is a handful of atoms, and an interval between atoms would be made up."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    rng = random.Random(seed)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    alpha = (1 - level) / 2

    def at(q: float) -> float:
        return means[min(resamples - 1, max(0, int(q * resamples)))]

    return sum(values) / n, at(alpha), at(1 - alpha)


def paired(after: Sequence[float], before: Sequence[float], **kw) -> tuple[float, float, float]:
    """The mean change from `before` to `after` on the same prompts, with its bootstrap interval
    (the per-prompt differences resampled together)."""
    if len(after) != len(before):
        raise ValueError(f"paired measures need the same prompts: {len(after)} against {len(before)}")
    return interval([a - b for a, b in zip(after, before)], **kw)


def share_of_oracle(loop_gain: float, oracle_gain: float) -> float | None:
    """The loop's gain as a share of the oracle's (None when the oracle gained nothing: no scale)."""
    return loop_gain / oracle_gain if oracle_gain > 0 else None
