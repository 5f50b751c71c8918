"""Does the scorer's gate pass the users it can rank, and stop the ones it cannot? (issue 28)

The daemon's GRPO scorer decides groups with a fit on the user's own judged answers, but only once
that fit, each answer scored by a fit on the others, ranks the user's verdicts above chance
(`clawd.judge.scorer.signal`, a one-sided 5% bar: not tuned). Each scenario of the scorer's
labeled cases is one simulated user, its cases in file order their history (as in
bench/judge/user_fit.py). For every case with at least --history earlier ones, this asks:

- **a real user** (the checker's labels, a share --noise flipped: the judge's own error): does the
  gate pass on their history, and how well does the fit rank this case's answers, where it passes
  and where it does not (pairwise AUC against the true labels)?
- **a user whose verdicts carry nothing** (the same answers, each user's labels shuffled among the
  answers of each case, or of the whole scenario; many times over): how often does the gate pass
  anyway? The bar is a 5% test, but one user's cases are not independent tries (each history holds
  the one before), and here five answers share each question, so a fit can learn a question's share
  accepted across folds; in the daemon a judged answer mostly has a prompt of its own.

    python -m bench.judge.user_gate --model X.gguf

Writes bench/results/scorer-user-gate-<model>.json; features are cached as user_fit.py's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from bench.judge.scorer import HELDOUT, ROOT
from bench.judge.user_fit import features, noisy, noisy_user_rewards, scorable
from clawd.judge.scorer import CASES, COMPONENTS, MIN_EACH, histories, load_cases, pair_metrics, signal


def gate(cases: list[dict], x: np.ndarray, labels: np.ndarray, history: int) -> list[dict]:
    """For each case with `history` earlier ones of its scenario: the gate on those earlier
    answers' `labels` (x (answers, d) and labels (answers,), every case's answers in order)."""
    out = []
    for c, idx, _ in histories(cases, history):
        y = labels[idx]
        if min(y.sum(), (~y).sum()) < MIN_EACH:
            out.append({"id": c["id"], "scenario": c["scenario"], "cv_auc": None, "needed": None, "passes": False})
            continue
        a, need = signal(x[idx], y)
        out.append({"id": c["id"], "scenario": c["scenario"], "cv_auc": round(a, 3), "needed": round(need, 3),
                    "passes": bool(a >= need)})
    return out


def shuffled(cases: list[dict], labels: np.ndarray, seed: int, within: str) -> np.ndarray:
    """A user with as many of each verdict, given at random: labels permuted among the answers of
    each case (`within` "case": every question keeps its share accepted, so a fit can still tell
    them apart by question, as a real user's can, but not within one, which is all GRPO ranks)
    or of each scenario ("scenario": shares by question at random too)."""
    rng, out = np.random.default_rng(seed), labels.copy()
    starts = np.cumsum([0] + [len(c["answers"]) for c in cases])
    if within == "case":
        blocks = [np.arange(a, b) for a, b in zip(starts[:-1], starts[1:])]
    else:
        scenario = np.array([c["scenario"] for c in cases for _ in c["answers"]])
        blocks = [np.flatnonzero(scenario == sc) for sc in sorted(set(scenario.tolist()))]
    for idx in blocks:
        out[idx] = labels[rng.permutation(idx)]
    return out


def report(cases: list[dict], x: np.ndarray, history: int, noise: float, seeds: list[int], blind: int) -> dict:
    meets = np.array([a["meets"] for c in cases for a in c["answers"]])
    scored = scorable(cases, history)
    scenarios = sorted({c["scenario"] for c in scored})
    out: dict = {"cases": len(scored), "by_scenario": {}}
    rows: dict[str, list] = {sc: [] for sc in scenarios}
    for seed in seeds:
        rewards = noisy_user_rewards(cases, x, history, noise, seed, COMPONENTS)  # fitted on the same noisy labels
        for g, r in zip(gate(cases, x, noisy(meets, noise, seed), history), rewards):
            rows[g["scenario"]].append((g, r))
    for within in ("case", "scenario"):
        passes: dict[str, list[bool]] = {sc: [] for sc in scenarios}
        for seed in range(blind):  # a user's passes are not independent (each history holds the last): many shuffles
            for r in gate(cases, x, shuffled(cases, noisy(meets, noise, seed), 1000 + seed, within), history):
                passes[r["scenario"]].append(r["passes"])
        out[f"blind_within_{within}_passes"] = {sc: round(float(np.mean(v)), 3) for sc, v in passes.items()}
    for sc, rs in rows.items():
        passed, failed = [r for g, r in rs if g["passes"]], [r for g, r in rs if not g["passes"]]
        out["by_scenario"][sc] = {
            "cases": len(rs), "passes": round(len(passed) / len(rs), 3),
            "auc_where_passed": round(pair_metrics(passed, 0.0)["auc"], 3) if passed else None,
            "auc_where_stopped": round(pair_metrics(failed, 0.0)["auc"], 3) if failed else None,
            "cv_auc": [g["cv_auc"] for g, _ in rs], "needed": [g["needed"] for g, _ in rs]}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--history", type=int, default=4, help="earlier cases a user has before their answers are scored")
    p.add_argument("--noise", type=float, default=0.1, help="share of the user's labels flipped (the judge's error)")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--blind", type=int, default=10, help="label shuffles for the user whose verdicts carry nothing")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clawd-user-fit")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict = {"model": args.model.name, "history": args.history, "noise": args.noise, "seeds": seeds,
                 "blind": args.blind}
    for name, path in (("tune", CASES), ("heldout", HELDOUT)):
        cases = load_cases(path)
        out[name] = res = report(cases, features(args.model, cases, args.cache, args.threads), args.history,
                                 args.noise, seeds, args.blind)
        print(f"{name}: {res['cases']} cases; the gate passes a user whose verdicts carry nothing within a question "
              f"on {res['blind_within_case_passes']} of their cases, and nothing at all on "
              f"{res['blind_within_scenario_passes']} ({args.blind} shuffles)", flush=True)
        for sc, r in res["by_scenario"].items():
            print(f"  {sc}: gate passes {r['passes']:.0%} of {r['cases']} cases; next-case AUC where it passes "
                  f"{r['auc_where_passed']}, where it stops {r['auc_where_stopped']}", flush=True)
    path = ROOT / "bench" / "results" / f"scorer-user-gate-{args.model.stem}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
