"""GRPO scorer benchmark (issue 28): does "would this user accept this answer?" rank a model's own
answers the way the user's preference does, better than trivial baselines, on cases it was not
tuned on?

    python -m bench.judge.scorer --model X.gguf            # tuning and held-out splits
    python -m bench.judge.scorer --split tune              # while developing: never look at held-out

It measures fits shared by every user, each scenario scored by a fit on the others: what the daemon
read until 2026-12-04. The daemon now fits each user's own judged answers; bench/judge/user_fit.py
measures that.

The tuning split (clawd/judge/data/scorer_cases.jsonl) is what the daemon measures its trust on;
the held-out split (tests/data/scorer_heldout.jsonl) has other scenarios and complaint wordings,
written apart (bench/judge/scorer_cases.py), and is never used for a choice. Each case: the user's
words, a question, and several of the model's own sampled answers labeled by the scenario's
checker. Each answer's features are read once (the yes/no log-odds, the hidden state at half
depth). Compared on the tuning split, each scenario's answers scored by a fit on the other
scenarios: `ask` (the odds alone, no fit) and `probe-K` (the daemon's fit with K principal
components; the daemon's K is scorer.COMPONENTS). On the held-out split: the daemon's fit on every
tuning case, and `ask`. Reported per split and per scenario: the pairwise AUC, decided and
wrong-sign shares at the margin the daemon would choose on the tuning split, the trust mode that
follows, and the same AUC for two baselines that know nothing of the user: shorter first, and
fewer lines first. Beside them, the contrast (Scorer.contrast: how much more likely the user's
quoted words make the answer, against the question alone and against a remark that asks for
nothing, summed and per token), raw and fitted alone or with the daemon's
features; the layout with the best tuning AUC is named `chosen_on_tuning` (the daemon reads
clawd/judge/scorer.py's FEATURES, and `trust` is what it would measure).
Results go to bench/results/scorer-<model>.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from clawd.config import Settings, bundled_model_path
from clawd.engine.engine import Engine
from clawd.judge.calibration import fit, predict
from clawd.judge.judge import Judge
from clawd.judge.scorer import (
    CASES,
    COMPONENTS,
    FEATURES,
    Scorer,
    load_cases,
    measure,
    pair_metrics,
    per_case,
)

ROOT = Path(__file__).resolve().parents[2]

HELDOUT = ROOT / "tests" / "data" / "scorer_heldout.jsonl"
TRIED = (8, 16, 32, 64)  # principal components of the hidden state, compared on the tuning split only


def cross_val_rewards(x: np.ndarray, meets: np.ndarray, groups: list[str], components: int = COMPONENTS,
                      plain: int = 1) -> np.ndarray:
    """Each answer's P(accepted) from a fit on the other groups' answers only (leave one scenario
    out): a fit shared by every user, which must guess the preference from the quoted words (the
    daemon's scorer before it fitted each user's own answers). x (n, plain + n_embd): `plain`
    features (the yes/no log-odds), then the hidden state (or nothing); meets (n,) bool."""
    y, out, names = np.where(meets, 1, -1), np.zeros(len(meets)), np.array(groups)
    if len(set(groups)) < 2:
        raise ValueError("the cases need at least two scenarios: each is measured by a fit on the others")
    for g in sorted(set(groups)):
        test = names == g
        out[test] = predict(fit(x[~test], y[~test], plain=plain, components=components), x[test])[:, 2]
    return out


def read_all(scorer: Scorer, cases: list[dict], read, what: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Scorer.case_features with `read` (Scorer.probe: the log-odds, then the hidden state, whatever
    FEATURES is; Scorer.contrasts: the four log-ratios), each case's time printed as it goes."""
    t = [time.perf_counter()]

    def done(_i: int, case: dict) -> None:
        print(f"  {case['id']} {what}: {time.perf_counter() - t[0]:.1f}s", flush=True)
        t[0] = time.perf_counter()

    return scorer.case_features(cases, on_case=done, read=read)


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


