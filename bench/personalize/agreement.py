"""How the daemon's verdicts on a bench run agree with the simulated user's: the next-state judge on
each answer the user reacted to, and GRPO's scorer on the groups it sampled. Both are read from the
daemon's database at the end of a loop run (run.py) and reported beside its curve."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from bench.personalize.evaluate import Daemon
from bench.personalize.measures import runs_in_circles
from bench.personalize.scenarios import Scenario, accepts


def judge_agreement(d: Daemon, turns: list[dict[str, Any]]) -> dict[str, Any]:
    """The judge's verdict on each answer the user reacted to, against the simulator's truth
    (+1 met the preference, -1 missed it), read from the daemon's database."""
    rows = d.rows("SELECT t.completion_id, j.score, j.hint FROM judgments j JOIN turns t ON t.id = j.turn_id")
    judged = {cid: (score, hint) for cid, score, hint in rows}
    confusion = {str(truth): {"1": 0, "0": 0, "-1": 0} for truth in (1, -1)}
    hints = 0
    for t in turns:
        if t["id"] in judged:
            score, hint = judged[t["id"]]
            confusion["1" if t["ok"] else "-1"][str(score)] += 1
            hints += hint is not None
    n = sum(sum(row.values()) for row in confusion.values())
    agree = confusion["1"]["1"] + confusion["-1"]["-1"]
    decided = n - confusion["1"]["0"] - confusion["-1"]["0"]
    return {"judged": n, "of": len(turns), "agreement": agree / n if n else None,
            "agreement_when_decided": agree / decided if decided else None, "hints": hints,
            "confusion": confusion}


def scorer_agreement(d: Daemon, sc: Scenario) -> dict[str, Any]:
    """GRPO's scorer on the groups the daemon sampled, against the simulated user's verdict
    (scenarios.accepts: the scenario's checker, and saying something): over every
    (passes, fails) pair of answers within a group, the AUC, and at the daemon's margin the shares
    decided and decided the wrong way; each group's (reward, passes, words) kept for a re-grade, and
    how many of its answers loop (measures' rule, on words) and how many the daemon refused (its own
    rule, on tokens: judge/rollouts.refused, reward 0 and never pushed down). The
    checker is asked about the session's first question (a retry's last message is the complaint).
    Beside them, what answer length alone would have done: length_auc ranks the shorter of each
    (passes, fails) pair first, and shorter_first is the share of pairs the scorer decided (any two
    answers of a group at least the margin apart) whose favoured answer is the shorter (ties 1/2):
    what a round on these groups teaches about length, whatever the checker says."""
    groups = []
    for g in d.rows("SELECT g.id, g.scorer, t.request FROM rollout_groups g JOIN turns t ON t.id = g.turn_id"
                    " WHERE g.source = 'sampled' AND g.scorer IS NOT NULL ORDER BY g.id"):
        question = next(m["content"] for m in json.loads(g["request"])["messages"] if m["role"] == "user")
        answers = d.rows("SELECT text, reward, refused FROM rollouts WHERE group_id = ? ORDER BY k", (g["id"],))
        groups.append({"scorer": g["scorer"], "answers": [(a["reward"], accepts(sc, question, a["text"]), len(a["text"].split()))
                                                          for a in answers],
                       "loops": sum(runs_in_circles(a["text"]) for a in answers),
                       "refused": sum(a["refused"] for a in answers)})
    margin = ((d.status().get("grpo") or {}).get("scorer") or {}).get("margin")
    at = max(margin if margin is not None else 0.0, 1e-9)
    checked = [(r1 - r2, w2 - w1) for g in groups for r1, ok1, w1 in g["answers"] if ok1
               for r2, ok2, w2 in g["answers"] if not ok2]
    gaps, pass_shorter = np.array([c[0] for c in checked]), np.array([c[1] for c in checked])
    favoured = []  # +1: of two answers the scorer decided between, the one it favours is the shorter
    for g in groups:
        for i, (r1, _, w1) in enumerate(g["answers"]):
            for r2, _, w2 in g["answers"][i + 1:]:
                if abs(r1 - r2) >= at:
                    favoured.append(np.sign(w2 - w1) if r1 > r2 else np.sign(w1 - w2))

    def right_way(d: np.ndarray) -> float | None:  # share of pairs ranked the right way (d > 0), ties half
        return float(((d > 0) + 0.5 * (d == 0)).mean()) if len(d) else None

    return {"groups": len(groups), "margin": margin, "pairs": len(gaps), "auc": right_way(gaps),
            "decided": float((np.abs(gaps) >= at).mean()) if len(gaps) else None,
            "wrong_sign": float((gaps <= -at).mean()) if len(gaps) else None,
            "length_auc": right_way(pass_shorter), "shorter_first": right_way(np.array(favoured)), "by_group": groups}
