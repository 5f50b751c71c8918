"""How far to trust the judge, per model file (design §6).

The judge's raw reading of a turn (judge.Judge.features) is log P of each verdict word, whether a
tool answered, and the model's hidden state halfway up its layers where it reads the verdict
(n_embd floats).
Here a softmax regression, fitted on the shipped labeled cases (`clawd/judge/data/judge_cases.jsonl`,
the tuning split of the corpus) with the served model's own features, maps it to P(-1), P(0),
P(+1); the hidden state enters as its first COMPONENTS principal components on those cases. The
verdict words read one direction of that state; the regression finds the others that tell a
sarcastic thanks or a terse change request from approval (issue 12; bench/judge/run.py measures it).
Five-fold cross-validation on the same cases says how good that is for this model: accuracy, the wrong-sign rate (a -1 case
judged +1 or the reverse) and the share of ±1 cases decided, and picks the confidence below
which a verdict is 0. The held-out splits (tests/data/judge_heldout*.jsonl) are never read here:
only bench/judge/run.py reports on them.

The trust mode that follows:
- `trusted`: cross-validated accuracy >= judge_min_accuracy; verdicts past the confidence that
  keeps the wrong-sign rate within judge_max_wrong_sign.
- `confident_only`: below that accuracy; only verdicts past the confidence that made no
  wrong-sign error in cross-validation count. Explicit feedback always counts.
- `feedback_only`: no confidence is safe; the judge's verdicts are stored as 0 (kept for the
  record) and the loop learns only from explicit feedback.

The fit and the figures are cached under $CLAWD_HOME/judge/, keyed by the model file (name, size,
mtime), the method's prompts and the cases, so each model is measured once, in the background.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..store.records import NextState, ToolCall, Turn

log = logging.getLogger("clawd.judge")

CASES = Path(__file__).parent / "data" / "judge_cases.jsonl"
CLASSES = (-1, 0, 1)  # column order of every probability row
FOLDS = 5
L2 = 1.0  # ridge on the standardized features: ~100 cases, a handful of features
# The hidden state (n_embd: 896 for Qwen2.5-0.5B) is reduced to its first principal components
# on the cases before the regression: a few hundred cases cannot fit 896 weights per class.
# Chosen on the tuning split's cross-validation (456 cases, 4 shuffles of 5 folds, Qwen's state at
# half depth): log-loss 0.27 at 32 components, 0.23 at 48, 0.21 at 64, 0.19 at 96, 0.21 at 128,
# 0.22 at 192; ridge 1 and 3 alike, 10 worse.
COMPONENTS = 96
HIDDEN_L2 = 3.0  # ridge once the components join the features
STEPS = 2000  # gradient steps of the fit with components (enough to converge; milliseconds)
VERSION = 3  # of this fitting code; part of the cache key
TrustMode = Literal["trusted", "confident_only", "feedback_only"]
Features = Callable[[Turn, NextState], list[float]]


# -- the labeled cases ---------------------------------------------------------------------------
def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def case_turn(case: dict[str, Any], turn_id: int = 1) -> tuple[Turn, NextState]:
    """A labeled case as the judge sees a recorded turn."""
    calls = [ToolCall(id=f"call_{k}", name=t["name"], arguments=t["arguments"])
             for k, t in enumerate(case["output"]["tool_calls"])]
    turn = Turn(session_id=0, index=0, kind="main", completion_id=f"case-{case['id']}",
                request={"messages": case["messages"]}, prompt_ids=[], text=case["output"]["text"],
                tool_calls=calls, status="ok", id=turn_id)
    msgs = case["next_state"]["messages"]
    ns = NextState(turn_id=turn_id, role=case["next_state"]["role"], messages=msgs,
                   content="\n\n".join(m["content"] for m in msgs))
    return turn, ns


# -- the combiner: pure numpy -----------------------------------------------------------------------
def fit_softmax(x: np.ndarray, y: np.ndarray, l2: float = L2, steps: int = 500) -> dict[str, list]:
    """Multinomial logistic regression, x (n, d) features, y (n,) labels in CLASSES; full-batch
    gradient descent on the mean cross-entropy + l2/n·|W|² (the bias is not penalized)."""
    mean, scale = x.mean(0), x.std(0) + 1e-6
    z = (x - mean) / scale  # (n, d)
    target = np.eye(len(CLASSES))[[CLASSES.index(int(v)) for v in y]]  # (n, 3)
    n, d = z.shape
    w, b = np.zeros((d, len(CLASSES))), np.zeros(len(CLASSES))
    for _ in range(steps):
        p = _softmax(z @ w + b)  # (n, 3)
        g = p - target
        w -= 0.5 * (z.T @ g / n + 2 * l2 / n * w)
        b -= 0.5 * g.mean(0)
    return {"w": w.tolist(), "b": b.tolist(), "mean": mean.tolist(), "scale": scale.tolist()}


def _softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def fit(x: np.ndarray, y: np.ndarray, plain: int | None = None, components: int = COMPONENTS) -> dict[str, list]:
    """The calibration's model: x (n, d) is `plain` features used as they are (all of them if
    None), then the hidden state (n, d - plain), projected onto its first `components` principal
    components, fitted here on these cases only (so cross-validation refits them per fold)."""
    if plain is None or plain >= x.shape[1]:
        return fit_softmax(x, y)
    hidden = x[:, plain:]
    # rounded as stored (the cache is JSON), so the fit sees what a reload will
    center = hidden.mean(0).round(4)  # (n_embd,)
    basis = np.linalg.svd(hidden - center, full_matrices=False)[2][:min(components, len(x) - 1)].round(5)  # (k, n_embd)
    model = fit_softmax(np.hstack([x[:, :plain], (hidden - center) @ basis.T]), y, l2=HIDDEN_L2, steps=STEPS)
    return {**model, "plain": [plain], "center": center.tolist(), "basis": basis.tolist()}


def predict(model: dict[str, list], x: np.ndarray) -> np.ndarray:
    """P over CLASSES, (n, 3), for features x (n, d)."""
    if "basis" in model:
        plain = int(model["plain"][0])
        x = np.hstack([x[:, :plain], (x[:, plain:] - np.array(model["center"])) @ np.array(model["basis"]).T])
    z = (x - np.array(model["mean"])) / np.array(model["scale"])
    return _softmax(z @ np.array(model["w"]) + np.array(model["b"]))


def folds(y: np.ndarray, k: int = FOLDS, shuffle: int | None = None) -> np.ndarray:
    """A stratified fold number for each case: within each label, round robin, in file order (the
    daemon's, deterministic) or in an order shuffled with seed `shuffle` (bench/judge/layers.py)."""
    out = np.zeros(len(y), dtype=int)
    rng = None if shuffle is None else np.random.default_rng(shuffle)
    for label in CLASSES:
        idx = np.flatnonzero(y == label)
        if rng is not None:
            rng.shuffle(idx)
        out[idx] = np.arange(len(idx)) % k
    return out


def cross_val_probs(x: np.ndarray, y: np.ndarray, plain: int | None = None, k: int = FOLDS,
                    components: int = COMPONENTS, shuffle: int | None = None) -> np.ndarray:
    """Each case's P from a fit on the other folds: what the judge would say of a case it was not fitted on."""
    f, out = folds(y, k, shuffle), np.zeros((len(y), len(CLASSES)))
    for i in range(k):
        test = f == i
        if test.any() and (~test).any():
            out[test] = predict(fit(x[~test], y[~test], plain, components), x[test])
    return out


def verdicts(p: np.ndarray, threshold: float | None) -> np.ndarray:
    """The most likely class if its probability reaches `threshold`, else 0; None: always 0."""
    if threshold is None:
        return np.zeros(len(p), dtype=int)
    top = p.argmax(1)
    return np.where(p.max(1) >= threshold, np.array(CLASSES)[top], 0)


def top_verdict(p: list[float]) -> int:
    """The most likely class, however unsure."""
    return CLASSES[int(np.argmax(p))]


def metrics(v: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """accuracy over all cases; over the ±1 cases, the wrong-sign rate and the share decided."""
    signed = y != 0
    n = max(int(signed.sum()), 1)
    return {"accuracy": round(float((v == y).mean()), 4) if len(y) else 0.0,
            "wrong_sign": round(float(((v * y) < 0).sum() / n), 4),
            "decided": round(float(((v != 0) & signed).sum() / n), 4)}


THRESHOLDS = [round(0.34 + 0.01 * i, 2) for i in range(66)]  # 0.34 ... 0.99


def best_threshold(p: np.ndarray, y: np.ndarray, max_wrong_sign: float) -> float | None:
    """The threshold of highest accuracy among those within `max_wrong_sign` (ties: the lowest,
    which decides most); None if none is."""
    best: tuple[float, float] | None = None
    for t in THRESHOLDS:
        m = metrics(verdicts(p, t), y)
        if m["wrong_sign"] <= max_wrong_sign + 1e-9 and m["decided"] > 0 and (best is None or m["accuracy"] > best[1]):
            best = (t, m["accuracy"])
    return best[0] if best else None


# -- the per-model record -------------------------------------------------------------------------
@dataclass
class Calibration:
    model: str  # the model file's name
    method: str
    mode: TrustMode
    threshold: float | None  # confidence a verdict needs; None: the judge's verdicts never count
    cases: int
    cv: dict[str, float]  # cross-validated accuracy, wrong_sign, decided at `threshold` (the mode's)
    cv_trusted: dict[str, float]  # the same at the trusted threshold, whether or not trusted
    seconds_per_case: float
    fit: dict[str, list] = field(repr=False, default_factory=dict)
    created: float = field(default_factory=time.time)

    def probs(self, x: list[float]) -> list[float]:
        """P(-1), P(0), P(+1) for one turn's features."""
        return [round(float(v), 4) for v in predict(self.fit, np.array([x]))[0]]

    def verdict(self, p: list[float]) -> int:
        return int(verdicts(np.array([p]), self.threshold)[0])

    def summary(self) -> dict[str, Any]:
        """What status shows."""
        d = asdict(self)
        d.pop("fit")
        return d


def calibrate(x: np.ndarray, y: np.ndarray, model: str, method: str, min_accuracy: float,
              max_wrong_sign: float, seconds_per_case: float, plain: int | None = None) -> Calibration:
    """Fit on all cases; judge the fit by cross-validation; choose the mode and its threshold."""
    p = cross_val_probs(x, y, plain)
    t_trusted = best_threshold(p, y, max_wrong_sign)
    cv_trusted = metrics(verdicts(p, t_trusted), y)
    if t_trusted is not None and cv_trusted["accuracy"] >= min_accuracy:
        mode: TrustMode = "trusted"
        threshold: float | None = t_trusted
    else:
        threshold = best_threshold(p, y, 0.0)
        mode = "confident_only" if threshold is not None else "feedback_only"
    return Calibration(model=model, method=method, mode=mode, threshold=threshold, cases=len(y),
                       cv=metrics(verdicts(p, threshold), y), cv_trusted=cv_trusted,
                       seconds_per_case=round(seconds_per_case, 3), fit=fit(x, y, plain))


class Calibrator:
    """Measures a model's judge on the shipped cases once, and caches the result."""

    def __init__(self, cache_dir: Path, min_accuracy: float, max_wrong_sign: float, cases: Path = CASES):
        self.cache_dir, self.min_accuracy, self.max_wrong_sign, self.cases_path = \
            cache_dir, min_accuracy, max_wrong_sign, cases
        self._partial: dict[str, list[list[float]]] = {}  # cache key -> features so far (a cancel keeps them)

    def key(self, model: Path, method: str, prompts: str) -> str:
        st = model.stat()
        blob = json.dumps([VERSION, model.name, st.st_size, st.st_mtime_ns, method, prompts,
                           hashlib.sha256(self.cases_path.read_bytes()).hexdigest(),
                           self.min_accuracy, self.max_wrong_sign])
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def cached(self, key: str) -> Calibration | None:
        path = self.cache_dir / f"{key}.json"
        if not path.is_file():
            return None
        try:
            return Calibration(**json.loads(path.read_text()))
        except (ValueError, TypeError) as e:
            log.warning("dropping the unreadable judge calibration %s (%s)", path, e)
            path.unlink(missing_ok=True)
            return None

    def load_or_fit(self, features: Features, method: str, model: Path, prompts: str, plain: int | None = None,
                    progress: Callable[[int, int], None] | None = None) -> Calibration:
        key = self.key(model, method, prompts)
        cal = self.cached(key)
        if cal is not None:
            return cal
        cases = load_cases(self.cases_path)
        xs = self._partial.setdefault(key, [])
        log.info("calibrating the judge (%s) on %d labeled cases with %s: once per model file",
                 method, len(cases), model.name)
        t0 = time.perf_counter()
        n0 = len(xs)
        for i, case in enumerate(cases[len(xs):], start=len(xs)):
            xs.append(features(*case_turn(case)))
            if progress is not None:
                progress(i + 1, len(cases))
            if (i + 1) % 20 == 0:
                log.info("judge calibration: %d of %d cases", i + 1, len(cases))
        per_case = (time.perf_counter() - t0) / max(len(cases) - n0, 1)
        cal = calibrate(np.array(xs), np.array([c["label"] for c in cases]), model.name, method,
                        self.min_accuracy, self.max_wrong_sign, per_case, plain)
        self._partial.pop(key, None)
        self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.cache_dir / f".{key}.tmp"
        tmp.write_text(json.dumps(asdict(cal)))
        os.replace(tmp, self.cache_dir / f"{key}.json")
        log.info("judge calibration for %s: %s (cross-validated accuracy %.2f, wrong-sign %.3f, decided %.2f, "
                 "threshold %s)", model.name, cal.mode, cal.cv["accuracy"], cal.cv["wrong_sign"], cal.cv["decided"],
                 cal.threshold)
        return cal
