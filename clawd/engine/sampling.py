"""Token choice and log-probabilities from a row of logits, shared by the serving context
(engine.py), the judge's background context (background.py) and the gate: pure numpy."""

from __future__ import annotations

import math

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(V,) logits → (V,) float64 log-probabilities."""
    z = logits.astype(np.float64) - float(logits.max())
    return z - math.log(float(np.exp(z).sum()))


def sample(logits: np.ndarray, temperature: float, rng: np.random.Generator, top_p: float = 1.0) -> int:
    """A token from softmax(logits / temperature), cut to the smallest set of most likely tokens
    whose probability reaches `top_p`; greedy at temperature 0. -inf logits (a grammar's mask)
    are never chosen."""
    if temperature <= 0:
        return int(logits.argmax())
    ids = np.flatnonzero(np.isfinite(logits))  # under a grammar: a few tokens, not the vocabulary
    z = logits[ids].astype(np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p)
        keep = order[: int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1]
        ids, p = ids[keep], p[keep] / p[keep].sum()
    return int(ids[rng.choice(len(p), p=p)])
