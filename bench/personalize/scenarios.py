"""What the simulated users of bench/personalize/run.py want, and how they say it.

Each scenario is a hidden preference with a pure checker (question, reply -> bool; checkers.py), the things a
person says when an answer misses it or meets it, and two prompt pools: the questions the user asks
in conversation and held-out questions that are only ever used to score the model. The daemon never
sees a label: only the user's next message, as a person would write it.

Every checker first asks whether the reply answers the question at all (non_answer): a model that
learns to repeat the question back writes no list and is short, and a bench that counted that as
"no lists" or "brief" once reported 8 of 8 echoes as a perfect score. Held-out prompts also carry a
known answer (words an answer must use, or the plausible range of a measurement), checked too.

The probe set (personalize_probes.py) is the other side of the ledger: short questions with one
right answer, scored before and after training, so that a gain in adherence that costs general
ability shows up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.personalize.checkers import (
    SIGN_OFF,
    answer_first,
    answers,
    at_most_two_sentences,
    bold_terms,
    ends_with_question,
    ends_with_sign_off,
    has_known_answer,
    has_no_bold,
    has_no_code,
    has_no_list,
    is_french,
    non_answer,
    one_paragraph,
    uses_metric_only,
)
from bench.personalize.prompts import CODING, GENERAL, MEASURE, Known, conversation_known, heldout

SYSTEM = "You are a helpful assistant."


# The control user's facts for measurement prompts asked in conversation: the range of a right
# figure in each unit an answer might use, as for the held-out prompts.
CONTROL_FACTS = {
    "How tall is Mount Everest?": Known(ranges=((8840, 8850), (29000, 29040), (8.8, 8.9))),
    "How far is it from New York to Los Angeles?": Known(ranges=((3900, 4600), (2400, 2900))),
    "How much does an adult elephant weigh?": Known(ranges=((2000, 7000), (2, 7), (4000, 15500))),
    "What is a normal human body temperature?": Known(ranges=((36, 37.5), (96.5, 99.6))),
    "How long is the Golden Gate Bridge?": Known(ranges=((1270, 2740), (1.2, 2.8), (4100, 9000), (1.6, 1.8))),
    "How deep is the Mariana Trench?": Known(ranges=((10900, 11040), (10.9, 11.1), (35700, 36300), (6.7, 6.9))),
    "How heavy is a typical car?": Known(ranges=((900, 2500), (0.9, 2.5), (2000, 5500))),
    "How hot does it get in Death Valley?": Known(ranges=((49, 57), (120, 135))),
    "How long is a marathon?": Known(ranges=((42, 42.3), (42000, 42200), (26, 26.3))),
    "How tall is the Eiffel Tower?": Known(ranges=((300, 331), (984, 1090))),
    "How far away is the Moon?": Known(ranges=((356000, 407000), (384, 385), (221000, 253000), (238, 239))),
    "How much water should I drink in a day?": Known(ranges=((1.5, 4), (1500, 4000), (6, 16), (64, 130))),
    "How long is the Nile river?": Known(ranges=((6500, 6900), (4000, 4300))),
    "How much does a newborn baby usually weigh?": Known(ranges=((2.5, 4.5), (2500, 4500), (5.5, 10))),
    "How fast can a cheetah run?": Known(ranges=((90, 130), (55, 80), (25, 36))),
    "At what temperature does water boil?": Known(ranges=((100, 100), (212, 212), (373, 373.2))),
    "How big is an Olympic swimming pool?": Known(ranges=((50, 50), (25, 25), (2500, 2500), (164, 164))),
    "How tall is the Statue of Liberty?": Known(ranges=((46, 94), (151, 306))),
    "How much does a gallon of milk weigh?": Known(ranges=((8, 9), (3.6, 4.1), (3600, 4100))),
    "How cold is it at the South Pole in winter?": Known(ranges=((-80, -40), (-110, -40), (40, 80), (40, 110))),
    "How long is a football field?": Known(ranges=((100, 120), (300, 360), (91, 110))),
    "How far can a commercial airplane fly without refueling?": Known(ranges=((3000, 20000), (2000, 12500))),
    "How high do commercial planes fly?": Known(ranges=((9, 13), (9000, 13000), (30000, 42000))),
    "How much luggage can I usually bring on a plane?": Known(ranges=((7, 32), (15, 70), (1, 2))),
}


def right_answer(question: str, reply: str) -> bool:
    """The control user's only standard: an answer, and for a measurement a right figure."""
    known = CONTROL_FACTS.get(question)
    return answers(question, reply) and (known is None or has_known_answer(reply, known))


