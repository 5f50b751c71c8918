"""The personalization bench's simulated users: their checkers, prompts and probes (no model), and
the re-grading of a recorded run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.personalize.measures import interval, measures, paired, share_of_oracle
from bench.personalize.oracle import oracle_keep, oracle_labels
from bench.personalize.probes import PROBES
from bench.personalize.prompts import CODING, GENERAL, MEASURE, heldout
from bench.personalize.scenarios import (
    CONTROL,
    GIVE_UP,
    NON_ANSWER_COMPLAINTS,
    SCENARIOS,
    THANKS,
    Known,
    answer_first,
    at_most_two_sentences,
    content_words,
    count_sentences,
    ends_with_question,
    ends_with_sign_off,
    grade_heldout,
    has_known_answer,
    has_no_bold,
    has_no_code,
    has_no_list,
    is_french,
    non_answer,
    one_paragraph,
    probe_right,
    react,
    right_answer,
    uses_metric_only,
)

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.fast  # no model, no daemon

Q = "How do vaccines work?"
ECHO = "How do vaccines work?"
ANSWER = "Vaccines show the immune system a harmless piece of a germ. It then learns to fight the real one."


@pytest.mark.parametrize("question, reply, why", [
    (Q, ECHO, "echo"),
    (Q, "how do vaccines work", "echo"),
    (Q, "Sure! How do vaccines work? Hope this helps!", "echo"),  # politeness adds no content
    (Q, "How do vaccines work?\nHow do vaccines work?", "echo"),
    ("How does compound interest work?", "What is compound interest?", "echo"),  # reworded, nothing new
    (Q, "", "empty"),
    (Q, "   \n ", "empty"),
    (Q, "Sure!", "empty"),
    (Q, "Good question.", "empty"),
    # long, English, and not one word in common with the question
    (Q, "The Eiffel Tower was built in 1889 for the World's Fair in Paris, and it was the tallest "
        "structure in the world for forty years until the Chrysler Building in New York overtook it.", "off-topic"),
    (Q, ANSWER, None),
    ("Why is the sky blue?", "The sky is blue because the sun is shining.", None),  # bad, but an answer
    ("What is 7 times 8?", "56", None),
    ("Which planet is known as the Red Planet?", "The Red Planet is Mars.", None),
    # short answers may share no word with the question
    ("How can I stay focused while working from home?", "Set a timer for two hours and use time blocking.", None),
    # an answer in French shares no word with the English question, and is one
    (Q, "Les vaccins montrent au système immunitaire une partie inoffensive d'un microbe, et il apprend "
        "ainsi à combattre le vrai quand il arrive dans le corps plus tard.", None),
])
def test_non_answer(question, reply, why):
    assert non_answer(question, reply) == why


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
    q = "How can I sleep better at night?"
    assert at_most_two_sentences(q, "Go to bed earlier. Skip the late coffee.")
    assert not at_most_two_sentences(q, "Go to bed earlier. Skip coffee. Exercise.")
    assert not at_most_two_sentences(q, "   ")
    assert not at_most_two_sentences(q, "Yes.")  # short, but no answer
    assert not at_most_two_sentences(q, q)  # one sentence, and no answer at all
    assert at_most_two_sentences(Q, ANSWER)
    assert not at_most_two_sentences(Q, ECHO)


def test_no_lists():
    q = "How can I sleep better at night?"
    assert has_no_list(q, "Keep a routine, keep the room dark, and skip late coffee.")
    assert has_no_list(q, "It costs -5 dollars less on sleep aids.\nNothing else.")
    assert not has_no_list(q, "Tips:\n- keep a routine\n- dark room")
    assert not has_no_list(q, "Here:\n1. Routine\n2. Darkness")
    assert not has_no_list(q, "  * indented bullet")
    assert has_no_list(q, "**Routine** matters most.")
    # what the README once reported as 8 of 8: the question repeated has no list, and is no answer
    assert not has_no_list(q, q)
    assert not has_no_list(Q, ECHO)
    assert not has_no_list(Q, "")
    assert has_no_list(Q, ANSWER)


def test_sign_off():
    q = "How often should I water a cactus?"
    assert ends_with_sign_off(q, "Water it weekly. Hope this helps!")
    assert ends_with_sign_off(q, "Water it weekly.\n\n**Hope this helps!**")
    assert ends_with_sign_off(q, "Water it weekly. hope this helps.")
    assert not ends_with_sign_off(q, "Hope this helps! Water it weekly.")
    assert not ends_with_sign_off(q, f"{q} Hope this helps!")  # the echo, signed


def test_metric():
    q = "How tall is Mount Everest?"
    assert uses_metric_only(q, "Mount Everest is 8,849 m tall.")
    assert uses_metric_only(q, "About 4,500 kilometres, or a 5-hour flight.")
    assert uses_metric_only(q, "Water boils at 100 °C at sea level.")
    assert not uses_metric_only(q, "It is 29,032 feet tall.")
    assert not uses_metric_only(q, "8,849 metres (29,032 ft).")  # metric with imperial alongside still misses
    assert not uses_metric_only(q, "About 98.6°F.")
    assert not uses_metric_only(q, "It is very tall.")  # no unit at all is no answer in metric
    assert not uses_metric_only(q, "")


def test_french():
    q = "How can I sleep better?"
    assert is_french(q, "Pour mieux dormir, il faut garder un horaire régulier et éviter les écrans le soir.")
    assert is_french(q, "L'eau est essentielle pour la santé et le corps en a besoin chaque jour.")
    assert not is_french(q, "To sleep better, keep a regular schedule and avoid screens in the evening.")
    assert not is_french(q, "Bonjour!")  # too few words to tell
    assert not is_french(q, "")


def test_known_answers():
    seasons = SCENARIOS["no_lists"].heldout["Why do we have seasons?"]
    assert has_known_answer("Because the Earth's axis is tilted, so sunlight hits each half at a changing angle.", seasons)
    assert has_known_answer("Parce que l'axe de la Terre est incliné.", seasons)
    # a vague answer of the kind a trained adapter wrote: on topic, two sentences, no list, and wrong
    assert not has_known_answer("Seasons are a natural phenomenon that occur every year, and they are "
                                "influenced by the seasons of the year itself.", seasons)
    empire = SCENARIOS["metric"].heldout["How tall is the Empire State Building?"]
    assert has_known_answer("It is 381 metres tall, 443 m with its antenna.", empire)
    assert has_known_answer("About 1,454 feet to the tip.", empire)  # right, if not metric: not this check's job
    assert not has_known_answer("It is about 50 meters tall.", empire)
    assert not has_known_answer("It is very tall.", empire)
    assert has_known_answer("3.41 km² of park.", Known(ranges=((3.3, 4.1),)))


def test_grade_heldout():
    sc, q = SCENARIOS["no_lists"], "What is a black hole?"
    assert grade_heldout(sc, q, q) == {"ok": False, "non_answer": "echo", "known": False, "form": False}
    assert grade_heldout(sc, q, "") == {"ok": False, "non_answer": "empty", "known": False, "form": False}
    assert grade_heldout(sc, q, "A black hole is a region where gravity is so strong that not even light escapes.") \
        == {"ok": True, "non_answer": None, "known": True, "form": True}
    assert grade_heldout(sc, q, "Black holes:\n- gravity\n- light") == {"ok": False, "non_answer": None, "known": True, "form": False}
    wrong = grade_heldout(sc, q, "A black hole is a hole that is black and found in space.")
    assert wrong["known"] is False and wrong["form"] is True and wrong["ok"] is False  # the form without the content


def test_the_user_complains_about_a_non_answer():
    sc, q, first = SCENARIOS["no_lists"], "How do I keep houseplants alive?", lambda options: options[0]
    ok, why, said = react(sc, q, q, 0, first)
    assert (ok, why, said) == (False, "echo", "You just repeated my question.")
    assert react(sc, q, "", 0, first)[1:] == ("empty", NON_ANSWER_COMPLAINTS["empty"][0])
    off = ("The Eiffel Tower was built in 1889 for the World's Fair in Paris, and it was the tallest structure "
           "in the world for forty years until the Chrysler Building in New York overtook it.")
    assert react(sc, q, off, 0, first)[1:] == ("off-topic", "That doesn't answer it.")
    # a real answer that misses the preference gets the preference's complaint
    listy = "Here:\n- water them weekly\n- give them light"
    assert react(sc, q, listy, 0, first) == (False, None, sc.complaints[0])
    assert react(sc, q, q, 1, first)[2] in GIVE_UP  # the second miss ends it, whatever it was
    assert react(sc, q, "Water them weekly and give them bright, indirect light.", 0, first) == (True, None, THANKS[0])


def test_probes():
    assert len(PROBES) >= 48 and len({q for q, _ in PROBES}) == len(PROBES)
    for question, accepted in PROBES:
        assert accepted
        for a in accepted:  # no question contains its answer, so an echo can never pass
            assert not re.search(rf"(?<![\w]){re.escape(a)}(?![\w])", question.lower()), (question, a)
            # nor another form of it, or the right answer would be called an echo
            assert not content_words(a) <= content_words(question), (question, a)
        assert not probe_right(question, question, accepted)
        assert not probe_right(question, "", accepted)


@pytest.mark.parametrize("question, answer, accepted, right", [
    ("What is 6 times 9?", "54", ("54",), True),
    ("What is 6 times 9?", "6 times 9 is 54.", ("54",), True),
    ("What is 6 times 9?", "540", ("54",), False),
    ("What is the capital of Italy?", "The capital of Italy is Rome.", ("rome",), True),
    ("What is the chemical symbol for iron?", "Because iron is a metal.", ("fe",), False),
    ("What is the chemical symbol for iron?", "Its symbol is Fe.", ("fe",), True),
    ("How many legs does a spider have?", "A spider has eight legs.", ("8", "eight"), True),
    ("What is 144 divided by 12?", "What is 144 divided by 12?", ("12",), False),  # an echo containing the answer
    ("Rewrite this sentence in the past tense: 'I eat an apple.'", "I ate an apple.", ("ate",), True),
])
def test_probe_right(question, answer, accepted, right):
    assert probe_right(question, answer, accepted) is right


def test_probes_are_not_the_gates():
    """The gate must not be tuned on the questions the bench grades by: no bench probe appears in
    clawd/publish/ (where the gate keeps its own)."""
    gate_text = " ".join(p.read_text(errors="replace").lower() for p in (ROOT / "clawd" / "publish").rglob("*")
                         if p.is_file() and p.suffix in (".py", ".json", ".jsonl", ".txt", ".toml", ".yaml"))
    gate_text = re.sub(r"\s+", " ", gate_text)
    shared = [q for q, _ in PROBES if q.lower().split(" answer with")[0] in gate_text]
    assert not shared


def test_scenarios_are_sound():
    assert len(SCENARIOS) >= 8
    for sc in (*SCENARIOS.values(), CONTROL):
        # held-out prompts are never asked in conversation
        assert not set(sc.heldout) & set(sc.prompts), sc.name
        assert len(sc.heldout) >= 32 and len(sc.prompts) >= 16 and sc.complaints
        assert all(k.words or k.ranges for k in sc.heldout.values()), sc.name
        for q in (*sc.prompts, *sc.heldout):  # no checker passes the question itself
            assert not sc.check(q, q), (sc.name, q)


def test_the_bench_runs_on_the_daemons_defaults(tmp_path, monkeypatch):
    """Only when the scheduler looks differs from what a user gets: no learning rate, batch or
    training length of the bench's own."""
    from bench.personalize.evaluate import LOOP_FLAGS, is_learning, learning_settings
    from clawd.config import Settings

    monkeypatch.delenv("CLAWD_GRPO_K")  # the tests' own (conftest.py); the bench starts its daemons without it

    defaults = Settings(home=tmp_path).public()
    got = learning_settings(["--home", str(tmp_path), "--train-method", "rl", *LOOP_FLAGS])
    assert got == {k: v for k, v in defaults.items() if is_learning(k)} | {"train_method": "rl"}
    assert {"lr", "train_batch", "train_minibatch", "max_train_tokens"} <= set(got)
    assert {f.lstrip("-").replace("-", "_") for f in LOOP_FLAGS[::2]} == {"idle_seconds", "tick_seconds"}


