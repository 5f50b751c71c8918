"""The GRPO scorer's pairwise form (issue 28's second candidate), measured before the daemon reads it:
shown the user's words, the question and two of the model's own answers, which one does what the
user asked for? On the 0.5B model the per-answer question ("would this user accept this one?") is
no better than "shorter first" (bench/judge/scorer.py); a comparison is often easier for a small
judge than a verdict on one answer, and GRPO only needs the ranking within a group.

    python -m bench.judge.pairwise --model X.gguf            # tuning and held-out splits
    python -m bench.judge.pairwise --model X.gguf --split tune

For every (meets, misses) pair of answers within a case, the base model reads the pair in both
orders and the preference is the mean of the two log-odds, log P(first) − log P(second) as the
reply's first word, taken for the meeting answer: position bias cancels, and a pair read the same
way both times counts as a tie. A pair's reward gap is 2·sigmoid(preference) − 1, what a group
of two would get as each answer's mean win probability; the margin is chosen as the daemon
chooses it (the smallest gap at which wrong-sign stays within judge_max_wrong_sign) on the tuning
split, then applied to the held-out split, which is never used for a choice. The baselines are the
same pairs ranked by shorter first and fewer lines first. Results go to
bench/results/scorer-pairwise-<model>.json.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict

import numpy as np

from bench.judge.scorer import HELDOUT, ROOT, baseline, setup
from clawd.judge.judge import Judge
from clawd.judge.scorer import CASES, MIN_DECIDED, QUESTION_CHARS, _cut, load_cases, measure, pair_metrics

SYSTEM = "You compare answers for one user, who has told the assistant before what they want."
LABELS = ("A", "B")
HALF = 1000  # chars of each answer shown (cut in the middle): two answers share the prompt


def pair_prompt(evidence: list[str], question: str, first: str, second: str) -> str:
    said = "\n".join(f'- "{e}"' for e in evidence)
    return (f"Earlier, this user said about the assistant's answers:\n{said}\n\nNow the user asks:\n"
            f"{_cut(question, QUESTION_CHARS)}\n\nAnswer A:\n{_cut(first, HALF)}\n\nAnswer B:\n{_cut(second, HALF)}\n\n"
            "Which answer does what the user asked for earlier? Reply A or B.")


def mixed_pairs(case: dict) -> list[tuple[str, str]]:
    """(meets, misses) texts of every such pair within the case, in answer order."""
    return [(g["text"], b["text"]) for g in case["answers"] if g["meets"] for b in case["answers"] if not b["meets"]]


def symmetric(ab: float, ba: float) -> float:
    """The preference for the first-read answer from its two readings: log-odds for it when it was
    shown first (`ab`), and for the other when that one was shown first (`ba`); 0 when both
    readings just favour a position."""
    return (ab - ba) / 2


def as_case(preference: float) -> list[tuple[float, bool]]:
    """A pair as pair_metrics reads a case: the meeting answer's mean win probability, and the other's."""
    p = 1 / (1 + math.exp(-preference))
    return [(p, True), (1 - p, False)]


def read(judge: Judge, cases: list[dict]) -> list[list[float]]:
    """Each case's pair preferences (two forward passes a pair), each case's time printed."""
    out = []
    for case in cases:
        t0, prefs = time.perf_counter(), []
        for good, bad in mixed_pairs(case):
            odds = []
            for first, second in ((good, bad), (bad, good)):
                text = judge.engine.template.render([{"role": "system", "content": SYSTEM}, {
                    "role": "user", "content": pair_prompt(case["evidence"], case["question"], first, second)}])
                lp = judge.choice_logps(text, [*LABELS, *(f"Answer {x}" for x in LABELS)])
                odds.append(float(np.logaddexp(lp[0], lp[2]) - np.logaddexp(lp[1], lp[3])))
            prefs.append(symmetric(*odds))
        print(f"  {case['id']}: {len(prefs)} pairs, {time.perf_counter() - t0:.1f}s", flush=True)
        out.append(prefs)
    return out


def report(cases: list[dict], prefs: list[list[float]], margin: float) -> dict:
    # the baselines rank each case's answers: pair_metrics reads the same (meets, misses) pairs
    def one(cs: list[dict], ps: list[list[float]]) -> dict:
        pairs = [as_case(x) for p in ps for x in p]
        return {"cases": len(cs), **pair_metrics(pairs, margin), "auc_any_margin": pair_metrics(pairs, 0.0)["auc"],
                "length_auc": baseline(cs, len), "lines_auc": baseline(cs, lambda t: t.count("\n"))}
    by = defaultdict(list)
    for c, p in zip(cases, prefs):
        by[c["scenario"]].append((c, p))
    every = one(cases, prefs)
    mode = "trusted" if margin < 1.0 and every["decided"] >= MIN_DECIDED else "untrusted"  # as Scorer.trust decides
    return {"margin": margin, "mode": mode, "all": every,
            "by_scenario": {k: one([c for c, _ in v], [p for _, p in v]) for k, v in sorted(by.items())}}


def main() -> None:
    args, model, settings, judge = setup(__doc__)
    tune = load_cases(CASES)
    t0 = time.perf_counter()
    prefs = read(judge, tune)
    pairs = sum(len(x) for x in prefs)
    # the margin as the daemon chooses it (Scorer.trust), each pair a case of two answers
    margin = measure([as_case(x) for p in prefs for x in p], [[len(g), len(b)] for c in tune for g, b in mixed_pairs(c)],
                     model.name, settings.judge_max_wrong_sign, 0).margin
    out = {"model": model.name, "seconds_per_pair": round((time.perf_counter() - t0) / max(pairs, 1), 2),
           "tune": report(tune, prefs, margin)}
    if args.split == "all":
        held = load_cases(HELDOUT)
        out["heldout"] = report(held, read(judge, held), margin)
    print(json.dumps(out, indent=1))
    dest = ROOT / "bench" / "results" / f"scorer-pairwise-{model.stem}{'' if args.split == 'all' else '-tune'}.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written to {dest.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
