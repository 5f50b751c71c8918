"""GRPO's scorer fit on a user's verdicts (issue 28), by hand: each user's rewards fitted on their
own earlier cases, the bar a fit must pass before it decides anything, and the pair metrics and
margin the scorer is measured by. No model: features are made up.
"""

from __future__ import annotations

import numpy as np
import pytest

from clawd.judge.scorer import HISTORY, auc_needed, measure, pair_metrics, signal, user_rewards

fast = pytest.mark.fast


@fast
def test_user_rewards_fit_each_user_on_their_earlier_cases_only():
    """Feature 0 (the plain one) says "meets" for user u; user v's answers have it backwards. Each
    case is scored by a fit on its own user's earlier cases: u's right way up, v's flipped, and a
    case's rewards do not change when a later case does."""
    def case(user: str, n: int) -> dict:
        return {"scenario": user, "id": f"{user}-{n}", "answers": [{"meets": True}, {"meets": False}]}

    cases = [case("u", i) for i in range(HISTORY + 1)] + [case("v", i) for i in range(HISTORY + 1)]
    rng = np.random.default_rng(0)
    meets = np.array([a["meets"] for c in cases for a in c["answers"]])
    sign = np.array([1.0] * (2 * HISTORY + 2) + [-1.0] * (2 * HISTORY + 2))  # v reads the feature backwards
    x = np.hstack([(np.where(meets, 2.0, -2.0) * sign)[:, None], rng.normal(size=(len(meets), 3))])  # (n, 1 + 3)
    got = user_rewards(x, meets, cases, components=2)
    assert len(got) == 2  # one scored case per user: the first HISTORY are their history
    (u_meets, u_misses), (v_meets, v_misses) = [[r for r, _ in c] for c in got]
    assert u_meets > 0.5 > u_misses and v_meets > 0.5 > v_misses
    x2 = x.copy()
    x2[-2:] = 0.0  # change v's last case: u's scores stay
    assert user_rewards(x2, meets, cases, components=2)[0] == got[0]
    one_kind = meets.copy()
    one_kind[: 2 * HISTORY] = True  # u's history holds accepted answers only: nothing to rank by
    assert [r for r, _ in user_rewards(x, one_kind, cases, components=2)[0]] == [0.5, 0.5]


@fast
def test_a_fit_decides_nothing_until_it_sees_the_users_verdicts():
    """`signal`: each judged answer ranked by a fit on the others. Features that carry the verdict
    beat the bar; features that carry nothing (every answer alike, or noise) do not. The bar and
    the AUC by hand."""
    assert auc_needed(3, 3) == pytest.approx(0.5 + 1.645 * (7 / 108) ** 0.5)  # 0.919: 3 each way, nearly perfect
    assert auc_needed(20, 20) == pytest.approx(0.5 + 1.645 * (41 / 4800) ** 0.5)  # 0.652
    # pairs (accepted, rejected): (.9, .1) (.9, .8) (.8, .1) right, (.8, .8) a tie: 3.5 of 4
    assert pair_metrics([[(0.9, True), (0.8, True), (0.1, False), (0.8, False)]], 0.0)["auc"] == pytest.approx(0.875)
    rng = np.random.default_rng(0)
    ok = np.array([True, False] * 6)  # 6 accepted, 6 rejected
    hidden = rng.normal(size=(12, 8))  # (answers, n_embd): no pattern in it
    odds = np.where(ok, 2.0, -2.0)[:, None] + rng.normal(0, 0.3, (12, 1))  # the yes/no log-odds see the verdicts
    # ... and so does one direction of the hidden state (with the log-odds alone, 10 answers a fold
    # against 8 noisy components, the ridge-shrunk fit ranks them at 0.56: a bar that small histories miss)
    told = hidden + np.where(ok, 1.0, -1.0)[:, None] * np.eye(8)[0]
    seen, need = signal(np.hstack([odds, told]), ok)
    assert seen > 0.9 and need == pytest.approx(auc_needed(6, 6))  # 0.785
    assert signal(np.hstack([np.zeros((12, 1)), np.tile(hidden[:1], (12, 1))]), ok)[0] < need  # every answer alike
    assert signal(np.hstack([rng.normal(size=(12, 1)), hidden]), ok)[0] < need  # features unrelated to the verdicts


# -- the scorer's measure, by hand ------------------------------------------------------------------
@fast
def test_pair_metrics_and_the_margin_by_hand():
    # case 1: meets 0.9, misses 0.2 and 0.6; case 2: meets 0.3, misses 0.4
    cases = [[(0.9, True), (0.2, False), (0.6, False)], [(0.3, True), (0.4, False)]]
    m = pair_metrics(cases, 0.0)  # pairs: +0.7, +0.3, -0.1
    assert m["pairs"] == 3 and m["decided"] == 1.0 and m["wrong_sign"] == pytest.approx(1 / 3)
    assert m["auc"] == pytest.approx(2 / 3)
    assert pair_metrics(cases, 0.2) == {"pairs": 3, "decided": pytest.approx(2 / 3), "wrong_sign": 0.0,
                                        "auc": pytest.approx(2 / 3)}
    t = measure(cases, [[10, 50, 90], [30, 20]], "m.gguf", max_wrong_sign=0.03, seconds_per_answer=1.0)
    assert t.margin == 0.15 and t.mode == "trusted" and t.measured["decided"] == pytest.approx(2 / 3)
    assert t.length_auc == 0.667  # the shorter answer ranked first: right on 2 of 3 pairs
    assert measure([[(0.5, True), (0.6, False)]], [[1, 1]], "m", 0.03, 1.0).mode == "untrusted"