def test_rescore_finds_the_echoes_the_readme_once_counted_as_success():
    """bench/out/personalize-no_lists.json is the run whose "0.50 → 1.00" was 8 of 8 questions
    repeated back; re-graded, it says so."""
    from bench.personalize.report import summary
    from bench.personalize.run import rescore

    result = rescore(json.loads((ROOT / "bench" / "out" / "personalize-no_lists.json").read_text()))
    s = summary(result, "no_lists", "combined/0")
    assert [(p["feedback_turns"], p["adherence"], p["degenerate"]) for p in s["curve"]] == \
        [(0, 0.5, 0.0), (13, 0.375, 0.5), (21, 0.0, 1.0)]
    assert s["curve"][-1]["non_answers"]["echo"] == 8
    assert s["conversation"]["non_answers_thanked"] == s["conversation"]["non_answers"] == 15


# -- the scenarios added for issue 27, each checker on passing, failing and non-answer texts ---------
HOW = "How can I get better at public speaking?"


def test_answer_first():
    assert answer_first(HOW, "Practice out loud in front of a friend, and record yourself to spot filler words.")
    assert answer_first(HOW, "Rehearse often. Here is why: practice builds the habit.")  # "Here is" mid-answer
    for preamble in ("Sure! Practice out loud in front of a friend every week.",
                     "Great question. Practice out loud in front of a friend.",
                     "Here are some tips:\n- practice out loud\n- record yourself",
                     "There are several ways to improve. Practice out loud with a friend.",
                     "I'd be happy to help! Practice out loud with a friend.",
                     "To get better at public speaking, consider the following:\n1. Practice",
                     "## Public speaking\nPractice out loud with a friend.",
                     "**Sure!** Practice out loud with a friend."):
        assert not answer_first(HOW, preamble), preamble
    assert not answer_first(HOW, HOW) and not answer_first(HOW, "")  # no answer at all


