"""The gap a GRPO group needs between its best and worst reward (rollouts.group_margin): pure, no model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clawd.judge.rollouts import MARGIN_K, expected_range, group_margin

fast = pytest.mark.fast


@fast
def test_expected_range_is_the_control_chart_constant():
    """d2(n) from the published table (ASTM/Montgomery, to 3 decimals); d2(2) is 2/sqrt(pi) exactly."""
    assert expected_range(2) == pytest.approx(2 / math.sqrt(math.pi), abs=1e-4)
    for n, d2 in ((3, 1.693), (4, 2.059), (5, 2.326), (8, 2.847), (10, 3.078)):
        assert expected_range(n) == pytest.approx(d2, abs=1e-3)


@fast
def test_the_margin_widens_with_the_group_and_never_falls_below_the_scorers():
    assert MARGIN_K == 4 and group_margin(0.25, 4) == pytest.approx(0.25)
    assert group_margin(0.25, 8) == pytest.approx(0.25 * 2.847 / 2.059, abs=1e-3)  # 0.346
    assert group_margin(0.25, 2) == group_margin(0.25, 3) == 0.25  # the scorer was trusted at this gap on pairs
    assert group_margin(0.0, 8) == 0.0  # a margin of 0 stays 0


@fast
def test_answers_of_equal_worth_pass_as_often_at_eight_as_at_four():
    """The point of the scaling, on the null it is for: K answers the user would judge alike, their
    rewards the scorer's noise around one value (sd 0.1, about where the control user's sat). With
    the margin as it is, 8 answers pass 0.25 more than twice as often as 4 do (0.64 against 0.29);
    scaled, about as often (0.22). The tolerance is half the K = 4 rate: the mean range is matched,
    not the tail."""
    rng = np.random.default_rng(0)
    rates = {}
    for k in (4, 8):
        r = np.ptp(rng.normal(0.4, 0.1, (100_000, k)), axis=1)  # (100000,) each group's best minus worst
        rates[k] = (float((r >= 0.25).mean()), float((r >= group_margin(0.25, k)).mean()))
    assert rates[8][0] > 2 * rates[4][0]  # unscaled
    assert abs(rates[8][1] - rates[4][1]) < 0.5 * rates[4][1]  # scaled
