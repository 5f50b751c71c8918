"""Where the judge should read the model's state: every block's output, on the tuning split only.

    python -m bench.judge.layers --model "$(bash scripts/qwen-model.sh)" --threads 2
    python -m bench.judge.layers --components 32,64,96,128 --layers 12,13   # the component grid

How the judge's calibration (clawd/judge/calibration.py) was chosen: for every tuning case, the
verdict words' log P and the state after every block at the verdict's place (one decode taps
them all, BackgroundContext.hidden), then each choice of block and number of principal components
scored by repeated stratified 5-fold cross-validation of the daemon's own fit: log-loss, accuracy
and wrong-sign of the most likely verdict, and accuracy and share decided at the confidence that
keeps wrong-sign within 3% (picked per shuffle, so optimistic, but alike for every choice). The
held-out splits are never read here. Features are kept in bench/out/ (about 2 minutes of
SmolLM2 and 6 of Qwen on 2 cores to measure; the scoring takes seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from clawd.config import Settings, bundled_model_path
from clawd.engine.engine import Engine
from clawd.judge.calibration import (
    CASES,
    CLASSES,
    COMPONENTS,
    HIDDEN_L2,
    best_threshold,
    case_turn,
    cross_val_probs,
    load_cases,
    metrics,
    verdicts,
)
from clawd.judge.judge import PLAIN, PROMPTS, Judge

ROOT = Path(__file__).resolve().parents[2]


def states(model: Path, threads: int, limit: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PLAIN features (n, PLAIN), the state after every block and the final one (n, n_layer, n_embd),
    labels (n,): measured once per model file and case set, then read from bench/out/."""
    cases = load_cases(CASES)[:limit]
    key = hashlib.sha256(json.dumps([model.name, model.stat().st_size, PROMPTS, cases]).encode()).hexdigest()[:16]
    cache = ROOT / "bench" / "out" / f"judge-layers-{model.stem}-{key}.npz"
    if cache.is_file():
        got = np.load(cache)
        return got["plain"], got["states"], got["labels"]
    engine = Engine(model, n_ctx=4096, threads=threads)
    judge = Judge(engine, None, Settings(home=Path(tempfile.mkdtemp())))
    layers: tuple[int | None, ...] = (*range(judge.context.n_layer - 1), None)  # the last block is read as the final state
    plain, rows = [], []
    for i, c in enumerate(cases):
        p, hidden, _ = judge.raw_features(*case_turn(c), method="ask", layers=layers)
        plain.append(p)
        rows.append(np.stack([hidden[x] for x in layers]).astype(np.float32))
        print(f"  {i + 1}/{len(cases)} {c['id']}", file=sys.stderr, flush=True)
    out = np.array(plain), np.stack(rows), np.array([c["label"] for c in cases])
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cache, plain=out[0], states=out[1], labels=out[2])
    return out


def score(x: np.ndarray, y: np.ndarray, shuffles: int, components: int) -> dict[str, float]:
    """The daemon's fit, cross-validated over `shuffles` shuffles of the folds: log-loss, the most
    likely verdict's accuracy and wrong-sign, and accuracy and share decided at the confidence that
    keeps wrong-sign within 3% (picked per shuffle, so optimistic, but alike for every choice)."""
    target, out = np.array([CLASSES.index(v) for v in y]), []
    for r in range(shuffles):
        p = cross_val_probs(x, y, PLAIN, components=components, shuffle=r)  # (n, 3)
        top, t3 = metrics(verdicts(p, 0.0), y), best_threshold(p, y, 0.03)
        at3 = metrics(verdicts(p, t3), y)
        out.append({"log_loss": float(-np.log(np.maximum(p[np.arange(len(y)), target], 1e-9)).mean()),
                    "accuracy": top["accuracy"], "wrong_sign": top["wrong_sign"],
                    "accuracy_at_3pct": at3["accuracy"], "decided_at_3pct": at3["decided"]})
    return {k: float(np.mean([o[k] for o in out])) for k in out[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=bundled_model_path())
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--layers", help="comma-separated blocks to score (default: every one, and 'final')")
    ap.add_argument("--components", default=str(COMPONENTS), help="comma-separated counts to try")
    ap.add_argument("--shuffles", type=int, default=4)
    ap.add_argument("--limit", type=int, help="only the first N tuning cases (a quick look)")
    args = ap.parse_args()
    plain, st, y = states(args.model, args.threads, args.limit)
    names = [str(i) for i in range(st.shape[1] - 1)] + ["final"]
    chosen = args.layers.split(",") if args.layers else names
    print(f"{args.model.name}: {len(y)} tuning cases, {st.shape[1] - 1} blocks + final, ridge {HIDDEN_L2}")
    words = score(plain, y, args.shuffles, 0)  # no hidden columns: the words alone
    print(f"{'words alone':22s} " + "  ".join(f"{k} {v:.3f}" for k, v in words.items()))
    for k in [int(c) for c in args.components.split(",")]:
        for name in chosen:
            x = np.hstack([plain, st[:, names.index(name)]])
            m = score(x, y, args.shuffles, k)
            print(f"block {name:>5s}, {k:3d} comp.  " + "  ".join(f"{key} {v:.3f}" for key, v in m.items()), flush=True)


if __name__ == "__main__":
    main()