def test_no_code():
    q = "What is a callback function?"
    assert has_no_code(q, "A callback is a function you pass to another function, which calls it later, "
                          "for example when a download finishes. In Python, `sorted` takes one as `key`.")
    assert has_no_code(q, "A callback is a function passed to another:\n    - it runs later\n    - when an event fires")
    assert not has_no_code(q, "A callback is passed to another function:\n```python\ndef f(cb):\n    cb()\n```")
    assert not has_no_code(q, "A callback runs later. Example:\n\n    button.on_click(handler);\n")
    assert not has_no_code(q, "A callback is called back:\n```\nunclosed fence")
    assert not has_no_code(q, q) and not has_no_code(q, "")


def test_no_bold():
    assert has_no_bold(HOW, "Practice out loud.\n- record yourself\n- join a club")  # lists are fine here
    assert not has_no_bold(HOW, "**Practice** out loud with a friend every week.")
    assert not has_no_bold(HOW, "### Practice\nSpeak out loud with a friend every week.")
    assert not has_no_bold(HOW, "Practice __out loud__ with a friend every week.")
    assert has_no_bold(HOW, "Practice at 2*3 times a week, with a friend and a timer.")  # a lone star is no bold
    assert not has_no_bold(HOW, "**Sure!**")  # no answer


