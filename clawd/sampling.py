"""Token choice and log-probabilities from a row of logits, shared by the serving context
(engine.py), the judge's background context (background.py) and the gate: pure numpy."""

from __future__ import annotations

import math

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(V,) logits → (V,) float64 log-probabilities."""
    z = logits.astype(np.float64) - float(logits.max())
    return z - math.log(float(np.exp(z).sum()))


def sample(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """A token from softmax(logits / temperature); greedy at temperature 0."""
    if temperature <= 0:
        return int(logits.argmax())
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    return int(rng.choice(len(p), p=p / p.sum()))
