"""The judge's pure parts on hand-built inputs: the calibration's fit, thresholds and trust
modes, evidence hints and the tool-output rule, cutting, and the corpus itself."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from clawd.judge.calibration import (
    COMPONENTS,
    best_threshold,
    calibrate,
    case_turn,
    cross_val_probs,
    fit,
    fit_softmax,
    folds,
    metrics,
    predict,
    verdicts,
)
from clawd.judge.judge import SHOTS, cut_middle
from clawd.store.hints import evidence_hint, feedback_hint, quotes_tool_output, tool_texts
from clawd.store.records import NextState, ToolCall, Turn

pytestmark = pytest.mark.fast  # no model, no daemon

DATA = Path(__file__).parent / "data"


def test_softmax_fit_separates_separable_features():
    # feature 0 high → +1, low → -1, middle → 0
    x = np.array([[3.0], [2.5], [2.8], [-3.0], [-2.7], [-2.9], [0.1], [-0.1], [0.0]])
    y = np.array([1, 1, 1, -1, -1, -1, 0, 0, 0])
    p = predict(fit_softmax(x, y, l2=0.01, steps=2000), np.array([[2.9], [-2.9], [0.05]]))
    assert list(p.argmax(1)) == [2, 0, 1]  # columns are -1, 0, +1
    assert np.allclose(p.sum(1), 1)


def test_verdicts_and_metrics_by_hand():
    p = np.array([[0.1, 0.1, 0.8], [0.6, 0.3, 0.1], [0.45, 0.1, 0.45], [0.2, 0.7, 0.1]])
    assert list(verdicts(p, 0.5)) == [1, -1, 0, 0]  # row 2: 0.45 < 0.5 → 0; row 3: 0 is its top class
    assert list(verdicts(p, None)) == [0, 0, 0, 0]
    y = np.array([1, 1, -1, 0])
    m = metrics(verdicts(p, 0.5), y)
    # accuracy: rows 0 and 3 right = 2/4; ±1 cases are rows 0, 1, 2: row 1 wrong sign (1/3), decided 2/3
    assert m == {"accuracy": 0.5, "wrong_sign": 0.3333, "decided": 0.6667}


def test_threshold_is_the_most_accurate_within_the_wrong_sign_bound():
    # two confident right answers, one wrong-sign answer at 0.6 confidence
    p = np.array([[0.05, 0.05, 0.9], [0.9, 0.05, 0.05], [0.6, 0.1, 0.3]])
    y = np.array([1, -1, 1])
    assert best_threshold(p, y, 0.0) == 0.61  # the lowest threshold that keeps row 2 undecided
    assert best_threshold(p, y, 0.5) == 0.34  # a loose bound: decide everything
    assert best_threshold(np.array([[0.9, 0.05, 0.05]]), np.array([1]), 0.0) is None  # only wrong answers


def test_folds_are_stratified_and_cross_validation_never_sees_its_case():
    y = np.array([1] * 10 + [-1] * 10 + [0] * 5)
    f = folds(y)
    for i in range(5):
        assert (y[f == i] == 1).sum() == 2 and (y[f == i] == -1).sum() == 2 and (y[f == i] == 0).sum() == 1
    # one case whose feature contradicts its label: cross-validation must get it wrong (a fit that
    # had seen it could not be this sure)
    x = np.where(y[:, None] == 1, 2.0, np.where(y[:, None] == -1, -2.0, 0.0)) + np.linspace(0, 0.1, 25)[:, None]
    x[0] = -2.0
    assert cross_val_probs(x, y)[0].argmax() == 0


def test_hidden_state_enters_through_its_principal_components():
    """A 'hidden state' of 200 dims: the label lives in one direction of large variance, the plain
    feature is noise. The fit finds it through the components (fitted on the training cases), a
    plain-only fit cannot; and the stored fit, through JSON, predicts the same."""
    rng = np.random.default_rng(1)
    y = np.array([1] * 90 + [-1] * 90 + [0] * 60)
    direction = rng.normal(0, 1, 200)
    direction /= np.linalg.norm(direction)
    hidden = rng.normal(0, 0.3, (240, 200)) + np.outer(y * 4.0, direction) + np.outer((y == 0) * 1.0, rng.normal(0, 1, 200))
    x = np.hstack([rng.normal(0, 1, (240, 1)), hidden])
    model = fit(x, y, plain=1)
    assert np.array(model["basis"]).shape == (COMPONENTS, 200) and model["plain"] == [1]
    new = np.hstack([[[0.0], [0.0]], np.outer([4.0, -4.0], direction)])
    assert list(predict(model, new).argmax(1)) == [2, 0]  # columns are -1, 0, +1
    assert metrics(verdicts(cross_val_probs(x, y, plain=1), 0.5), y)["accuracy"] > 0.9
    assert metrics(verdicts(cross_val_probs(x[:, :1], y), 0.5), y)["accuracy"] < 0.6
    assert np.allclose(predict(json.loads(json.dumps(model)), new), predict(model, new))


def test_trust_modes():
    rng = np.random.default_rng(0)
    y = np.array([1] * 40 + [-1] * 40 + [0] * 20)
    good = np.stack([y * 3.0 + rng.normal(0, 0.3, 100), (y == 0) * 3.0 + rng.normal(0, 0.3, 100)], 1)
    cal = calibrate(good, y, "m.gguf", "ask", min_accuracy=0.8, max_wrong_sign=0.03, seconds_per_case=1.0)
    assert cal.mode == "trusted" and cal.cv["accuracy"] >= 0.95 and cal.cv["wrong_sign"] <= 0.03
    assert cal.verdict(cal.probs([3.0, 0.0])) == 1 and cal.verdict(cal.probs([-3.0, 0.0])) == -1
    noise = rng.normal(0, 1, (100, 2))
    bad = calibrate(noise, y, "m.gguf", "ask", min_accuracy=0.8, max_wrong_sign=0.03, seconds_per_case=1.0)
    assert bad.mode in ("confident_only", "feedback_only")
    if bad.mode == "feedback_only":
        assert bad.threshold is None and bad.verdict(bad.probs([5.0, 5.0])) == 0
    else:
        assert bad.cv["wrong_sign"] == 0
    assert "fit" not in bad.summary()


def _turn(text="", calls=(), messages=None):
    return Turn(session_id=1, index=0, kind="main", completion_id="c", prompt_ids=[],
                request={"messages": messages or [{"role": "user", "content": "hi"}]}, text=text,
                tool_calls=[ToolCall(id=f"call_{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)])


def test_evidence_hints():
    t = _turn("1. one\n2. two")
    ns = NextState(turn_id=1, role="user", content="No lists.", messages=[{"role": "user", "content": "No lists."}])
    h = evidence_hint(t, ns, -1)
    assert h is not None and '"No lists."' in h
    assert evidence_hint(t, ns, 1) is None and evidence_hint(t, ns, 0) is None
    tool = _turn(calls=[("read", '{"path": "setings.json"}')])
    out = "Error: ENOENT: no such file or directory, open 'setings.json'"
    ns = NextState(turn_id=1, role="tool", content=out, messages=[{"role": "tool", "content": out}])
    h = evidence_hint(tool, ns, -1)
    assert h is not None and "read(" in h and "ENOENT" not in h and not quotes_tool_output(h, [out])


def test_a_hint_that_quotes_a_tool_result_is_refused():
    out = "port: 8080\nhost: 127.0.0.1\nsecret_token: abc123 expires tomorrow at noon"
    t = _turn(calls=[("read", '{"path": "config.yaml"}')])
    ns = NextState(turn_id=1, role="tool", content=out, messages=[{"role": "tool", "content": out}])
    assert quotes_tool_output("The token abc123 expires tomorrow at noon.", tool_texts(t, ns))
    assert not quotes_tool_output("Read the config before answering.", tool_texts(t, ns))
    assert quotes_tool_output("It says 8080", ["8080"])  # a short result quoted whole
    hint, why = feedback_hint("secret_token: abc123 expires tomorrow, use it", t, ns)
    assert hint is None and "tool" in why
    hint, why = feedback_hint("Too long, answer in one line.", t, ns)
    assert hint is not None and "Too long, answer in one line." in hint and why is None
    assert feedback_hint("  ", t, ns) == (None, None)
    # a user correction that pastes the tool's output back is not a hint either
    user_ns = NextState(turn_id=1, role="user", content="x", messages=[
        {"role": "tool", "content": out}, {"role": "user", "content": "wrong, it says secret_token: abc123 expires tomorrow"}])
    assert evidence_hint(t, user_ns, -1) is None


def test_cut_middle_keeps_both_ends():
    text = "START " + "x" * 5000 + " END"
    cut = cut_middle(text, 300)
    assert cut.startswith("START ") and cut.endswith(" END") and "characters omitted" in cut
    assert len(cut) < 400
    assert cut_middle("short", 300) == "short"


FAMILIES = {"terse_imperative": -1, "polite_request": -1, "sarcasm": -1, "rephrase_repeat": -1, "correction": -1,
            "tool_error": -1, "implicit_move_on": 1, "thanks": 1, "tool_success": 1}


def test_corpus_is_well_formed_and_the_splits_are_apart():
    """judge_heldout3.jsonl (40) and judge_quoted_tuning.jsonl (48): change requests that quote a
    friendly phrase, and quoted praise, each written by a helper who saw neither the other file nor
    the bench that found the weakness; the tuning cases join the shipped split once the calibration
    is measured with them (bench/judge/run.py), the held-out ones are never tuned on."""
    splits = {}
    for name in ("judge_cases.jsonl", "judge_heldout.jsonl", "judge_heldout2.jsonl", "judge_heldout3.jsonl",
                 "judge_quoted_tuning.jsonl"):
        cases = [json.loads(x) for x in (DATA / name).read_text().splitlines()]
        assert len({c["id"] for c in cases}) == len(cases)
        for c in cases:
            assert c["messages"][-1]["role"] == "user" and c["next_state"]["role"] in ("user", "tool")
            assert c["output"]["text"] or c["output"]["tool_calls"]
            assert FAMILIES.get(c["family"], c["label"]) == c["label"], c["id"]
            if c["next_state"]["role"] == "tool":
                assert c["output"]["tool_calls"]
            for call in c["output"]["tool_calls"]:
                json.loads(call["arguments"])
            case_turn(c)
        splits[name] = cases
    # no case (a request with what came after it), and no worked example, appears in two places
    def pairs(cs):
        return {(c["messages"][-1]["content"].strip().lower(), c["next_state"]["messages"][-1]["content"].strip().lower())
                for c in cs}

    tune, held, held2, held3, quoted = splits.values()
    assert len(tune) + len(held) >= 150 and len(held) >= 60 and len(held2) >= 60
    assert {c["label"] for c in tune} == {1, 0, -1}
    assert not pairs(held3) & (pairs(tune) | pairs(held) | pairs(held2) | pairs(quoted))
    assert not pairs(quoted) & (pairs(tune) | pairs(held) | pairs(held2))
    assert not pairs(tune) & pairs(held) and not pairs(tune) & pairs(held2) and not pairs(held) & pairs(held2)
    assert not {(s[0].lower(), s[3].lower()) for s in SHOTS} & (pairs(tune) | pairs(held) | pairs(held2) | pairs(held3)
                                                               | pairs(quoted))


def test_the_pairwise_scorer_bench_cancels_position_and_reads_pairs_as_the_daemon_would():
    from bench.judge.pairwise import as_case, mixed_pairs, report, symmetric
    from clawd.judge.scorer import measure

    # read A-first: +3 for the meeting answer; read it second: the other got +1 → preference (3 - 1) / 2
    assert symmetric(3.0, 1.0) == 1.0
    assert symmetric(2.0, 2.0) == 0.0  # "always A" whatever the order: a tie, not a win
    case = {"scenario": "s", "answers": [{"text": "a", "meets": True}, {"text": "bb\nb", "meets": False},
                                         {"text": "c", "meets": True}, {"text": "dd", "meets": False}]}
    assert mixed_pairs(case) == [("a", "bb\nb"), ("a", "dd"), ("c", "bb\nb"), ("c", "dd")]
    # a pair as two answers' mean win probabilities: the gap is 2 sigmoid(d) - 1
    (p, good), (q, bad) = as_case(math.log(3))
    assert good and not bad and abs(p - 0.75) < 1e-12 and abs(p - q - 0.5) < 1e-12
    # 4 pairs, one the wrong way at a gap of 0.5 (d = log 3): the margin must pass it
    prefs = [[math.log(9), math.log(9), -math.log(3), math.log(9)]]
    assert measure([as_case(x) for x in prefs[0]], [[1, 4]] * 4, "m", 0.0, 0).margin == 0.55
    r = report([case], prefs, 0.55)
    assert r["all"]["pairs"] == 4 and r["all"]["decided"] == 0.75 and r["all"]["wrong_sign"] == 0.0
    assert r["all"]["auc_any_margin"] == 0.75 and r["mode"] == "trusted"
    assert r["all"]["length_auc"] == 1.0 and r["all"]["lines_auc"] == 0.75  # shorter first; fewer lines (ties half)


def test_the_within_question_bench_reads_a_history_as_the_daemon_fits_it():
    """A retry's question is the complaint before it (the user's last message, as
    rollouts._user_fit reads it); the evidence is the user's corrections, newest first, distinct."""
    from bench.judge.within_question import labeled

    turns = [
        {"prompt": "How long is the Nile?", "attempt": 0, "text": "3,580 miles.", "ok": False, "reaction": "Check the figure."},
        {"prompt": "How long is the Nile?", "attempt": 1, "text": "About 6,650 km.", "ok": True, "reaction": "Thanks!"},
        {"prompt": "Why is the sky blue?", "attempt": 0, "text": "It is.", "ok": False, "reaction": "Too vague."},
        {"prompt": "Why is the sky blue?", "attempt": 1, "text": "Still.", "ok": False, "reaction": "Check the figure."},
        {"prompt": "What is 2+2?", "attempt": 0, "text": "4", "ok": True, "reaction": "Thanks!"},
    ]
    evidence, rows = labeled({"turns": turns})
    assert evidence == ["Check the figure.", "Too vague."]
    assert rows == [("How long is the Nile?", "3,580 miles.", False), ("Check the figure.", "About 6,650 km.", True),
                    ("Why is the sky blue?", "It is.", False), ("Too vague.", "Still.", False),
                    ("What is 2+2?", "4", True)]