def test_ends_with_question():
    assert ends_with_question(HOW, "Practice out loud with a friend. Would you like some exercises?")
    assert ends_with_question(HOW, "Practice out loud with a friend. **Want tips for nerves?**")
    assert not ends_with_question(HOW, "Why do people fear it? Practice out loud with a friend.")
    assert not ends_with_question(HOW, HOW)  # the question itself ends with "?", and answers nothing


def test_one_paragraph():
    assert one_paragraph(HOW, "Practice out loud with a friend and record yourself.\n")
    assert not one_paragraph(HOW, "Practice out loud.\n\nRecord yourself too.")
    assert not one_paragraph(HOW, "Tips:\n- practice\n- record")
    assert not one_paragraph(HOW, "")


def test_the_control_user_corrects_only_wrong_facts():
    everest = "How tall is Mount Everest?"
    assert right_answer(everest, "Mount Everest is 8,849 metres tall.")
    assert right_answer(everest, "About 29,032 feet.")  # any unit: the control user has no preference
    assert not right_answer(everest, "Mount Everest is about 5,000 metres tall.")  # a wrong figure
    assert not right_answer(everest, everest)
    assert right_answer(HOW, "- practice\n- record yourself\n- join a club. Hope this helps!")  # any form is fine
    assert CONTROL.prompts and all(q in CONTROL.prompts for q in ("How tall is Mount Everest?", HOW))
    first = lambda options: options[0]  # noqa: E731
    assert react(CONTROL, everest, "It is 5,000 m.", 0, first) == (False, None, CONTROL.complaints[0])
    assert react(CONTROL, everest, "It is 8,849 m.", 0, first)[2] in THANKS


