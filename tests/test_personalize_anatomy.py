"""bench.personalize.anatomy on hand-built summaries and graded answers (no model, no daemon)."""

import pytest

from bench.personalize.anatomy import content_lost, group_push

pytestmark = pytest.mark.fast


def test_group_push_splits_the_positive_advantage_by_the_checkers_verdict():
    """Rewards (0.8, 0.6, 0.2, 0.4): mean 0.5, spread 0.6, advantages (1, 1/3, -1, -1/3). The
    second answer fails the checker, so 1/3 of the 4/3 pushed up goes to a failing answer. A group
    under the margin (0.5, 0.6) trains nothing; one with no passing answer is counted."""
    summary = {"scorer": {"margin": 0.25, "by_group": [
        {"answers": [[0.8, True, 40], [0.6, False, 70], [0.2, False, 120], [0.4, True, 100]]},
        {"answers": [[0.5, True, 50], [0.6, False, 60]]},
        {"answers": [[0.9, False, 30], [0.1, False, 90]]},
        {"answers": [[0.7, True, 10]]},
    ]}}
    out = group_push(summary)
    assert out["trainable"] == 2 and out["none_pass"] == 1
    assert out["up_pass"] == pytest.approx(1.0) and out["up_fail"] == pytest.approx(1 / 3 + 1, abs=0.01)
    # pushed up: 40 words at 1, 70 at 1/3, 30 at 1 (the all-failing group, ±1) -> (40 + 70/3 + 30) / (7/3)
    assert out["up_words"] == pytest.approx((40 + 70 / 3 + 30) / (7 / 3), abs=0.1)
    assert out["down_words"] == pytest.approx((120 + 100 / 3 + 90) / (7 / 3), abs=0.1)
    assert out["up_fail_share"] == pytest.approx((4 / 3) / (7 / 3), abs=0.001)


def test_group_push_with_binary_rewards_keeps_only_groups_on_both_sides_of_the_threshold():
    """At 0.5 the first group reads (1, 1, 0, 0): mean 0.5, advantages ±1 (spread 1, times 2), so
    +1 on the passing 0.8 and +1 on the failing 0.6. The all-failing group (0.9, 0.1) reads (1, 0)
    and pushes its failing 0.9 up by 1; at 0.95 it reads (0, 0) and trains nothing, and so does
    the first (0, 0, 0, 0)."""
    summary = {"scorer": {"margin": 0.25, "by_group": [
        {"answers": [[0.8, True, 40], [0.6, False, 70], [0.2, False, 120], [0.4, True, 100]]},
        {"answers": [[0.9, False, 30], [0.1, False, 90]]},
    ]}}
    out = group_push(summary, binary=0.5)
    assert out["trainable"] == 2 and out["up_pass"] == pytest.approx(1.0) and out["up_fail"] == pytest.approx(2.0)
    assert group_push(summary, binary=0.95)["trainable"] == 0


def test_content_lost_says_what_the_adapter_wrote_instead():
    long = "Bees gather nectar from flowers and turn it into honey in the hive over many days of work."
    base = [{"known": True, "text": long}] * 4 + [{"known": False, "text": "x"}]
    loop = [{"known": True, "text": long},  # kept
            {"known": False, "text": "Bees make it."},  # shorter
            {"known": False, "text": "the bees make honey and " * 8},  # loops
            {"known": False, "text": long.replace("nectar", "sugar")},  # as long, the content gone
            {"known": True, "text": "Bees make honey from nectar."}]  # gained
    assert content_lost(base, loop) == {"lost": 3, "gained": 1, "loops": 1, "shorter": 1, "as_long": 1}
