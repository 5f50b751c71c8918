"""The personalization bench's measures, intervals, oracle filter and reach, and what it reads from a
run: probe margins, the GRPO scorer against the checker, idle cost, and the cached run's key (no model)."""

from __future__ import annotations

import pytest

from bench.personalize.measures import interval, measures, paired, share_of_oracle
from bench.personalize.oracle import oracle_keep, oracle_labels
from bench.personalize.scenarios import SCENARIOS, accepts

pytestmark = pytest.mark.fast  # no model, no daemon


# -- continuous measures and intervals -------------------------------------------------------------
def test_measures_on_fixed_texts():
    m = measures("**Sure!** Here:\n\n- a 5 km run\n- 3 miles\n\n```py\nx = 1\n```\nHope this helps!")
    assert m == {"sentences": 6.0, "list_lines": 2.0, "words": 18.0, "metric_units": 1.0, "imperial_units": 1.0,
                 "sign_off": 1.0, "french_share": 0.0, "code_fences": 2.0, "markup": 1.0, "preamble": 1.0,
                 "paragraphs": 3.0, "loops": 0.0}
    fr = measures("Le soleil est une étoile et la Terre tourne autour de lui.")
    assert fr["french_share"] == 1.0 and fr["sentences"] == 1.0 and fr["preamble"] == 0.0 and fr["list_lines"] == 0.0
    assert measures("")["words"] == 0.0 and measures("")["paragraphs"] == 0.0
    # a held-out answer of a trained adapter (no_bold, stop 54): 27 word trigrams, 9 distinct
    assert measures("A black hole is a theoretical object that is" + " a black hole is" * 5)["loops"] == 1.0
    # the same words once each, and a long answer that repeats one phrase twice, do not loop
    assert measures("A black hole is a theoretical object that is a black hole.")["loops"] == 0.0
    assert measures("Plants need light. " * 2 + "They also need water, soil, air and warmth to grow well.")["loops"] == 0.0


def test_the_bootstrap_interval_against_a_hand_computation():
    # [0]*9 + [1]: a resample's mean is k/10, k ~ Binomial(10, 0.1). P(k = 0) = 0.349 > 0.025, so the
    # low end is 0; P(k <= 2) = 0.930 and P(k <= 3) = 0.987, so the 97.5th percentile is 0.3.
    assert interval([0.0] * 9 + [1.0], resamples=20_000) == (0.1, 0.0, 0.3)
    # [0, 0, 1]: k ~ Binomial(3, 1/3); P(k <= 2) = 26/27 = 0.963 < 0.975, so the high end is 1.
    assert interval([0.0, 0.0, 1.0], resamples=20_000) == (pytest.approx(1 / 3), 0.0, 1.0)
    assert interval([0.5] * 4) == (0.5, 0.5, 0.5)
    # paired: the change on the same prompts; one prompt gained, none lost
    assert paired([1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], resamples=20_000)[0] == 0.25
    with pytest.raises(ValueError):
        paired([1.0], [0.0, 1.0])
    assert share_of_oracle(0.3, 0.6) == 0.5 and share_of_oracle(0.3, 0.0) is None


def test_the_oracle_keeps_exactly_what_the_user_accepts():
    sc = SCENARIOS["no_lists"]
    q = "How do I keep houseplants alive?"
    samples = [{"prompt": q, "id": "a", "text": "Water them weekly and give them bright, indirect light."},
               {"prompt": q, "id": "b", "text": "Tips:\n- water weekly\n- light"},
               {"prompt": q, "id": "c", "text": q},  # an echo has no list, and is no answer
               {"prompt": q, "id": "d", "text": ""},
               {"prompt": q, "id": "e", "text": "Keep the soil moist, not wet, and wipe dust off the leaves."},
               {"prompt": q, "id": "e2", "text": "With care and attention they stay alive."}]  # prose, saying nothing
    assert [s["id"] for s in oracle_keep(sc, samples)] == ["a", "e"]
    assert [s["id"] for s in oracle_keep(sc, samples)] == [s["id"] for s in samples if accepts(sc, q, s["text"])]
    assert sc.check(q, samples[-1]["text"])  # the checker alone would keep the last
    assert [(s["id"], y) for s, y in oracle_labels(sc, samples, pairs=False)] == [("a", 1), ("e", 1)]

    # GRPO's labels: each prompt's passing and failing samples paired in order, each prompt's labels
    # summing to zero; the unmatched failing ones, and a prompt none of whose samples passes, give none
    other = "Name three planets."
    samples += [{"prompt": other, "id": "f", "text": "- Mars\n- Venus\n- Earth"},
                {"prompt": other, "id": "g", "text": "1. Mars\n2. Venus\n3. Earth"}]
    assert [(s["id"], y) for s, y in oracle_labels(sc, samples, pairs=True)] == [
        ("a", 1), ("b", -1), ("c", -1), ("e", 1)]


