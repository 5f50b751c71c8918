"""The repetition check's resolution (bench/personalize/repetition.py), on hand-built per-prompt falls."""

import numpy as np
import pytest

from bench.personalize.repetition import draws, reject_chance

pytestmark = pytest.mark.fast  # no model, no daemon


def test_reject_chance_by_hand():
    assert reject_chance(np.full(52, 0.1), 16, 0.05) == 1.0  # every prompt fell more than the budget
    assert reject_chance(np.zeros(52), 16, 0.05) == 0.0  # nothing moved
    # one question drawn from two equally likely falls, 0 and 0.2: above 0.05 half the time
    assert abs(reject_chance(np.array([0.0, 0.2]), 1, 0.05) - 0.5) < 0.02
    # a mean over more questions is surer: a looper's spread-out falls are caught more often
    mixed = np.array([0.0] * 40 + [0.6] * 12)  # mean 0.138: 12 answers of 52 collapse
    assert reject_chance(mixed, 16, 0.05) < reject_chance(mixed, 48, 0.05)


def test_draws_prints_one_row_per_run():
    falls = {"runs": {"a": {"fall": [0.1] * 10, "loops": 3, "new_loops": 2, "gone_loops": 1}}}
    lines = draws(falls)
    assert len(lines) == 3 and lines[2].startswith("| a | 3 (2, 1) | 0.100 | 0.000 | 1.00 / 1.00 |")


def test_push_ratio_by_hand():
    from bench.personalize.repetition import push_ratio
    # rewards 0.6, 0.6, 0.2, 0.6: mean 0.5, spread 0.4 → advantages +0.5, +0.5, -1.5, +0.5 (sum 0);
    # the rejected answer is 100 tokens, the others 20: negative 150 against positive 30
    g = {"scorer": "trusted", "answers": [[0.6, True, 20], [0.6, True, 20], [0.2, False, 100], [0.6, True, 20]]}
    ratio, n = push_ratio([g], margin=0.25)
    assert n == 1 and abs(ratio - 5.0) < 1e-9
    # groups the scorer did not decide, or closer than the margin, teach nothing and are not counted
    close = {"scorer": "trusted", "answers": [[0.5, True, 20], [0.4, False, 90]]}
    undecided = dict(g, scorer="undecided")
    assert push_ratio([g, close, undecided], margin=0.25) == (ratio, 1)
