"""What the simulated users of bench/personalize/run.py want, and how they say it.

Each scenario is a hidden preference with a pure checker (question, reply -> bool), the things a
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
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.personalize.prompts import CODING, GENERAL, MEASURE, Known, conversation_known, heldout

SYSTEM = "You are a helpful assistant."

# -- does the reply answer at all? ----------------------------------------------------------------
# Content words: what is left of a text without its function words and the politeness a model wraps
# around an echo ("Sure! How do I …? Hope this helps!"). Numbers are content: "56" answers "7 × 8?".
_STOP = set("""
a an the and or but if of to in on at by for with from about as into onto over under than then so too
is are was were be been being am do does did doing done have has had having can could should would will
shall may might must i me my mine you your yours we us our he him his she her it its they them their
this that these those there here what which who whom whose when where why how not no nor any some all
each every more most much many very just also only up out off again once such own same other get got
let lets way ways thing things something anything everything
sure certainly course okay ok yes yeah well great good question questions answer answers help helps
helpful hope happy glad please thanks thank hello hi hey oh hmm absolutely definitely really
""".split())
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def _fold(text: str) -> str:
    """Lower case without accents, so that "Mémoire" and "memoire" are one word."""
    return "".join(c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c))


def _stem(word: str) -> str:
    # Crude, on purpose: "tips"/"tip", "cooking"/"cook", "changes"/"change" must meet; more would merge
    # different words. Apostrophes go first: "earth's" is "earth".
    word = re.split(r"['’]", word)[0]
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(_fold(text)) if w not in _STOP and _stem(w) not in _STOP}


_FRENCH = {"le", "la", "les", "un", "une", "des", "du", "de", "et", "est", "sont", "pour", "avec", "dans",
           "sur", "pas", "que", "qui", "vous", "nous", "il", "elle", "ce", "cette", "ces", "au", "aux", "en",
           "par", "plus", "très", "mais", "ou", "être", "avoir", "fait", "peut", "votre"}
# "a" and "on", common in both languages, are in neither list.
_ENGLISH = {"the", "an", "and", "is", "are", "for", "with", "in", "not", "that", "which", "you", "we", "it",
            "this", "these", "to", "of", "by", "more", "very", "but", "or", "be", "have", "can", "your"}


def _function_words(text: str) -> tuple[int, int]:
    """How many French and how many English function words `text` has."""
    words = re.findall(r"[a-zà-ÿ']+", text.lower())
    words = [w.split("'")[-1] for w in words]  # l'eau -> eau, d'un -> un
    return sum(w in _FRENCH for w in words), sum(w in _ENGLISH for w in words)


def _is_english(text: str) -> bool:
    fr, en = _function_words(text)
    return en >= 3 and en > fr


def non_answer(question: str, reply: str) -> str | None:
    """Why `reply` does not answer `question` at all, or None when it is an answer (right or wrong).

    - "empty": no content word (nothing, punctuation, "Sure!", "Good question.");
    - "echo": every content word of the reply is already in the question (the question repeated,
      or reworded: "What is compound interest?" for "How does compound interest work?");
    - "off-topic": a reply of some length in English that shares no word with the question, not
      even a word's first four letters ("health" for "healthy", "habit" for "habits"). Short replies
      are exempt: "Set a timer and block your time." rightly answers "How can I stay focused while
      working from home?" without one of its words. Replies in another language are exempt too: a
      French answer shares no word with an English question. On the replies of the recorded runs
      (bench/out/personalize*.json) no real answer was called off-topic; the shortest English reply
      without a shared prefix had 13 content words.
    """
    words = content_words(reply)
    if not words:
        return "empty"
    asked = content_words(question)
    if words <= asked:
        return "echo"
    if len(words) >= 15 and not {w[:4] for w in words} & {w[:4] for w in asked} and _is_english(reply):
        return "off-topic"
    return None


def answers(question: str, reply: str) -> bool:
    return non_answer(question, reply) is None


# -- known answers of held-out prompts ------------------------------------------------------------
_NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.,])\d+(?:\.\d+)?")


def numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


def has_known_answer(reply: str, known: Known) -> bool:
    folded = _fold(reply)
    if any(re.search(rf"(?<![^\W_]){re.escape(_fold(w))}", folded) for w in known.words):
        return True
    return any(lo <= x <= hi for x in numbers(reply) for lo, hi in known.ranges)


# -- checkers: pure functions of the question and the reply ---------------------------------------
# A sentence ends at . ! ? (or …) followed by a space or the end; decimals ("3.14") and the usual
# abbreviations do not end one. Text after the last end (a fragment, a list item without a full
# stop) counts as one more, so that a list of fragments is not "one sentence".
_ABBREV = re.compile(r"\b(?:e\.g|i\.e|etc|vs|Mr|Mrs|Ms|Dr|St|approx|No)\.", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*(?=\s|$)")


def count_sentences(text: str) -> int:
    n = 0
    for line in _ABBREV.sub("", text).splitlines():
        parts = _SENTENCE_END.split(line)  # the text between sentence ends; the last is an unfinished one
        n += len(parts) - 1 + bool(re.search(r"\w", parts[-1]))
    return n


def at_most_two_sentences(question: str, reply: str) -> bool:
    """Short, but an answer: a person asking "how do vaccines work?" does not thank a bare "Yes."."""
    return answers(question, reply) and len(reply.split()) >= 4 and count_sentences(reply) <= 2


_LIST_LINE = re.compile(r"^\s*(?:[-*•+]|\d+[.)])\s+\S", re.MULTILINE)


def has_no_list(question: str, reply: str) -> bool:
    return answers(question, reply) and not _LIST_LINE.search(reply)


SIGN_OFF = "Hope this helps!"


def signed_off(reply: str) -> bool:
    """The reply's last words are the sign-off (bold or not, with a full stop for the "!")."""
    tail = reply.strip().strip("*_ ").lower()
    return tail.endswith((SIGN_OFF.lower(), SIGN_OFF.lower().rstrip("!") + "."))


