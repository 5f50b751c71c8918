"""The judge's pure parts on hand-written judge answers: parsing, majority, hint choice, cutting."""

from __future__ import annotations

import json
from pathlib import Path

from clawd.judge import choose_hint, cut_middle, majority, parse_boxed, parse_hint, verdict_from_probs
from clawd.records import Vote


def test_last_boxed_counts():
    assert parse_boxed("The user thanked them. \\boxed{1}") == 1
    assert parse_boxed("First I thought \\boxed{1}, but the user corrected it: \\boxed{-1}") == -1
    assert parse_boxed("\\boxed{-1} ... on reflection it is unclear \\boxed{0}") == 0
    assert parse_boxed("score: \\boxed{ +1 }") == 1


def test_failed_votes():
    assert parse_boxed("The answer is good. 1") is None  # no box
    assert parse_boxed("\\boxed{2}") is None  # out of range
    assert parse_boxed("\\boxed{1} then \\boxed{5}") is None  # the last one is what counts
    assert parse_boxed("\\boxed{yes}") is None
    assert parse_boxed("\\boxed{}") is None
    assert parse_boxed("\\boxed{1.0}") is None
    assert parse_boxed("\\boxed{1") is None  # never closed
    assert parse_boxed("") is None
    assert parse_boxed("\\boxed{0}", allowed=(1, -1)) is None  # hint votes are 1 or -1


def test_majority():
    assert majority([1, 1, -1]) == 1
    assert majority([-1, None, -1]) == -1
    assert majority([1, -1, None]) == 0  # a tie at the top
    assert majority([1, -1, 0]) == 0
    assert majority([None, None, None]) == 0  # all failed
    assert majority([]) == 0
    assert majority([0, 0, 1]) == 0
    assert majority([None, None, 1]) == 1  # one valid vote is a majority of the valid ones
    assert majority([1, 1, -1, -1, 0]) == 0


def test_hint_parsing_and_choice():
    raw = "\\boxed{1}\n[HINT_START]Ask which city the user means before booking.[HINT_END]"
    assert parse_hint(raw) == "Ask which city the user means before booking."
    assert parse_hint("[HINT_START]one[HINT_END] and [HINT_START] two [HINT_END]") == "two"
    assert parse_hint("[HINT_START]no end marker, ends here\n\nan unrelated paragraph") == "no end marker, ends here"
    # as small models write them
    assert parse_hint("\\boxed{1} HINT_START\nSay Ottawa.") == "Say Ottawa."
    assert parse_hint("1. **HINT_START**: Name one title.\n2. **HINT_END**: because") == "Name one title."
    assert parse_hint("no markers at all") is None
    assert parse_hint("[HINT_START][HINT_END]") is None
    votes = [
        Vote("hint", "", 1, "Use Ottawa, not Toronto."),
        Vote("hint", "", 1, "The capital of Canada is Ottawa; check facts before answering."),
        Vote("hint", "", -1, "A much longer hint that came with a negative vote and must be ignored entirely."),
        Vote("hint", "", 1, "short"),  # 10 characters or fewer: not a hint
    ]
    assert choose_hint(votes) == "The capital of Canada is Ottawa; check facts before answering."
    assert choose_hint([Vote("hint", "", 1, "0123456789")]) is None  # exactly 10 is not over 10
    assert choose_hint([Vote("hint", "", -1, None), Vote("hint", "", None, None)]) is None
    assert choose_hint([]) is None


def test_verdict_from_probs():
    assert verdict_from_probs({"1": 0.7, "-1": 0.2, "0": 0.1}, 0.1) == 1
    assert verdict_from_probs({"1": 0.2, "-1": 0.75, "0": 0.05}, 0.3) == -1
    assert verdict_from_probs({"1": 0.45, "-1": 0.4, "0": 0.15}, 0.1) == 0  # margin not cleared
    assert verdict_from_probs({"1": 0.1, "-1": 0.1, "0": 0.8}, 0.0) == 0


def test_cut_middle_keeps_both_ends():
    text = "START " + "x" * 5000 + " END"
    cut = cut_middle(text, 300)
    assert cut.startswith("START ") and cut.endswith(" END") and "characters omitted" in cut
    assert len(cut) < 400
    assert cut_middle("short", 300) == "short"


def test_corpus_is_well_formed():
    lines = (Path(__file__).parent / "data" / "judge_cases.jsonl").read_text().splitlines()
    cases = [json.loads(x) for x in lines]
    assert len(cases) >= 60 and len({c["id"] for c in cases}) == len(cases)
    assert {c["label"] for c in cases} == {1, 0, -1}
    for c in cases:
        assert c["messages"][-1]["role"] == "user" and c["next_state"]["role"] in ("user", "tool")
        assert c["output"]["text"] or c["output"]["tool_calls"]
