"""A scorer fitted on this user's own labeled answers (issue 28): does it rank their next answers?

The daemon's GRPO scorer is one fit per model file, on shipped cases of other preferences, so it
must guess what *this* user wants from their quoted words alone; on Qwen2.5-Coder-0.5B it ranks no
better than answer length (docs/learning.md). The daemon also holds what the user did with the
answers they got: the judge's verdicts, trusted, on every main turn. This bench asks whether a fit
on those (the same features: the yes/no log-odds and the hidden state, read with the user's quoted
corrections) ranks the user's next answers better than length.

Each scenario of the scorer's cases is one simulated user, its cases in file order their history:
each case's answers are scored by a fit on that user's *earlier* cases only (at least --history of
them), labeled by the checker with a share --noise of labels flipped (the judge's own error). It
reports pairwise AUC within cases, decided and wrong-sign shares at the margin the tuning split
chooses, and the baselines (shorter first, fewer lines first, the daemon's fit on other scenarios).

    python -m bench.judge.user_fit --model X.gguf --split tune   # while choosing: never the held-out
    python -m bench.judge.user_fit --model X.gguf                # both; held-out measured, not chosen on

Results go to bench/results/scorer-user-fit-<model>.json; features are cached in --cache.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from bench.judge.scorer import HELDOUT, ROOT, baseline, cross_val_rewards
from clawd.config import Settings
from clawd.engine.engine import Engine
from clawd.judge.judge import Judge
from clawd.judge.scorer import CASES, COMPONENTS, MARGINS, Scorer, load_cases, pair_metrics, user_rewards

MAX_WRONG_SIGN = 0.03  # the daemon's judge_max_wrong_sign


def features(model: Path, cases: list[dict], cache: Path, threads: int) -> np.ndarray:
    """Scorer.probe on every answer, (answers, 1 + n_embd), cached by model file and case ids."""
    key = cache / f"probe-{model.stem}-{len(cases)}-{cases[0]['id']}-{cases[-1]['id']}.npy"
    if key.is_file():
        return np.load(key)
    settings = Settings(home=Path(tempfile.mkdtemp(prefix="clawd-user-fit-")))
    judge = Judge(Engine(model, n_ctx=4096, threads=threads), None, settings)
    scorer = Scorer(judge, settings.home / "judge", MAX_WRONG_SIGN)
    x = scorer.case_features(cases, on_case=lambda i, c: print(f"  {c['id']}", flush=True), read=scorer.probe)[0]
    cache.mkdir(parents=True, exist_ok=True)
    np.save(key, x)
    return x


def noisy(meets: np.ndarray, noise: float, seed: int) -> np.ndarray:
    """The labels a user's judge gives: each of `meets` (answers,) flipped with probability `noise`."""
    return np.where(np.random.default_rng(seed).random(len(meets)) < noise, ~meets, meets)


def noisy_user_rewards(cases: list[dict], x: np.ndarray, history: int, noise: float, seed: int,
                       components: int) -> list[list[tuple[float, bool]]]:
    """The daemon's `user_rewards` (each user's later cases scored by a fit on their earlier ones),
    fitted on labels flipped with probability `noise` (what the judge said), paired with the true ones."""
    meets = np.array([a["meets"] for c in cases for a in c["answers"]])
    scored = user_rewards(x, noisy(meets, noise, seed), cases, history, components)
    return [[(r, bool(a["meets"])) for (r, _), a in zip(case, c["answers"])] for case, c in zip(scored, scorable(cases, history))]


def scorable(cases: list[dict], history: int) -> list[dict]:
    return [c for i, c in enumerate(cases) if sum(d["scenario"] == c["scenario"] for d in cases[:i]) >= history]


def summary(rewards: list[list[tuple[float, bool]]], margin: float) -> dict:
    return {**pair_metrics(rewards, margin), "auc_any_margin": pair_metrics(rewards, 0.0)["auc"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--split", choices=("tune", "all"), default="all")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--history", type=int, default=4, help="earlier cases a user has before their answers are scored")
    p.add_argument("--noise", type=float, default=0.1, help="share of the user's labels flipped (the judge's error)")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clawd-user-fit")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict = {"model": args.model.name, "history": args.history, "noise": args.noise, "seeds": seeds}
    splits = {"tune": load_cases(CASES)} | ({"heldout": load_cases(HELDOUT)} if args.split == "all" else {})
    margins: dict[int, float] = {}
    for name, cases in splits.items():
        x = features(args.model, cases, args.cache, args.threads)
        meets = np.array([a["meets"] for c in cases for a in c["answers"]])
        scored = scorable(cases, args.history)
        res: dict = {"cases": len(scored), "length_auc": baseline(scored, len),
                     "lines_auc": baseline(scored, lambda t: t.count("\n")),
                     "length_by_scenario": {sc: round(baseline([c for c in scored if c["scenario"] == sc], len), 3)
                                            for sc in sorted({c["scenario"] for c in scored})}}
        if name == "tune":  # the daemon's fit, each scenario by a fit on the others
            starts = np.cumsum([0] + [len(c["answers"]) for c in cases])
            cv = cross_val_rewards(x, meets, [c["scenario"] for c in cases for _ in c["answers"]])
            keep = {c["id"] for c in scored}
            res["others_fit_auc"] = pair_metrics([list(zip(cv[a:b].tolist(), meets[a:b].tolist()))
                                                  for c, a, b in zip(cases, starts[:-1], starts[1:]) if c["id"] in keep], 0.0)["auc"]
        for k in (4, 8, COMPONENTS):
            runs = [noisy_user_rewards(cases, x, args.history, args.noise, s, k) for s in seeds]
            if name == "tune":  # each margin is chosen here, on the tuning split only
                pooled = [case for r in runs for case in r]
                margins[k] = next((m for m in MARGINS if pair_metrics(pooled, m)["wrong_sign"] <= MAX_WRONG_SIGN), 1.0)
            by = {sc: [[case for c, case in zip(scored, r) if c["scenario"] == sc] for r in runs]
                  for sc in sorted({c["scenario"] for c in scored})}
            res[f"user-{k}"] = {"margin": margins[k], **{f"seed{s}": summary(r, margins[k]) for s, r in zip(seeds, runs)},
                                "auc_by_scenario": {sc: [round(pair_metrics(r, 0.0)["auc"], 3) for r in rs] for sc, rs in by.items()}}
        out[name] = res
        print(name, json.dumps(res, indent=1), flush=True)
    path = ROOT / "bench" / "results" / f"scorer-user-fit-{args.model.stem}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