def setup(doc: str) -> tuple[argparse.Namespace, Path, Settings, Judge]:
    """The scorer benches' command line: (args, model, settings in a fresh home, a judge on the model)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=None, help="GGUF (default: the bundled SmolLM2)")
    p.add_argument("--split", choices=("tune", "all"), default="all")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    model = args.model or bundled_model_path()
    settings = Settings(home=Path(tempfile.mkdtemp(prefix="clawd-scorer-")))
    return args, model, settings, Judge(Engine(model, n_ctx=4096, threads=args.threads), None, settings)


def main() -> None:
    args, model, settings, judge = setup(__doc__)
    scorer = Scorer(judge, settings.home / "judge", settings.judge_max_wrong_sign)
    out: dict = {"model": model.name, "components": COMPONENTS,
                 "cases": {"tune": str(CASES.relative_to(ROOT)), "heldout": str(HELDOUT.relative_to(ROOT))}}
    tune = load_cases(CASES)
    print(f"tuning split: {len(tune)} cases", flush=True)
    t0 = time.perf_counter()
    x, ok, groups = read_all(scorer, tune, scorer.probe, "probe")
    out["seconds_per_answer"] = round((time.perf_counter() - t0) / len(ok), 2)
    lengths = [[len(a["text"]) for a in c["answers"]] for c in tune]
    ask = per_case(tune, 1 / (1 + np.exp(-x[:, 0])), ok)  # the yes/no odds alone
    out["tune"] = {"ask": report(tune, ask, measure(ask, lengths, model.name, settings.judge_max_wrong_sign, 0).margin)}
    for k in TRIED:  # each scenario's answers scored by a fit on the other scenarios
        cv = per_case(tune, cross_val_rewards(x, ok, groups, k, plain=1), ok)
        trust = measure(cv, lengths, model.name, settings.judge_max_wrong_sign, 0)
        out["tune"][f"probe-{k}"] = {"mode": trust.mode, "margin": trust.margin,
                                     **report(tune, cv, trust.margin)}
    # The contrast: how much more likely the user's quoted words make each answer, raw (no fit),
    # then fitted alone and beside the probe. The daemon reads FEATURES (clawd/judge/scorer.py);
    # which one it should read is chosen here, on the tuning split's leave-one-scenario-out AUC only.
    t1 = time.perf_counter()
    c = read_all(scorer, tune, scorer.contrasts, "contrast")[0]
    out["seconds_per_answer_contrast"] = round((time.perf_counter() - t1) / len(ok), 2)
    raws = (("contrast-sum", 0), ("contrast-mean", 1), ("contrast-neutral-sum", 2), ("contrast-neutral-mean", 3))
    for name, col in raws:
        out["tune"][name] = report(tune, per_case(tune, 1 / (1 + np.exp(-c[:, col])), ok), 0.0)

    def variants(xp: np.ndarray, xc: np.ndarray) -> dict[str, tuple[np.ndarray, int]]:
        """Scorer.features' layouts by FEATURES: (x, plain features before the hidden state)."""
        return {"probe": (xp, 1), "contrast": (xc, 4), "probe+contrast": (np.hstack([xp[:, :1], xc, xp[:, 1:]]), 5)}

    trusts = {}
    for name, (xv, plain) in variants(x, c).items():
        cv = per_case(tune, cross_val_rewards(xv, ok, groups, plain=plain), ok)
        trusts[name] = measure(cv, lengths, model.name, settings.judge_max_wrong_sign, 0)
        out["tune"][f"fit:{name}"] = {"mode": trusts[name].mode, "margin": trusts[name].margin,
                                      **report(tune, cv, trusts[name].margin)}
    out["chosen_on_tuning"] = max(trusts, key=lambda k: out["tune"][f"fit:{k}"]["all"]["auc_any_margin"])
    out["daemon_features"] = FEATURES
    out["trust"] = {k: v for k, v in trusts[FEATURES].__dict__.items() if k != "fit"}
    if args.split == "all":
        held = load_cases(HELDOUT)
        print(f"held-out split: {len(held)} cases", flush=True)
        hx, hok, _ = read_all(scorer, held, scorer.probe, "probe")
        hc = read_all(scorer, held, scorer.contrasts, "contrast")[0]
        out["heldout"] = {"ask": report(held, per_case(held, 1 / (1 + np.exp(-hx[:, 0])), hok), trusts["probe"].margin)}
        held_x = variants(hx, hc)
        for name, (xv, plain) in variants(x, c).items():  # each fitted on every tuning case
            f = fit(xv, np.where(ok, 1, -1), plain=plain, components=COMPONENTS)
            out["heldout"][f"fit:{name}"] = report(held, per_case(held, predict(f, held_x[name][0])[:, 2], hok),
                                                   trusts[name].margin)
        for name, col in raws:
            out["heldout"][name] = report(held, per_case(held, 1 / (1 + np.exp(-hc[:, col])), hok), 0.0)
    print(json.dumps({k: v for k, v in out.items() if k != "cases"}, indent=1))
    dest = ROOT / "bench" / "results" / f"scorer-{model.stem}{'' if args.split == 'all' else '-tune'}.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written to {dest.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
