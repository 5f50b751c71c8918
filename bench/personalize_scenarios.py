"""What the simulated users of bench/personalize.py want, and how they say it.

Each scenario is a hidden preference with a pure checker (text -> bool), the things a person says
when an answer misses it or meets it, and two prompt pools: the questions the user asks in
conversation and held-out questions that are only ever used to score the model. The daemon never
sees a label: only the user's next message, as a person would write it.

The probe set is the other side of the ledger: short questions with one right answer, scored
before and after training, so that a gain in adherence that costs general ability shows up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

SYSTEM = "You are a helpful assistant."

# -- checkers: pure functions of the answer's text ------------------------------------------------

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


def at_most_two_sentences(text: str) -> bool:
    """Short, but an answer: a person asking "how do vaccines work?" does not thank a bare "Yes."."""
    return len(text.split()) >= 4 and count_sentences(text) <= 2


_LIST_LINE = re.compile(r"^\s*(?:[-*•+]|\d+[.)])\s+\S", re.MULTILINE)


def has_no_list(text: str) -> bool:
    return bool(text.strip()) and not _LIST_LINE.search(text)


SIGN_OFF = "Hope this helps!"


def ends_with_sign_off(text: str) -> bool:
    tail = text.strip().strip("*_ ").lower()
    return tail.endswith((SIGN_OFF.lower(), SIGN_OFF.lower().rstrip("!") + "."))


_NUM = r"\d[\d,.]*\s*"
_IMPERIAL = re.compile(
    r"\b(?:miles?|mph|feet|foot|ft|inch(?:es)?|pounds?|lbs?|ounces?|oz|gallons?|yards?|fahrenheit|acres?)\b"
    r"|°\s*F\b|" + _NUM + r"(?:F)\b", re.IGNORECASE)
_METRIC = re.compile(
    r"\b(?:kilomet(?:er|re)s?|met(?:er|re)s?|centimet(?:er|re)s?|millimet(?:er|re)s?|kilograms?|grams?|"
    r"tonnes?|lit(?:er|re)s?|millilit(?:er|re)s?|celsius|hectares?)\b"
    r"|" + _NUM + r"(?:km/h|km|cm|mm|kg|m|g|t|ml|l|°\s*C|C|ha)\b|°\s*C\b", re.IGNORECASE)


def uses_metric_only(text: str) -> bool:
    """Some metric unit, and no imperial one (not even in parentheses next to the metric value)."""
    return bool(_METRIC.search(text)) and not _IMPERIAL.search(text)


_FRENCH = {"le", "la", "les", "un", "une", "des", "du", "de", "et", "est", "sont", "pour", "avec", "dans",
           "sur", "pas", "que", "qui", "vous", "nous", "il", "elle", "ce", "cette", "ces", "au", "aux", "en",
           "par", "plus", "très", "mais", "ou", "être", "avoir", "fait", "peut", "votre"}
# "a" and "on", common in both languages, are in neither list.
_ENGLISH = {"the", "an", "and", "is", "are", "for", "with", "in", "not", "that", "which", "you", "we", "it",
            "this", "these", "to", "of", "by", "more", "very", "but", "or", "be", "have", "can", "your"}


def is_french(text: str) -> bool:
    """More French function words than English ones, and at least three of them."""
    words = re.findall(r"[a-zà-ÿ']+", text.lower())
    words = [w.split("'")[-1] for w in words]  # l'eau -> eau, d'un -> un
    fr = sum(w in _FRENCH for w in words)
    en = sum(w in _ENGLISH for w in words)
    return fr >= 3 and fr > en


# -- prompts ------------------------------------------------------------------------------------
# Questions that invite a long, listy answer: room for every preference below to be missed.
GENERAL = [
    "How can I sleep better at night?",
    "What should I pack for a weekend hiking trip?",
    "How do I start learning to play the guitar?",
    "What are good ways to save money on groceries?",
    "How does a refrigerator keep food cold?",
    "What should I consider when adopting a dog?",
    "How do I make a good cup of coffee at home?",
    "Why do leaves change color in autumn?",
    "How can I get better at public speaking?",
    "What is the difference between a virus and a bacterium?",
    "How do I keep houseplants alive?",
    "What are the benefits of regular exercise?",
    "How does compound interest work?",
    "What makes a good password?",
    "How can I stay focused while working from home?",
    "What is photosynthesis?",
    "How do I prepare for a job interview?",
    "Why is the sky blue?",
    "How do vaccines work?",
    "What are some tips for writing a clear email?",
    "How do I clean a cast iron pan?",
    "What causes earthquakes?",
    "How can I reduce stress?",
    "What is machine learning?",
    "How do I plan a budget for a vacation?",
    "What is the best way to learn a new language?",
    "How does a bicycle stay upright?",
    "What should I know before running my first marathon?",
    "How do solar panels produce electricity?",
    "How do I make new friends in a new city?",
    "What is inflation?",
    "How should I organize my closet?",
]
GENERAL_HELDOUT = [
    "How can I improve my memory?",
    "What should I know about caring for a cat?",
    "How does the internet work?",
    "What are good habits for a healthy morning?",
    "How do I choose a good laptop?",
    "Why do we have seasons?",
    "How can I become a better cook?",
    "What is a black hole?",
]

# Questions whose answer is a measurement: metric or imperial is the answerer's choice.
MEASURE = [
    "How tall is Mount Everest?",
    "How far is it from New York to Los Angeles?",
    "How much does an adult elephant weigh?",
    "What is a normal human body temperature?",
    "How long is the Golden Gate Bridge?",
    "How deep is the Mariana Trench?",
    "How heavy is a typical car?",
    "How hot does it get in Death Valley?",
    "How long is a marathon?",
    "How tall is the Eiffel Tower?",
    "How far away is the Moon?",
    "How much water should I drink in a day?",
    "How long is the Nile river?",
    "How much does a newborn baby usually weigh?",
    "How fast can a cheetah run?",
    "At what temperature does water boil?",
    "How big is an Olympic swimming pool?",
    "How tall is the Statue of Liberty?",
    "How much does a gallon of milk weigh?",
    "How cold is it at the South Pole in winter?",
    "How long is a football field?",
    "How far can a commercial airplane fly without refueling?",
    "How high do commercial planes fly?",
    "How much luggage can I usually bring on a plane?",
]
MEASURE_HELDOUT = [
    "How tall is the Empire State Building?",
    "How far is it from London to Paris?",
    "How much does a grizzly bear weigh?",
    "How hot is the surface of the Sun?",
    "How long is the Great Wall of China?",
    "How deep is Lake Baikal?",
    "How fast does sound travel?",
    "How big is Central Park?",
]


@dataclass(frozen=True)
class Scenario:
    name: str
    preference: str  # what the user wants, for the report; the daemon never sees it
    check: Callable[[str], bool]
    complaints: tuple[str, ...]  # what the user says when an answer misses the preference
    prompts: tuple[str, ...]  # asked in conversation
    heldout: tuple[str, ...]  # only ever scored


THANKS = ("Thanks, that's it.", "Perfect, thank you!", "Great, that's exactly what I needed.", "Thanks, that helps.")
GIVE_UP = ("Still not what I asked for. Never mind.", "That's not it either. Forget it.")

SCENARIOS = {s.name: s for s in (
    Scenario("brevity", "answers of at most two sentences", at_most_two_sentences,
             ("Too long — keep it to two sentences.", "Way too much text. Two sentences max, please.",
              "Can you say that in two sentences? I don't need all the detail."),
             tuple(GENERAL), tuple(GENERAL_HELDOUT)),
    Scenario("no_lists", "no bullet or numbered lists, prose only", has_no_list,
             ("No lists please — just write it as a normal paragraph.",
              "I hate bullet points. Can you write that as plain prose?",
              "Please don't format it as a list; a short paragraph is fine."),
             tuple(GENERAL), tuple(GENERAL_HELDOUT)),
    Scenario("sign_off", f'every answer ends with "{SIGN_OFF}"', ends_with_sign_off,
             (f'You forgot the sign-off: always end with "{SIGN_OFF}"',
              f'Please finish your answers with "{SIGN_OFF}" like I asked.',
              f'End it with "{SIGN_OFF}" please, that\'s how I like it.'),
             tuple(GENERAL), tuple(GENERAL_HELDOUT)),
    Scenario("metric", "metric units only (no miles, feet, pounds, °F)", uses_metric_only,
             ("Please use metric units — kilometres, kilograms, Celsius. I don't do miles or pounds.",
              "Metric, please! I have no idea what that is in feet or pounds.",
              "Can you give me that in metric units only?"),
             tuple(MEASURE), tuple(MEASURE_HELDOUT)),
    Scenario("french", "answers in French", is_french,
             ("En français, s'il vous plaît ! I'd rather read answers in French.",
              "Please answer in French — je préfère le français.",
              "Réponds en français, please."),
             tuple(GENERAL), tuple(GENERAL_HELDOUT)),
)}

# -- general probes: (question, accepted answers); right when the answer contains one of them --------
PROBES = [
    ("What is 7 times 8? Answer with just the number.", ("56",)),
    ("What is 15 plus 27? Answer with just the number.", ("42",)),
    ("What is 100 minus 37? Answer with just the number.", ("63",)),
    ("What is 9 squared? Answer with just the number.", ("81",)),
    ("What is 144 divided by 12? Answer with just the number.", ("12",)),
    ("What is the capital of France?", ("paris",)),
    ("What is the capital of Japan?", ("tokyo",)),
    ("What is the chemical symbol for gold?", ("au",)),
    ("How many days are in a week?", ("7", "seven")),
    ("Which planet is known as the Red Planet?", ("mars",)),
    ("What is the largest ocean on Earth?", ("pacific",)),
    ("Who wrote Romeo and Juliet?", ("shakespeare",)),
]


def probe_right(answer: str, accepted: tuple[str, ...]) -> bool:
    """Whole-word match, so that "12" is not found in "120" nor "au" in "because"."""
    return any(re.search(rf"(?<![\w]){re.escape(a)}(?![\w])", answer.lower()) for a in accepted)
