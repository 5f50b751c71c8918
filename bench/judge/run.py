"""Judge benchmark: how well each method's calibrated verdicts agree with hand-labeled turns.

    python -m bench.judge.run                          # bundled SmolLM2, plus Qwen2.5-0.5B if scripts/qwen-model.sh works
    python -m bench.judge.run --model X.gguf           # one model (repeatable)
    python -m bench.judge.run --methods ask --split tune   # while developing: never look at the held-out splits

For each model and method (`ask`: yes/no questions; `score`: P of each \\boxed{} verdict), the
judge's features are computed on the tuning split (clawd/judge/data/judge_cases.jsonl, what the daemon
calibrates on) and three held-out splits (tests/data/judge_heldout*.jsonl, each written separately,
never used for a choice). The calibration is fitted on the tuning split exactly as the daemon does;
the tuning figures are its 5-fold cross-validation, the held-out figures its verdicts on cases it
never saw. Reported for each: accuracy, the wrong-sign rate (a -1 case judged +1 or the
reverse, over the ±1 cases), the share of ±1 cases decided, per family, seconds per turn, and
the hint yield on corrective (-1) turns with the share of hints that quote a tool's output. Then,
for a user request that lands while the judge works, how long it waited for the engine.
Results go to bench/results/judge-<model>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from clawd.config import Settings, bundled_model_path
from clawd.engine.engine import Engine, GenInfo, Sampling
from clawd.judge.calibration import (
    CASES,
    best_threshold,
    calibrate,
    case_turn,
    cross_val_probs,
    load_cases,
    metrics,
    predict,
    top_verdict,
    verdicts,
)
from clawd.judge.judge import PLAIN, PROMPTS, Judge
from clawd.store.hints import evidence_hint, quotes_tool_output, tool_texts

ROOT = Path(__file__).resolve().parents[2]

# Three held-out splits, each written apart from the tuning split and from each other; no choice
# looks at any. The second was written after the first had been measured several times; the third
# holds only change requests that quote a friendly phrase (and quoted praise), the family the
# personalize bench found read as thanks.
HELDOUT = {"heldout": ROOT / "tests" / "data" / "judge_heldout.jsonl",
           "heldout2": ROOT / "tests" / "data" / "judge_heldout2.jsonl",
           "heldout3": ROOT / "tests" / "data" / "judge_heldout3.jsonl"}


def features(judge: Judge, cases: list[dict], method: str) -> tuple[dict[str, np.ndarray], float]:
    """Each case's features as the daemon reads them ("mid": the state at half depth), and beside
    them with the final hidden state ("final", the calibration before) from the same decode.
    Kept in bench/out/ by model, method, prompts and cases, so a rerun (or a crash after the
    tuning split) does not measure them again."""
    key = hashlib.sha256(json.dumps([judge.engine.model_path.name, method, PROMPTS, judge.layer, cases]).encode())
    cache = ROOT / "bench" / "out" / f"judge-features-{key.hexdigest()[:16]}.npz"
    if cache.is_file():
        got = np.load(cache)
        return {"mid": got["mid"], "final": got["final"]}, float(got["seconds"])
    xs: dict[str, list] = {"mid": [], "final": []}
    t0 = time.perf_counter()
    for i, c in enumerate(cases):
        plain, hidden, _ = judge.raw_features(*case_turn(c), method=method, layers=(judge.layer, None))
        xs["mid"].append(plain + hidden[judge.layer].tolist())
        xs["final"].append(plain + hidden[None].tolist())
        print(f"  {method} {i + 1}/{len(cases)} {c['id']:28s} label {c['label']:+d}  "
              + " ".join(f"{v:+.2f}" for v in plain), file=sys.stderr, flush=True)
    out, seconds = {k: np.array(v) for k, v in xs.items()}, (time.perf_counter() - t0) / max(len(cases), 1)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cache, seconds=seconds, **out)
    return out, seconds


def report(cases: list[dict], v: np.ndarray, p: np.ndarray) -> dict:
    y = np.array([c["label"] for c in cases])
    fam: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        fam[c.get("family", c.get("category", "?"))].append(i)
    hints, quoted, corrective = 0, 0, 0
    for i, c in enumerate(cases):
        if c["label"] != -1:
            continue
        corrective += 1
        turn, ns = case_turn(c)
        h = evidence_hint(turn, ns, top_verdict(p[i]))  # as Judge.judge_turn does
        if h is not None:
            hints += 1
            quoted += quotes_tool_output(h, tool_texts(turn, ns))
    return {**metrics(v, y), "n": len(cases),
            "confusion": {str(a): {str(b): int(((y == a) & (v == b)).sum()) for b in (1, 0, -1)} for a in (1, 0, -1)},
            "families": {f: {**metrics(v[ix], y[ix]), "n": len(ix)} for f, ix in sorted(fam.items())},
            "hint_yield": round(hints / max(corrective, 1), 3), "hints_quoting_tool_output": quoted,
            "cases": [{"id": c["id"], "label": c["label"], "verdict": int(v[i]), "p": [round(float(q), 3) for q in p[i]]}
                      for i, c in enumerate(cases)]}


def timing(judge: Judge, cases: list[dict], method: str) -> dict:
    """Seconds per judged turn once the fixed prefix is cached, on every 5th case: what the
    daemon pays per turn of a backlog (the figures above also hold the first, cold prefix)."""
    judge.features(*case_turn(cases[0]), method=method)
    ts = []
    for c in cases[1::5]:
        t = time.perf_counter()
        judge.features(*case_turn(c), method=method)
        ts.append(time.perf_counter() - t)
    return {"turns": len(ts), "median_s": round(float(np.median(ts)), 3), "mean_s": round(float(np.mean(ts)), 3),
            "max_s": round(max(ts), 3)}


def mid_judge_wait(judge: Judge, cases: list[dict], reps: int) -> dict:
    """A user request sent while the judge evaluates a turn: how long it waited for the engine
    (the judge yields between decode steps and aborts a prompt batch for it)."""
    engine = judge.engine
    waits = []
    for i in range(reps):
        judge.context._truncate(0)  # a cold judge prompt, so the request lands in its evaluation
        t = threading.Thread(target=judge.features, args=case_turn(cases[(7 * i) % len(cases)]))
        t.start()
        time.sleep(0.3 + 0.2 * i)
        prompt = engine.tokenize(engine.template.render([{"role": "user", "content": f"Request {i}: name a fruit."}]))
        t0 = time.perf_counter()
        with engine.lock.user():
            waits.append(time.perf_counter() - t0)
            gen = engine.generate(prompt, Sampling(temperature=0, max_tokens=1), GenInfo())
            next(gen, None)
            gen.close()
        t.join()
    return {"lock_wait_s": [round(w, 4) for w in waits], "lock_wait_s_max": round(max(waits), 4)}


def evaluate(settings: Settings, model: Path, method: str, tune: list[dict], held: dict[str, list[dict]],
             x: np.ndarray, xh: dict[str, np.ndarray], plain: int | None, s_tune: float, s_held: float) -> dict:
    """Calibrate on the tuning split as the daemon does; its cross-validation, and its verdicts
    on each held-out split."""
    y = np.array([c["label"] for c in tune])
    cal = calibrate(x, y, model.name, method, settings.judge_min_accuracy, settings.judge_max_wrong_sign, s_tune,
                    plain=plain)
    p_cv = cross_val_probs(x, y, plain)
    res = {"mode": cal.mode, "threshold": cal.threshold, "s_per_turn": round(s_tune, 3), "cv_trusted": cal.cv_trusted,
           "tune_cv": report(tune, verdicts(p_cv, cal.threshold), p_cv)}
    # what a trusted judge would decide: the threshold that kept cross-validated wrong-sign within the maximum
    t3 = best_threshold(p_cv, y, settings.judge_max_wrong_sign)
    for split, cases in held.items():
        ph = predict(cal.fit, xh[split])
        res[split] = report(cases, verdicts(ph, cal.threshold), ph)
        res[split]["at_trusted_threshold"] = metrics(verdicts(ph, t3), np.array([c["label"] for c in cases]))
    n_held = sum(len(c) for c in held.values())
    res["s_per_turn"] = round((s_tune * len(tune) + s_held * n_held) / (len(tune) + n_held), 3)
    return res


def qwen_model() -> Path | None:
    r = subprocess.run(["bash", str(ROOT / "scripts" / "qwen-model.sh")], capture_output=True, text=True)
    path = Path(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None
    return path if path and path.is_file() else None


def print_summary(name: str, method: str, res: dict) -> None:
    for split in ("tune_cv", *HELDOUT):
        if split not in res:
            continue
        r = res[split]
        print(f"  {method:5s} {split:8s} accuracy {r['accuracy']:.2f}  wrong-sign {r['wrong_sign']:.3f}  "
              f"decided {r['decided']:.2f}  hint yield {r['hint_yield']:.2f} ({r['hints_quoting_tool_output']} quote a tool)"
              f"  n={r['n']}")
        if "at_trusted_threshold" in r:
            m = r["at_trusted_threshold"]
            print(f"        at the trusted threshold: accuracy {m['accuracy']:.2f}  wrong-sign {m['wrong_sign']:.3f}  "
                  f"decided {m['decided']:.2f}")
        for f, m in r["families"].items():
            print(f"        {f:24s} acc {m['accuracy']:.2f} wrong-sign {m['wrong_sign']:.2f} decided {m['decided']:.2f} n={m['n']}")
    print(f"  {method} mode {res['mode']} threshold {res['threshold']}  {res['s_per_turn']:.2f} s/turn")


def write(args: argparse.Namespace, model: Path, out: dict) -> Path:
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"judge-{model.stem}{'-tune' if args.split == 'tune' else ''}.json"
    path.write_text(json.dumps(out, indent=1))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", type=Path, help="GGUF to judge with (repeatable)")
    ap.add_argument("--methods", default="ask,score")
    ap.add_argument("--split", choices=("tune", "all"), default="all", help="'tune' never reads the held-out splits")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--wait-reps", type=int, default=3, help="user requests sent mid-judge (0 = skip)")
    ap.add_argument("--timing-only", action="store_true", help="only seconds per turn (run it on a quiet machine)")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    models = args.model or [m for m in (bundled_model_path(), qwen_model()) if m is not None]
    tune = load_cases(CASES)
    held = {name: load_cases(path) for name, path in HELDOUT.items()} if args.split == "all" else {}
    settings = Settings(home=Path(tempfile.mkdtemp()))
    for model in models:
        engine = Engine(model, n_ctx=settings.judge_budget_tokens + 1024, threads=args.threads)
        judge = Judge(engine, None, settings)
        out: dict = {"model": model.name, "tune_cases": len(tune), "heldout_cases": {k: len(v) for k, v in held.items()},
                     "min_accuracy": settings.judge_min_accuracy, "max_wrong_sign": settings.judge_max_wrong_sign}
        print(f"\n{model.name}: {len(tune)} tuning cases, held out {out['heldout_cases']}", file=sys.stderr)
        if args.timing_only:
            for method in args.methods.split(","):
                print(f"{model.name} {method}: {timing(judge, tune, method)}")
            continue
        for method in args.methods.split(","):
            x, s_tune = features(judge, tune, method)
            xh, s_held = {}, 0.0
            for split, cases in held.items():
                xh[split], s = features(judge, cases, method)
                s_held += s * len(cases) / sum(len(c) for c in held.values())
            # what the daemon calibrates (the verdict words and the state at half depth), and
            # beside it the final hidden state instead (the calibration before), and the verdict
            # words alone (before any hidden state)
            for name, layer, plain, cols in ((method, "mid", PLAIN, slice(None)),
                                             (f"{method}_final_state", "final", PLAIN, slice(None)),
                                             (f"{method}_words_only", "mid", None, slice(PLAIN))):
                out[name] = res = evaluate(settings, model, method, tune, held, x[layer][:, cols],
                                           {k: v[layer][:, cols] for k, v in xh.items()}, plain, s_tune, s_held)
                print_summary(model.name, name, res)
            write(args, model, out)  # after each method: a long run keeps what it measured
        if args.wait_reps:
            out["mid_judge"] = mid_judge_wait(judge, tune, args.wait_reps)
            print(f"  a user request mid-judge waited {out['mid_judge']['lock_wait_s']} s for the engine")
        print(f"written {write(args, model, out)}")
        sys.stdout.flush()
        del judge, engine


if __name__ == "__main__":
    main()