def test_reach_counts_greedy_and_sampled_answers_apart():
    from bench.personalize.reach import reach

    q, r = "How do I keep houseplants alive?", "How can I sleep better at night?"
    prose, listy = "Water them weekly and give them bright, indirect light.", "Tips:\n- water\n- light"
    answers = [{"prompt": q, "greedy": True, "text": listy}, {"prompt": q, "greedy": False, "text": prose},
               {"prompt": q, "greedy": False, "text": listy}, {"prompt": r, "greedy": True, "text": listy},
               {"prompt": r, "greedy": False, "text": listy}, {"prompt": r, "greedy": False, "text": listy}]
    assert reach(answers, SCENARIOS["no_lists"].check) == {"greedy": 0.0, "sampled": 0.25, "prompts_with_a_pass": 0.5,
                                                          "samples": 4}


def test_reach_regrades_recorded_answers_and_keeps_the_runs_settings(tmp_path):
    import json

    from bench.personalize.reach import regrade

    q = "How do I keep houseplants alive?"
    answers = {"general": [{"prompt": q, "greedy": True, "text": "Water them:\n1. weekly\n2. in light"},
                           {"prompt": q, "greedy": False, "text": "Water them weekly and give them **bright light**."}]}
    (tmp_path / "personalize-reach-m-answers.json").write_text(json.dumps(answers))
    (tmp_path / "personalize-reach-m.json").write_text(json.dumps({"model": "m", "k": 1, "scenarios": {}}))
    regrade(tmp_path / "personalize-reach-m-answers.json")
    out = json.loads((tmp_path / "personalize-reach-m.json").read_text())
    assert out["model"] == "m" and out["k"] == 1 and "metric" not in out["scenarios"]  # no measure answers recorded
    assert out["scenarios"]["bold_terms"] == {"pool": "general", "greedy": 0.0, "sampled": 1.0, "prompts_with_a_pass": 1.0,
                                              "samples": 1}
    assert out["scenarios"]["no_lists"]["greedy"] == 0.0 and out["scenarios"]["no_lists"]["sampled"] == 1.0


def test_probe_margins_on_recorded_logprobs():
    from bench.personalize.evaluate import margin
    from bench.personalize.report import near_flips

    def e(token, lp, *top):
        return {"token": token, "logprob": lp, "top": [[token, lp], *[list(t) for t in top]]}

    # right: " 92" chosen at -0.2 against " 82" at -1.9; the question's own numbers do not count
    right = [e("The", -0.1), e(" sum", -0.3), e(" is", -0.1), e(" 92", -0.2, (" 82", -1.9), (" ninety", -2.5))]
    assert margin(right, ("92",)) == pytest.approx(1.7)
    # another form of the right answer is no wrong alternative
    assert margin([e(" 9", -0.5, (" nine", -0.7), (" 8", -2.0))], ("9", "nine")) == pytest.approx(1.5)
    # wrong: " 82" chosen at -0.4 while " 92" had -0.9; the nearest miss over every position
    wrong = [e("The", -0.1), e(" sum", -0.3, (" 92", -4.0)), e(" is", -0.1), e(" 82", -0.4, (" 92", -0.9))]
    assert margin(wrong, ("92",)) == pytest.approx(-0.5)
    assert margin([e(" 10", -0.1, (" 12", -2.0))], ("1",)) is None  # "10" does not begin "1"; none near: far
    assert margin([e(" 1", -0.1, (" 12", -2.0))], ("12",)) == pytest.approx(-1.9)  # "12" whole, a near miss
    base = [{"question": "a", "ok": True, "margin": 2.0}, {"question": "b", "ok": True, "margin": 1.0},
            {"question": "c", "ok": False, "margin": -0.5}, {"question": "d", "ok": True, "margin": 0.4},
            {"question": "e", "ok": True, "margin": 3.0}]
    now = [{"question": "a", "ok": True, "margin": 0.8}, {"question": "b", "ok": True, "margin": 0.9},
           {"question": "c", "ok": False, "margin": -0.1}, {"question": "d", "ok": False, "margin": -0.2},
           {"question": "e", "ok": False, "margin": -1.0}]
    # d and e are both lost; only d was a coin toss on the base (0.4 nat, under the gate's 1.0)
    assert near_flips(now, base) == {"margin_mean": 0.125, "margin_mean_base": 1.6, "near_flips": ["a"],
                                     "lost_coin_tosses": ["d"]}
    from bench.personalize.report import MIN_MARGIN
    from clawd.publish.gate import MIN_MARGIN as GATES

    assert MIN_MARGIN == GATES  # one threshold for a coin toss, the gate's
    assert near_flips([{"question": "a", "ok": True}], [{"question": "a", "ok": True}]) == {}  # runs without margins


