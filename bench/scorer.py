"""GRPO scorer benchmark (issue 28): does "would this user accept this answer?" rank a model's own
answers the way the user's preference does, better than trivial baselines, on cases it was not
tuned on?

    python bench/scorer.py --model X.gguf            # tuning and held-out splits
    python bench/scorer.py --split tune              # while developing: never look at held-out

The tuning split (clawd/judge/data/scorer_cases.jsonl) is what the daemon measures its trust on;
the held-out split (tests/data/scorer_heldout.jsonl) has other scenarios and complaint wordings,
written apart (bench/scorer_cases.py), and is never used for a choice. Each case: the user's
words, a question, and several of the model's own sampled answers labeled by the scenario's
checker. Reported per split and per scenario: the pairwise AUC, decided and wrong-sign shares at
the margin the daemon would choose on the tuning split, the trust mode that follows, and the same
AUC for two baselines that know nothing of the user: shorter first, and fewer lines first.
Results go to bench/results/scorer-<model>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clawd.config import Settings, bundled_model_path  # noqa: E402
from clawd.engine.engine import Engine  # noqa: E402
from clawd.judge.judge import Judge  # noqa: E402
from clawd.judge.scorer import CASES, Scorer, load_cases, measure, pair_metrics  # noqa: E402

HELDOUT = ROOT / "tests" / "data" / "scorer_heldout.jsonl"


def score_split(scorer: Scorer, cases: list[dict]) -> list[list[tuple[float, bool]]]:
    out = []
    for case in cases:
        out.append([(scorer.reward(case["evidence"], case["question"], a["text"]), a["meets"]) for a in case["answers"]])
        print(f"  {case['id']}: " + " ".join(f"{r:.2f}{'+' if ok else '-'}" for r, ok in out[-1]), flush=True)
    return out


def baseline(cases: list[dict], key) -> float:
    return pair_metrics([[(-float(key(a["text"])), a["meets"]) for a in c["answers"]] for c in cases], 0.0)["auc"]


def report(cases: list[dict], rewards: list[list[tuple[float, bool]]], margin: float) -> dict:
    by = defaultdict(list)
    for c, r in zip(cases, rewards):
        by[c["scenario"]].append((c, r))
    def one(cs, rs):
        return {"cases": len(cs), **pair_metrics(rs, margin), "auc_any_margin": pair_metrics(rs, 0.0)["auc"],
                "length_auc": baseline(cs, len), "lines_auc": baseline(cs, lambda t: t.count("\n"))}
    return {"all": one(cases, rewards),
            "by_scenario": {k: one([c for c, _ in v], [r for _, r in v]) for k, v in sorted(by.items())}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=None, help="GGUF (default: the bundled SmolLM2)")
    p.add_argument("--split", choices=("tune", "all"), default="all")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    model = args.model or bundled_model_path()
    engine = Engine(model, n_ctx=4096, threads=args.threads)
    settings = Settings(home=Path(tempfile.mkdtemp(prefix="clawd-scorer-")))
    scorer = Scorer(Judge(engine, None, settings), settings.home / "judge", settings.judge_max_wrong_sign)
    out: dict = {"model": model.name, "cases": {"tune": str(CASES.relative_to(ROOT)), "heldout": str(HELDOUT.relative_to(ROOT))}}
    tune = load_cases(CASES)
    t0 = time.perf_counter()
    print(f"tuning split: {len(tune)} cases", flush=True)
    tune_rewards = score_split(scorer, tune)
    n = sum(len(c["answers"]) for c in tune)
    trust = measure(tune_rewards, [[len(a["text"]) for a in c["answers"]] for c in tune], model.name,
                    settings.judge_max_wrong_sign, (time.perf_counter() - t0) / n)
    out["trust"] = trust.__dict__
    out["tune"] = report(tune, tune_rewards, trust.margin)
    if args.split == "all":
        held = load_cases(HELDOUT)
        print(f"held-out split: {len(held)} cases", flush=True)
        out["heldout"] = report(held, score_split(scorer, held), trust.margin)
    print(json.dumps({k: v for k, v in out.items() if k != "cases"}, indent=1))
    dest = ROOT / "bench" / "results" / f"scorer-{model.stem}{'' if args.split == 'all' else '-tune'}.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written to {dest.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