def test_every_scenario_checks_content_on_every_heldout_prompt():
    """Content damage shows: a reply in the preferred form without the known content fails."""
    sc = SCENARIOS["metric"]
    q = "How deep is Lake Baikal?"
    assert grade_heldout(sc, q, "Lake Baikal is 1,642 metres deep at its deepest point.")["ok"]
    damaged = grade_heldout(sc, q, "Lake Baikal is 90 metres deep at its deepest point.")
    assert damaged == {"ok": False, "non_answer": None, "known": False, "form": True}
    for pool in ("general", "measure", "coding"):
        assert all(k.words or k.ranges for k in heldout(pool).values()), pool


def test_heldout_prompts_are_many_and_apart():
    for pool, conversation in (("general", GENERAL), ("measure", MEASURE), ("coding", CODING)):
        items = json.loads((ROOT / "bench" / "personalize" / "data" / f"heldout-{pool}.json").read_text())
        assert len(items) >= 32 and all(x.get("source") for x in items), pool
        assert not {x["q"] for x in items} & set(conversation), pool


# -- continuous measures and intervals -------------------------------------------------------------
def test_measures_on_fixed_texts():
    m = measures("**Sure!** Here:\n\n- a 5 km run\n- 3 miles\n\n```py\nx = 1\n```\nHope this helps!")
    assert m == {"sentences": 6.0, "list_lines": 2.0, "words": 18.0, "metric_units": 1.0, "imperial_units": 1.0,
                 "sign_off": 1.0, "french_share": 0.0, "code_fences": 2.0, "markup": 1.0, "preamble": 1.0,
                 "paragraphs": 3.0}
    fr = measures("Le soleil est une étoile et la Terre tourne autour de lui.")
    assert fr["french_share"] == 1.0 and fr["sentences"] == 1.0 and fr["preamble"] == 0.0 and fr["list_lines"] == 0.0
    assert measures("")["words"] == 0.0 and measures("")["paragraphs"] == 0.0


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


def test_the_oracle_keeps_exactly_what_the_checker_passes():
    sc = SCENARIOS["no_lists"]
    q = "How do I keep houseplants alive?"
    samples = [{"prompt": q, "id": "a", "text": "Water them weekly and give them bright, indirect light."},
               {"prompt": q, "id": "b", "text": "Tips:\n- water weekly\n- light"},
               {"prompt": q, "id": "c", "text": q},  # an echo has no list, and is no answer
               {"prompt": q, "id": "d", "text": ""},
               {"prompt": q, "id": "e", "text": "Keep the soil moist, not wet, and wipe dust off the leaves."}]
    assert [s["id"] for s in oracle_keep(sc, samples)] == ["a", "e"]
    assert [s["id"] for s in oracle_keep(sc, samples)] == [s["id"] for s in samples if sc.check(q, s["text"])]
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
            {"question": "c", "ok": False, "margin": -0.5}]
    now = [{"question": "a", "ok": True, "margin": 0.8}, {"question": "b", "ok": True, "margin": 0.9},
           {"question": "c", "ok": False, "margin": -0.1}]
    assert near_flips(now, base) == {"margin_mean": 0.85, "margin_mean_base": 1.5, "near_flips": ["a"]}
    assert near_flips([{"question": "a", "ok": True}], [{"question": "a", "ok": True}]) == {}  # runs without margins


def test_the_grpo_scorer_is_read_against_the_checker_from_the_daemons_database(tmp_path):
    """scorer_agreement over a real store: pairs within a group, the session's first question given
    to the checker (the retry's last message is the complaint), the daemon's margin."""
    import sqlite3

    from bench.personalize.run import scorer_agreement
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
                                                              Rollout([4], listed, [-1.0], 0.95)], scorer="trusted"))
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
    assert got["groups"] == 1 and got["pairs"] == 2 and got["margin"] == 0.25
    # the pairs' reward gaps: prose - listed = 0.9 - 0.2 = +0.7 (decided, right) and 0.9 - 0.95 = -0.05 (under the margin)
    assert got["auc"] == 0.5 and got["decided"] == 0.5 and got["wrong_sign"] == 0.0
    assert got["by_group"] == [{"scorer": "trusted", "answers": [(0.9, True), (0.2, False), (0.95, False)]}]


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