def says_something(question: str, reply: str) -> bool:
    """Whether the reply has what any right answer to this conversation prompt contains (one of its
    words, or for a measurement a right figure): every simulated user asks that too, whatever their
    preference, as a person would. Until 2026-12-05 they did not, and thanked any answer in their
    form, however empty; what the loop and the oracle learned from them made held-out answers shorter
    and emptier (wrong content 0.25 -> 0.42-0.52 in every run that taught a form). A prompt of no
    pool (a test's own) is not checked."""
    known = _content(question)
    return known is None or has_known_answer(reply, known[1])


def accepts(sc: Scenario, question: str, reply: str) -> bool:
    """The simulated user's verdict on an answer to a conversation prompt: in their form, and
    saying something (what the oracle keeps, and what GRPO's scorer is measured against)."""
    return sc.check(question, reply) and says_something(question, reply)


def _content(question: str) -> tuple[str, Known] | None:
    """The conversation prompt's pool and what a right answer to it contains."""
    if question in CONTROL_FACTS:
        return "measure", CONTROL_FACTS[question]
    for pool in ("general", "coding"):
        if question in conversation_known(pool):
            return pool, conversation_known(pool)[question]
    return None


@dataclass(frozen=True)
class Scenario:
    name: str
    preference: str  # what the user wants, for the report; the daemon never sees it
    check: Callable[[str, str], bool]  # (question, reply): answers it, and as the user wants
    complaints: tuple[str, ...]  # what the user says when an answer misses the preference
    pool: str  # the prompt pool: conversation prompts and held-out prompts (prompts.py)
    prompts: tuple[str, ...]  # asked in conversation

    @property
    def heldout(self) -> dict[str, Known]:
        """Only ever scored, each with what a right answer contains."""
        return heldout(self.pool)


THANKS = ("Thanks, that's it.", "Perfect, thank you!", "Great, that's exactly what I needed.", "Thanks, that helps.")
FIGURE_COMPLAINTS = ("That's not right — can you check the figure?", "I don't think that number is correct.",
                     "Hmm, that figure looks wrong to me.")
# What a person says to an answer in their form that says nothing they asked about (says_something).
EMPTY_COMPLAINTS = {"general": ("That doesn't really answer my question.", "That's too vague. What's the actual answer?"),
                    "coding": ("That doesn't really answer my question.", "That's too vague. What does it actually do?"),
                    "measure": FIGURE_COMPLAINTS}
GIVE_UP = ("Still not what I asked for. Never mind.", "That's not it either. Forget it.")
# What a person says to a reply that does not answer at all, whatever their preference.
NON_ANSWER_COMPLAINTS = {
    "echo": ("You just repeated my question.", "That's my own question back. Can you answer it?"),
    "empty": ("You didn't say anything.", "That's empty. Can you actually answer?"),
    "off-topic": ("That doesn't answer it.", "That's not what I asked about."),
}


def react(sc: Scenario, question: str, reply: str, attempt: int, pick: Callable[[tuple[str, ...]], str]
          ) -> tuple[bool, str | None, str]:
    """The simulated user's verdict on one reply and what they say next: (accepted: it met the
    preference and says something, why it is no answer at all or None, the reply). A second miss
    ends the conversation; `pick` chooses the wording (a seeded random.choice in the bench). An
    answer in the user's form that says nothing gets a complaint about that, not the preference's."""
    form, why = sc.check(question, reply), non_answer(question, reply)
    ok = form and says_something(question, reply)  # accepts(), the checker run once
    if ok:
        return ok, why, pick(THANKS)
    if attempt > 0:
        return ok, why, pick(GIVE_UP)
    if why:
        return ok, why, pick(NON_ANSWER_COMPLAINTS[why])
    content = _content(question)
    return ok, why, pick(EMPTY_COMPLAINTS[content[0]] if form and content else sc.complaints)


