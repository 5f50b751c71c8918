"""The personalization bench's simulated users: their checkers, prompts and probes (no model)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from personalize_scenarios import (
    PROBES,
    SCENARIOS,
    at_most_two_sentences,
    count_sentences,
    ends_with_sign_off,
    has_no_list,
    is_french,
    probe_right,
    uses_metric_only,
)


@pytest.mark.parametrize("text, n", [
    ("Sleep at the same time every day.", 1),
    ("Keep a schedule. Avoid screens before bed!", 2),
    ("Pi is about 3.14 and e is about 2.72.", 1),
    ("Use e.g. a fan or earplugs. Dr. Smith agrees. That's it", 3),
    ("Tips:\n- dark room\n- cool room", 3),  # fragments on their own lines each count
    ("Really?! Yes.", 2),
    ("", 0),
])
def test_count_sentences(text, n):
    assert count_sentences(text) == n


def test_brevity():
    assert at_most_two_sentences("Go to bed earlier. Skip the late coffee.")
    assert not at_most_two_sentences("Go to bed earlier. Skip coffee. Exercise.")
    assert not at_most_two_sentences("   ")
    assert not at_most_two_sentences("Yes.")  # short, but no answer


def test_no_lists():
    assert has_no_list("Keep a routine, keep the room dark, and skip late coffee.")
    assert has_no_list("It costs -5 dollars less.\nNothing else.")
    assert not has_no_list("Tips:\n- keep a routine\n- dark room")
    assert not has_no_list("Here:\n1. Routine\n2. Darkness")
    assert not has_no_list("  * indented bullet")
    assert has_no_list("**Routine** matters most.")


def test_sign_off():
    assert ends_with_sign_off("Water it weekly. Hope this helps!")
    assert ends_with_sign_off("Water it weekly.\n\n**Hope this helps!**")
    assert ends_with_sign_off("Water it weekly. hope this helps.")
    assert not ends_with_sign_off("Hope this helps! Water it weekly.")


def test_metric():
    assert uses_metric_only("Mount Everest is 8,849 m tall.")
    assert uses_metric_only("About 4,500 kilometres, or a 5-hour flight.")
    assert uses_metric_only("Water boils at 100 °C at sea level.")
    assert not uses_metric_only("It is 29,032 feet tall.")
    assert not uses_metric_only("8,849 metres (29,032 ft).")  # metric with imperial alongside still misses
    assert not uses_metric_only("About 98.6°F.")
    assert not uses_metric_only("It is very tall.")  # no unit at all is no answer in metric


def test_french():
    assert is_french("Pour mieux dormir, il faut garder un horaire régulier et éviter les écrans le soir.")
    assert is_french("L'eau est essentielle pour la santé et le corps en a besoin chaque jour.")
    assert not is_french("To sleep better, keep a regular schedule and avoid screens in the evening.")
    assert not is_french("Bonjour!")  # too few words to tell


@pytest.mark.parametrize("answer, accepted, right", [
    ("56", ("56",), True),
    ("7 times 8 is 56.", ("56",), True),
    ("560", ("56",), False),
    ("The capital of France is Paris.", ("paris",), True),
    ("Because gold is shiny.", ("au",), False),
    ("Its symbol is Au.", ("au",), True),
    ("There are seven days.", ("7", "seven"), True),
])
def test_probe_right(answer, accepted, right):
    assert probe_right(answer, accepted) is right


def test_scenarios_are_sound():
    assert len(SCENARIOS) >= 4
    for sc in SCENARIOS.values():
        # held-out prompts are never asked in conversation
        assert not set(sc.heldout) & set(sc.prompts), sc.name
        assert len(sc.heldout) >= 8 and len(sc.prompts) >= 16 and sc.complaints
        # a complaint is not a pass: it does not already satisfy the checker by accident... and the
        # checkers are pure: the same text, the same verdict
        for text in sc.complaints:
            assert sc.check(text) == sc.check(text)
    assert all(accepted for _, accepted in PROBES) and len(PROBES) >= 10