def test_the_grpo_scorer_is_read_against_the_checker_from_the_daemons_database(tmp_path):
    """scorer_agreement over a real store: pairs within a group, the session's first question given
    to the checker (the retry's last message is the complaint), the daemon's margin."""
    import sqlite3

    from bench.personalize.agreement import scorer_agreement
    from clawd.store.records import Rollout, RolloutGroup, Turn
    from clawd.store.store import Store

    store = Store(tmp_path / "clawd.db")
    sid = store.open_session("s")
    question = "Why is the sky blue?"
    t = Turn(session_id=sid, index=0, kind="main", completion_id="c1", prompt_ids=[1],
             request={"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": "- Light"},
                                   {"role": "user", "content": "No lists please."}]})
    store.insert_turn(t)
    prose = "The sky is blue because air scatters blue sunlight more than red light, so blue reaches us from everywhere."
    listed = "- Air scatters light\n- Blue scatters most\n- So the sky looks blue"
    store.add_group(RolloutGroup(t.id, "sampled", None, 0.7, [Rollout([2], prose, [-1.0], 0.9), Rollout([3], listed, [-1.0], 0.2),
                                                              Rollout([4], listed, [-1.0], 0.95), Rollout([5], "", [-1.0], 0.0, True)],
                                 scorer="trusted"))
    store.add_group(RolloutGroup(t.id, "hindsight", None, 0.7, [Rollout([2], listed, [], 0.0), Rollout([3], prose, [], 1.0)],
                                 scorer="hindsight"))  # not sampled: not the scorer's

    class D:
        def rows(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
            con = sqlite3.connect(tmp_path / "clawd.db")
            con.row_factory = sqlite3.Row
            return con.execute(sql, args).fetchall()

        def status(self) -> dict:
            return {"grpo": {"scorer": {"margin": 0.25}}}

    got = scorer_agreement(D(), SCENARIOS["no_lists"])
    assert got["groups"] == 1 and got["pairs"] == 3 and got["margin"] == 0.25
    # the pairs' reward gaps: prose - listed = 0.9 - 0.2 = +0.7 (decided, right), 0.9 - 0.95 = -0.05 (under
    # the margin), and prose - the refused empty answer (which says nothing: it fails) = +0.9
    assert got["auc"] == pytest.approx(2 / 3) and got["decided"] == pytest.approx(2 / 3) and got["wrong_sign"] == 0.0
    assert got["by_group"] == [{"scorer": "trusted", "answers": [(0.9, True, 19), (0.2, False, 14), (0.95, False, 14), (0.0, False, 0)],
                                "loops": 0, "refused": 1}]
    # length alone ranks the 14-word lists above the 19-word prose in both (passes, fails) pairs
    assert got["length_auc"] == 0.0
    # decided pairs: prose 0.9 over list 0.2 favours the longer (0); list 0.95 over list 0.2, the same length
    # (1/2); prose and the 0.95 list over the empty answer, the longer (0, 0); the 0.2 list and it are under the margin
    assert got["shorter_first"] == 0.125


@pytest.mark.fast
def test_idle_cost_is_read_from_the_daemons_log_lines():
    """The seconds GRPO's rollouts, training and the gate took, from the lines the daemon writes."""
    from bench.personalize.evaluate import idle_cost
    log = "\n".join([
        "2026-12-04 10:34:20,933 INFO clawd.train: run 1: adapter 0001 from 8 turns, loss 0.0352 → 1.0491, 110s",
        "2026-12-04 10:36:33,757 INFO clawd.publish: gate passed in 129.3s",
        "2026-12-04 10:50:01,000 INFO clawd.judge: GRPO rollouts: 5 group(s) in 301s",
        "2026-12-04 10:51:01,000 INFO clawd.judge: GRPO rollouts: 2 group(s) in 99s",
        "2026-12-04 10:59:00,000 INFO clawd.train: run 2: adapter 0002 from 7 turns, loss -0.1 → -0.2, 240s",
        "2026-12-04 11:02:00,000 INFO clawd.publish: gate REJECTED in 150.7s: 2 probes lost",
        "2026-12-04 11:03:00,000 INFO clawd.judge: turn 125: group of 4 scored 0.81 0.31 0.24 0.57 (trusted)"])
    assert idle_cost(log) == {"groups": 7, "rollouts_s": 400, "train_s": 350, "gate_s": 280.0, "rounds": 2}


@pytest.mark.fast
def test_a_cached_loop_run_is_keyed_by_the_daemons_source(tmp_path):
    """A scheduler change with the same settings is a new point: the loop cache's key changes with
    any .py file under clawd/, and with nothing else."""
    from bench.personalize.run import daemon_source
    (tmp_path / "clawd" / "train").mkdir(parents=True)
    (tmp_path / "clawd" / "scheduler.py").write_text("enough = ready >= 8\n")
    (tmp_path / "clawd" / "train" / "loop.py").write_text("")
    first = daemon_source(tmp_path)
    (tmp_path / "clawd" / "notes.md").write_text("not code")
    assert daemon_source(tmp_path) == first
    (tmp_path / "clawd" / "scheduler.py").write_text("enough = ready * 8 + groups * 8 >= 64\n")
    assert daemon_source(tmp_path) != first
    (tmp_path / "clawd" / "scheduler.py").write_text("enough = ready >= 8\n")
    assert daemon_source(tmp_path) == first
    (tmp_path / "clawd" / "train" / "loop.py").rename(tmp_path / "clawd" / "loop.py")  # same text, moved
    assert daemon_source(tmp_path) != first


@pytest.mark.fast
def test_a_summary_names_the_daemons_flags_and_the_users_idle_limit():
    """A run at other settings, or with less idle time after each block, never overwrites the
    summary of a run at the defaults."""
    from bench.personalize.report import args_tag
    assert args_tag({"config": {"daemon_args": ""}}) == ""
    assert args_tag({"config": {"daemon_args": "--lr 2e-4 --w-rl 0"}}) == "lr-2e-4-w-rl-0"
    assert args_tag({"config": {"daemon_args": "--lr 2e-4", "idle_limit": 1200.0}}) == "lr-2e-4-idle-1200s"
    assert args_tag({"config": {"daemon_args": None, "idle_limit": 900}}) == "idle-900s"


@pytest.mark.fast
def test_answers_as_served_are_graded_like_the_greedy_ones_without_probes():
    """served_column: the held-out figures of `column` for answers with no probes, against the
    base's as served: one prompt moves from two paragraphs to one, so the form gains 1/2."""
    from bench.personalize.report import served_column
    from bench.personalize.scenarios import SCENARIOS

    sc = SCENARIOS["one_paragraph"]
    q1, q2 = sorted(sc.heldout)[:2]
    one, two = "A short answer in one paragraph.", "A first paragraph.\n\nA second one."

    def ev(a, b):
        return {"heldout": [{"pool": sc.pool, "prompt": q1, "text": a}, {"pool": sc.pool, "prompt": q2, "text": b}],
                "probes": []}

    col = served_column(sc, ev(one, one), ev(two, one))
    assert col["form"][0] == 1.0 and col["form_gain"][0] == 0.5 and col["degenerate"] == 0.0
    assert set(col) == {"form", "form_gain", "adherence", "gain", "degenerate", "wrong", "words"}
    assert col["words"] == pytest.approx(6.0)
