"""Where a loop run's learning goes (issue 28; docs/learning.md, stop 62).

    python -m bench.personalize.anatomy groups bench/results/personalize-*-grpo-seed*-24turns-*idle-900s*.json
    python -m bench.personalize.anatomy groups --binary 0.5 bench/results/personalize-*-grpo-seed*-24turns-*idle-900s*.json
    python -m bench.personalize.anatomy content bench/out/cache/loop-*.json
    python -m bench.personalize.anatomy content bench/out/cache/oracle-*.json --base bench/out/cache/base-HASH.json

`groups` reads committed run summaries (`scorer.by_group`: each sampled answer's reward, whether the
scenario's checker passes it, its words). Of the groups a round could train (at least the scorer's
margin apart), it counts those with no answer the checker passes, and splits the positive advantage
(reward minus the group's mean, scaled as `grpo_spread_norm` scales it) between answers the checker
passes and answers it fails, with the advantage-weighted words of the pushed-up and pushed-down
answers: what the rewards teach, read against the oracle's labels the daemon never sees.

`content` reads the bench's uncommitted cache of held-out answers (the base's and each loop's last
adapter's, or an oracle's adapter's against the cached base): of the prompts whose answer had the known content under the base weights and lost it
under the adapter, how many loop (`engine.repetition.loops` on words), how many are over 30% shorter
than the base's, and how many are as long or longer (a wrong or vague answer at the same length).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from clawd.engine.repetition import loops, words

SHORTER = 0.7  # an answer under 70% of the base's words counts as shorter


def group_push(summary: dict[str, Any], binary: float | None = None) -> dict[str, Any]:
    """The trainable groups' advantages against the checker, from one run summary. With `binary`,
    as if each reward were 1 at or above it and 0 below (a group with answers on one side only then
    trains nothing), as an oracle's labels are: what an absolute threshold on the scorer would keep."""
    import torch

    from clawd.train.loss import group_advantages

    scorer = summary["scorer"]
    margin = scorer["margin"]
    out: dict[str, Any] = {"trainable": 0, "none_pass": 0, "up_pass": 0.0, "up_fail": 0.0, "up_words": 0.0, "down_words": 0.0}
    up = down = 0.0
    for g in scorer["by_group"]:
        if len(g["answers"]) < 2:
            continue
        r = np.array([a[0] for a in g["answers"]], float)  # (k,) rewards
        ok = np.array([bool(a[1]) for a in g["answers"]])  # (k,) the checker's verdicts
        n_words = np.array([a[2] for a in g["answers"]], float)  # (k,)
        # trainable as the daemon decided it (its scorer's mode, recorded per group; since stop 65 a
        # group of more than 4 needs more than the margin: rollouts.group_margin), and at least the
        # margin apart for summaries that carry no mode
        if g.get("scorer", "trusted") != "trusted" or r.max() - r.min() < margin:
            continue
        if binary is not None:
            r = (r >= binary).astype(float)
            if r.max() == r.min():
                continue
        adv = group_advantages(torch.tensor(r[None]), spread=True)[0].numpy()  # (k,), as the loss reads them
        out["trainable"] += 1
        out["none_pass"] += int(not ok.any())
        out["up_pass"] += float(adv[ok & (adv > 0)].sum())
        out["up_fail"] += float(adv[~ok & (adv > 0)].sum())
        out["up_words"] += float((adv.clip(0) * n_words).sum())
        out["down_words"] += float((-adv.clip(None, 0) * n_words).sum())
        up += float(adv.clip(0).sum())
        down += float(-adv.clip(None, 0).sum())
    out["up_words"] = round(out["up_words"] / up, 1) if up else None
    out["down_words"] = round(out["down_words"] / down, 1) if down else None
    total = out["up_pass"] + out["up_fail"]
    out["up_fail_share"] = round(out["up_fail"] / total, 3) if total else None
    out["up_pass"], out["up_fail"] = round(out["up_pass"], 2), round(out["up_fail"], 2)
    return out


def content_lost(base: list[dict[str, Any]], loop: list[dict[str, Any]]) -> dict[str, int]:
    """Graded held-out answers (`evaluate.grade(...)["heldout"]`, the same prompts in the same order):
    the prompts that lost their known content, by what the adapter's answer does instead."""
    out = {"lost": 0, "gained": 0, "loops": 0, "shorter": 0, "as_long": 0}
    for b, a in zip(base, loop, strict=True):
        if not b["known"] and a["known"]:
            out["gained"] += 1
        if not (b["known"] and not a["known"]):
            continue
        out["lost"] += 1
        if loops(words(a["text"])):
            out["loops"] += 1
        elif len(a["text"].split()) < SHORTER * len(b["text"].split()):
            out["shorter"] += 1
        else:
            out["as_long"] += 1
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    groups = sub.add_parser("groups")
    groups.add_argument("summaries", nargs="+", type=Path)
    groups.add_argument("--binary", type=float, help="read each reward as 1 at or above this, else 0")
    content = sub.add_parser("content")
    content.add_argument("runs", nargs="+", type=Path, help="cached loop or oracle records")
    content.add_argument("--base", type=Path, help="the cached base answers (base-HASH.json), for oracle records")
    a = p.parse_args()
    if a.cmd == "groups":
        for path in sorted(a.summaries):
            summary = json.loads(path.read_text())
            groups_ = summary.get("scorer", {}).get("by_group", [])
            if not groups_ or any(len(ans) < 3 for g in groups_ for ans in g["answers"]):
                # stop 52's and earlier summaries keep no groups, or no word count per answer
                print(path.name, "no groups with word counts recorded")
                continue
            print(path.name, json.dumps(group_push(summary, a.binary)))
        return
    from bench.personalize.evaluate import grade
    from bench.personalize.scenarios import SCENARIOS
    for path in sorted(a.runs):
        run = json.loads(path.read_text())
        # a loop record: its curve's first and last points; an oracle's: its adapter's eval and the base's
        curve = run.get("curve") or [{"eval": json.loads(a.base.read_text())}, run]
        if len(curve) < 2 or curve[-1]["adapter"] is None:
            print(path.name, "no adapter went live")
            continue
        sc = SCENARIOS[path.name.split("-")[1]]
        base, loop = (grade(sc, point["eval"])["heldout"] for point in (curve[0], curve[-1]))
        print(path.name, json.dumps(content_lost(base, loop)))


if __name__ == "__main__":
    main()