def ends_with_sign_off(question: str, reply: str) -> bool:
    return answers(question, reply) and signed_off(reply)


_NUM = r"\d[\d,.]*\s*"
_IMPERIAL = re.compile(
    r"\b(?:miles?|mph|feet|foot|ft|inch(?:es)?|pounds?|lbs?|ounces?|oz|gallons?|yards?|fahrenheit|acres?)\b"
    r"|°\s*F\b|" + _NUM + r"(?:F)\b", re.IGNORECASE)
_METRIC = re.compile(
    r"\b(?:kilomet(?:er|re)s?|met(?:er|re)s?|centimet(?:er|re)s?|millimet(?:er|re)s?|kilograms?|grams?|"
    r"tonnes?|lit(?:er|re)s?|millilit(?:er|re)s?|celsius|hectares?)\b"
    r"|" + _NUM + r"(?:km/h|km|cm|mm|kg|m|g|t|ml|l|°\s*C|C|ha)\b|°\s*C\b", re.IGNORECASE)


def uses_metric_only(question: str, reply: str) -> bool:
    """Some metric unit, and no imperial one (not even in parentheses next to the metric value)."""
    return answers(question, reply) and bool(_METRIC.search(reply)) and not _IMPERIAL.search(reply)


def is_french(question: str, reply: str) -> bool:
    """More French function words than English ones, and at least three of them."""
    fr, en = _function_words(reply)
    return answers(question, reply) and fr >= 3 and fr > en


# Preamble: what a reply says before it answers. An opener of politeness or announcement ("Sure!",
# "Great question.", "Here are some tips", "There are several ways", "I'd be happy to help", "When it
# comes to …"), or a first line that only introduces what follows (it ends with a colon, or is a heading).
_OPENER = re.compile(
    r"^(?:sure|certainly|of course|absolutely|great|good|excellent|okay|ok|yes|well|hello|hi|hey)\b"
    r"|^here(?:'s|’s| is| are)\b|^there are (?:several|many|a few|some|various|multiple|different|numerous|a number)\b"
    r"|^(?:i(?:'d|’d| would| will|'ll|’ll| can| am|'m|’m)|let me|let's|let’s)\b"
    r"|^(?:to answer|when it comes to|it(?:'s|’s| is) (?:important|essential|crucial|a good idea|great))\b"
    r"|^(?:that(?:'s|’s| is) a (?:great|good|common))\b", re.IGNORECASE)


def preamble(reply: str) -> bool:
    """The reply opens with a preamble instead of the answer (see _OPENER)."""
    first = next((line.strip() for line in reply.splitlines() if line.strip()), "")
    if first.startswith("#") or first.rstrip("*_ ").endswith(":"):
        return True
    return bool(_OPENER.search(first.lstrip("*_#> ")))


def answer_first(question: str, reply: str) -> bool:
    return answers(question, reply) and not preamble(reply)


_FENCE = re.compile(r"^\s*```", re.MULTILINE)
# A code line outside a fence: indented by 4 spaces or a tab, not a list item, with code's punctuation.
_INDENTED_CODE = re.compile(r"^(?: {4}|\t)(?!\s*(?:[-*•+]|\d+[.)])\s)[^\n]*[(){}\[\];=<>][^\n]*$", re.MULTILINE)


def has_no_code(question: str, reply: str) -> bool:
    """No code block: no ``` fence and no indented code line. Code words in prose (`list`) are fine."""
    return answers(question, reply) and not _FENCE.search(reply) and not _INDENTED_CODE.search(reply)


_BOLD = r"\*\*[^*\n]+\*\*|__[^_\n]+__"
_MARKUP = re.compile(_BOLD + r"|^\s*#{1,6}\s", re.MULTILINE)


def has_no_bold(question: str, reply: str) -> bool:
    """Plain text: no bold (**x**, __x__) and no markdown heading. Lists are allowed."""
    return answers(question, reply) and not _MARKUP.search(reply)


def ends_with_question(question: str, reply: str) -> bool:
    """The reply's last sentence is a question back to the user ("Would you like …?")."""
    return answers(question, reply) and reply.strip().rstrip("*_ ").endswith("?")


def one_paragraph(question: str, reply: str) -> bool:
    """One paragraph: no blank line and no line break inside the answer."""
    return answers(question, reply) and "\n" not in reply.strip()


def bold_terms(question: str, reply: str) -> bool:
    """The key terms in bold: at least one bold span (**x** or __x__). Headings do not count."""
    return answers(question, reply) and bool(re.search(_BOLD, reply))


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


def probe_right(question: str, answer: str, accepted: tuple[str, ...]) -> bool:
    """An answer, with an accepted one as a whole word, so that "12" is not found in "120" nor "au"
    in "because"."""
    return answers(question, answer) and any(
        re.search(rf"(?<![\w]){re.escape(a)}(?![\w])", answer.lower()) for a in accepted)


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
    for path in [here / "scenarios.py", here / "prompts.py", *sorted((here / "data").glob("conversation-*.json"))]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]
