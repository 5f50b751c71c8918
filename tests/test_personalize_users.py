"""The personalization bench's simulated users: their checkers, prompts and probes (no model), and
the re-grading of a recorded run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.personalize.checkers import (
    answer_first,
    at_most_two_sentences,
    bold_terms,
    content_words,
    count_sentences,
    ends_with_question,
    ends_with_sign_off,
    has_known_answer,
    has_no_bold,
    has_no_code,
    has_no_list,
    is_french,
    non_answer,
    one_paragraph,
    probe_right,
    uses_metric_only,
)
from bench.personalize.probes import PROBES
from bench.personalize.prompts import CODING, GENERAL, MEASURE, Known, heldout
from bench.personalize.scenarios import (
    CONTROL,
    CONTROL_FACTS,
    FIGURE_COMPLAINTS,
    GIVE_UP,
    NON_ANSWER_COMPLAINTS,
    SCENARIOS,
    THANKS,
    accepts,
    grade_heldout,
    react,
    right_answer,
    says_something,
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


def test_the_user_complains_about_an_answer_in_their_form_that_says_nothing():
    """Prose without one thing a right answer says is not thanked, whatever the preference: the
    complaint says so, and names no preference (the preference's stays for an answer out of form)."""
    sc, q, first = SCENARIOS["no_lists"], "How do I keep houseplants alive?", lambda options: options[0]
    empty = "Houseplants are a joy, and with some care and attention they can stay alive for years."
    assert sc.check(q, empty) and not says_something(q, empty) and not accepts(sc, q, empty)
    assert react(sc, q, empty, 0, first) == (False, None, "That doesn't really answer my question.")
    assert react(sc, q, empty, 1, first)[2] in GIVE_UP
    assert react(sc, q, "Here:\n- care\n- attention", 0, first) == (False, None, sc.complaints[0])  # out of form
    assert accepts(sc, q, "Give them bright light and let the soil dry between waterings.")
    # a measurement's content is its figure: the metric user hears about a wrong one in metres
    everest, metric = "How tall is Mount Everest?", SCENARIOS["metric"]
    assert react(metric, everest, "Mount Everest is about 5,000 metres tall.", 0, first)[2] == FIGURE_COMPLAINTS[0]
    assert react(metric, everest, "Mount Everest is 8,849 metres tall.", 0, first)[2] in THANKS
    assert says_something("A prompt of no pool?", "Anything.")  # a test's own prompt is not checked


def test_every_conversation_prompt_has_what_a_right_answer_says_written_apart():
    for pool, prompts in (("general", GENERAL), ("coding", CODING)):
        items = json.loads((ROOT / "bench" / "personalize" / "data" / f"conversation-{pool}.json").read_text())
        assert [x["q"] for x in items] == prompts and all(x["source"] and len(x["words"]) >= 12 for x in items), pool
        assert not {x["q"] for x in items} & set(heldout(pool)), pool
        for x in items:  # no word of the question itself passes: an echo or a restatement says nothing
            asked = re.findall(r"[a-zà-ÿ]+", x["q"].lower())
            assert not [w for w in x["words"] if any(a.startswith(w.lower()) for a in asked)], x["q"]
    assert all(q in CONTROL_FACTS for q in MEASURE)


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

    monkeypatch.delenv("CLAWD_GRPO_K")  # the tests' own (conftest.py); the bench starts its daemons without them
    monkeypatch.delenv("CLAWD_TRAIN_METHOD")

    defaults = Settings(home=tmp_path).public()
    got = learning_settings(["--home", str(tmp_path), "--train-method", "rl", *LOOP_FLAGS])
    assert got == {k: v for k, v in defaults.items() if is_learning(k)} | {"train_method": "rl"}
    assert {"lr", "train_batch", "train_minibatch", "max_train_tokens", "opd_topk", "opd_contrast"} <= set(got)
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


def test_bold_terms():
    assert bold_terms(HOW, "**Practice** out loud with a friend, and **record** yourself.")
    assert bold_terms(HOW, "Practice __out loud__ with a friend every week.")
    assert not bold_terms(HOW, "Practice out loud with a friend every week.")
    assert not bold_terms(HOW, "### Practice\nSpeak out loud with a friend every week.")  # a heading is no bold term
    assert not bold_terms(HOW, "Practice at 2*3 times a week, with a friend and a timer.")
    assert not bold_terms(HOW, "**Sure!**") and not bold_terms(HOW, f"**{HOW}**")  # no answer
    # the form without the content: bold, and wrong
    q = "What is a black hole?"
    wrong = grade_heldout(SCENARIOS["bold_terms"], q, "A **black hole** is a hole that is black and found in space.")
    assert wrong["form"] and not wrong["known"] and not wrong["ok"]
    assert grade_heldout(SCENARIOS["bold_terms"], q, "A **black hole** is where gravity is so strong that not even "
                         "light escapes.")["ok"]


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