SCENARIOS = {s.name: s for s in (
    Scenario("brevity", "answers of at most two sentences", at_most_two_sentences,
             ("Too long — keep it to two sentences.", "Way too much text. Two sentences max, please.",
              "Can you say that in two sentences? I don't need all the detail."),
             "general", tuple(GENERAL)),
    Scenario("no_lists", "no bullet or numbered lists, prose only", has_no_list,
             ("No lists please — just write it as a normal paragraph.",
              "I hate bullet points. Can you write that as plain prose?",
              "Please don't format it as a list; a short paragraph is fine."),
             "general", tuple(GENERAL)),
    Scenario("sign_off", f'every answer ends with "{SIGN_OFF}"', ends_with_sign_off,
             (f'You forgot the sign-off: always end with "{SIGN_OFF}"',
              f'Please finish your answers with "{SIGN_OFF}" like I asked.',
              f'End it with "{SIGN_OFF}" please, that\'s how I like it.'),
             "general", tuple(GENERAL)),
    Scenario("metric", "metric units only (no miles, feet, pounds, °F)", uses_metric_only,
             ("Please use metric units — kilometres, kilograms, Celsius. I don't do miles or pounds.",
              "Metric, please! I have no idea what that is in feet or pounds.",
              "Can you give me that in metric units only?"),
             "measure", tuple(MEASURE)),
    Scenario("french", "answers in French", is_french,
             ("En français, s'il vous plaît ! I'd rather read answers in French.",
              "Please answer in French — je préfère le français.",
              "Réponds en français, please."),
             "general", tuple(GENERAL)),
    # Candidates for scenarios within the 0.5B model's reach (issue 27), each kept only if the
    # model's own samples on the conversation prompts pass often enough (bench/personalize/reach.py).
    Scenario("answer_first", "the answer first, with no preamble", answer_first,
             ("Skip the intro and just answer.", "Get to the point — start with the answer, no preamble.",
              "No need for 'Sure!' or 'Here are some tips'. Just start with the answer."),
             "general", tuple(GENERAL)),
    Scenario("no_code", "no code unless asked: explain in words", has_no_code,
             ("I didn't ask for code — just explain it in words.", "No code please, a plain explanation is enough.",
              "Please don't paste code; tell me in prose."),
             "coding", tuple(CODING)),
    Scenario("no_bold", "plain text: no bold and no headings", has_no_bold,
             ("Please stop bolding things and adding headings; plain text is fine.",
              "No bold text or headers, please. Just plain text.",
              "The formatting is too much — no bold, no headings."),
             "general", tuple(GENERAL)),
    Scenario("ends_with_question", "a question back to the user at the end", ends_with_question,
             ("Always finish by asking me a follow-up question.", "End with a question to me, please, so we can go on.",
              "Can you end your answers by asking me something back?"),
             "general", tuple(GENERAL)),
    # Chosen by sample pass rates on the conversation prompts (stop 63, the reach answers of
    # bench/results/personalize-reach-*-answers.json): greedy 0.38, sampled 0.36, 66% of prompts with
    # a passing sample in 4. This model's bold is its list items' labels ("1. **Frost**: ..."), so
    # the preference keeps the long answers' content, where no_lists and one_paragraph lose it even
    # under the oracle's perfect labels. (A "bullets, never numbered" user was tried and dropped: this
    # model's lists are numbered, so its oracle kept the same samples as no_lists' and scored alike.)
    Scenario("bold_terms", "the key terms in bold", bold_terms,
             ("Please put the key terms in bold so I can skim it.",
              "Bold the important words, please. It's hard to scan otherwise.",
              "Can you highlight the key points in bold?"),
             "general", tuple(GENERAL)),
    Scenario("one_paragraph", "one paragraph, no line breaks", one_paragraph,
             ("Just one paragraph please, no line breaks.", "Keep it to a single paragraph.",
              "Too many paragraphs. One block of text is enough."),
             "general", tuple(GENERAL)),
)}

# The control user: no hidden preference. Any right answer is thanked; only a non-answer or a wrong
# figure is corrected. Learning from it must leave every scenario's adherence where it was.
CONTROL = Scenario("control", "none: any right answer", right_answer, FIGURE_COMPLAINTS,
                   "measure", tuple(p for pair in zip(GENERAL, MEASURE) for p in pair) + tuple(GENERAL[len(MEASURE):]))

# -- grading ------------------------------------------------------------------------------------
def grade_heldout(sc: Scenario, question: str, reply: str) -> dict:
    """A held-out answer's grade: passes (answers, with the known content, as the user wants), why it
    is no answer at all (None when it is one), whether it has the known content, and whether it is
    an answer in the user's form whatever its content (what the preference alone asks: the oracle
    can teach the form and lose the content)."""
    why = non_answer(question, reply)
    known = why is None and has_known_answer(reply, sc.heldout[question])
    form = why is None and sc.check(question, reply)
    return {"ok": known and form, "non_answer": why, "known": known, "form": form}


# Which simulated users a summary's run talked to, for the README's table to pair each loop run with
# an oracle of the same users: 1 thanked any answer in their form (until stop 48), 2 also refuse an
# answer that says nothing (`says_something`, since stop 49). Summaries from before this field:
# bench/personalize/table.py's `users_of`.
USERS = 2


def users_source() -> str:
    """A digest of what the simulated users do (their checkers and replies, and what they know of
    the conversation prompts' answers): a cached loop run or oracle is reused only by the same users."""
    here = Path(__file__).resolve().parent  # bench/personalize
    h = hashlib.sha256()
    for path in [here / "scenarios.py", here / "checkers.py", here / "prompts.py",
                 *sorted((here / "data").glob("conversation-*.json"))]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]
