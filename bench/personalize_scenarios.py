"""What the simulated users of bench/personalize.py want, and how they say it.

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

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

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
@dataclass(frozen=True)
class Known:
    """What any right answer to a held-out prompt contains: one of `words` (prefixes of a word, in
    English and French, since the french scenario asks the same prompts), or a number inside one of
    `ranges` (bounds in every unit a right answer might use, so the check does not take the metric
    scenario's side)."""
    words: tuple[str, ...] = ()
    ranges: tuple[tuple[float, float], ...] = ()


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


def ends_with_sign_off(question: str, reply: str) -> bool:
    tail = reply.strip().strip("*_ ").lower()
    return answers(question, reply) and tail.endswith((SIGN_OFF.lower(), SIGN_OFF.lower().rstrip("!") + "."))


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
# Each with what a right answer mentions (any one of the words; French for the french scenario).
GENERAL_HELDOUT = {
    "How can I improve my memory?": Known(words=(
        "sleep", "exercis", "repeat", "repetit", "practic", "mnemonic", "brain", "diet", "puzzle", "meditat",
        "read", "review", "sommeil", "dormir", "cerveau", "répét", "exercice", "pratiqu", "sport", "lire",
        "lecture", "alimentation")),
    "What should I know about caring for a cat?": Known(words=(
        "food", "feed", "water", "litter", "vet", "groom", "play", "toy", "brush", "vaccin", "nutrition",
        "nourri", "eau", "litière", "vétérinaire", "jouet", "brosse", "croquette")),
    "How does the internet work?": Known(words=(
        "network", "data", "server", "computer", "protocol", "packet", "router", "cable", "tcp",
        "réseau", "données", "serveur", "ordinateur", "protocole", "paquet", "routeur", "câble")),
    "What are good habits for a healthy morning?": Known(words=(
        "water", "breakfast", "exercis", "stretch", "sleep", "wake", "meditat", "walk", "diet", "shower",
        "eau", "petit-déjeuner", "petit déjeuner", "réveil", "étire", "étirement", "médit", "marche",
        "sommeil", "sport", "douche")),
    "How do I choose a good laptop?": Known(words=(
        "processor", "cpu", "ram", "memory", "battery", "screen", "display", "storage", "ssd", "budget",
        "price", "weight", "processeur", "mémoire", "batterie", "écran", "stockage", "prix", "poids")),
    "Why do we have seasons?": Known(words=(
        "tilt", "axis", "axial", "orbit", "angle", "sunlight", "inclin", "axe", "orbite", "rayons")),
    "How can I become a better cook?": Known(words=(
        "recipe", "practic", "ingredient", "technique", "knife", "knives", "spice", "taste", "flavor",
        "flavour", "class", "recette", "ingrédient", "pratiqu", "goût", "goûte", "couteau", "épice", "cours")),
    "What is a black hole?": Known(words=(
        "gravit", "light", "mass", "star", "collaps", "escape", "dens", "lumière", "masse", "étoile",
        "effondr", "échapp")),
}

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
# Each with the range of a right figure in every unit an answer might give it in.
MEASURE_HELDOUT = {
    # 381 m to the roof, 443 m to the tip; 1,250 / 1,454 ft; 102 floors
    "How tall is the Empire State Building?": Known(ranges=((370, 450), (1200, 1480), (102, 102))),
    # 344 km in a straight line, ~460 km by road; 214 / 290 miles
    "How far is it from London to Paris?": Known(ranges=((300, 500), (200, 320))),
    # adult grizzlies: 130-360 kg, 290-800 lb
    "How much does a grizzly bear weigh?": Known(ranges=((100, 1000),)),
    # ~5,500 °C, 5,772 K, ~10,000 °F
    "How hot is the surface of the Sun?": Known(ranges=((5000, 6200), (9000, 11000))),
    # 21,196 km with every branch, 8,850 km for the Ming wall; 13,171 / 5,500 miles
    "How long is the Great Wall of China?": Known(ranges=((5000, 22000),)),
    # 1,642 m at its deepest, 744 m on average; 5,387 / 2,441 ft
    "How deep is Lake Baikal?": Known(ranges=((1600, 1700), (700, 760), (5300, 5450), (2400, 2480))),
    # 343 m/s in air at 20 °C; 1,235 km/h; 767 mph; 1,125 ft/s
    "How fast does sound travel?": Known(ranges=((330, 350), (1190, 1250), (740, 780), (1080, 1150))),
    # 341 ha, 3.41 km², 843 acres, 1.32 sq mi; 4 km (2.5 mi) long
    "How big is Central Park?": Known(ranges=((330, 350), (3.3, 4.1), (800, 860), (1.3, 1.4), (2.5, 2.5))),
}


@dataclass(frozen=True)
class Scenario:
    name: str
    preference: str  # what the user wants, for the report; the daemon never sees it
    check: Callable[[str, str], bool]  # (question, reply): answers it, and as the user wants
    complaints: tuple[str, ...]  # what the user says when an answer misses the preference
    prompts: tuple[str, ...]  # asked in conversation
    heldout: dict[str, Known]  # only ever scored, each with what a right answer contains


THANKS = ("Thanks, that's it.", "Perfect, thank you!", "Great, that's exactly what I needed.", "Thanks, that helps.")
GIVE_UP = ("Still not what I asked for. Never mind.", "That's not it either. Forget it.")
# What a person says to a reply that does not answer at all, whatever their preference.
NON_ANSWER_COMPLAINTS = {
    "echo": ("You just repeated my question.", "That's my own question back. Can you answer it?"),
    "empty": ("You didn't say anything.", "That's empty. Can you actually answer?"),
    "off-topic": ("That doesn't answer it.", "That's not what I asked about."),
}


def react(sc: Scenario, question: str, reply: str, attempt: int, pick: Callable[[tuple[str, ...]], str]
          ) -> tuple[bool, str | None, str]:
    """The simulated user's verdict on one reply and what they say next: (met the preference, why it
    is no answer at all or None, the reply). A second miss ends the conversation; `pick` chooses the
    wording (a seeded random.choice in the bench)."""
    ok, why = sc.check(question, reply), non_answer(question, reply)
    if ok:
        return ok, why, pick(THANKS)
    if attempt > 0:
        return ok, why, pick(GIVE_UP)
    return ok, why, pick(NON_ANSWER_COMPLAINTS[why] if why else sc.complaints)


SCENARIOS = {s.name: s for s in (
    Scenario("brevity", "answers of at most two sentences", at_most_two_sentences,
             ("Too long — keep it to two sentences.", "Way too much text. Two sentences max, please.",
              "Can you say that in two sentences? I don't need all the detail."),
             tuple(GENERAL), GENERAL_HELDOUT),
    Scenario("no_lists", "no bullet or numbered lists, prose only", has_no_list,
             ("No lists please — just write it as a normal paragraph.",
              "I hate bullet points. Can you write that as plain prose?",
              "Please don't format it as a list; a short paragraph is fine."),
             tuple(GENERAL), GENERAL_HELDOUT),
    Scenario("sign_off", f'every answer ends with "{SIGN_OFF}"', ends_with_sign_off,
             (f'You forgot the sign-off: always end with "{SIGN_OFF}"',
              f'Please finish your answers with "{SIGN_OFF}" like I asked.',
              f'End it with "{SIGN_OFF}" please, that\'s how I like it.'),
             tuple(GENERAL), GENERAL_HELDOUT),
    Scenario("metric", "metric units only (no miles, feet, pounds, °F)", uses_metric_only,
             ("Please use metric units — kilometres, kilograms, Celsius. I don't do miles or pounds.",
              "Metric, please! I have no idea what that is in feet or pounds.",
              "Can you give me that in metric units only?"),
             tuple(MEASURE), MEASURE_HELDOUT),
    Scenario("french", "answers in French", is_french,
             ("En français, s'il vous plaît ! I'd rather read answers in French.",
              "Please answer in French — je préfère le français.",
              "Réponds en français, please."),
             tuple(GENERAL), GENERAL_HELDOUT),
)}

# -- grading ------------------------------------------------------------------------------------
def grade_heldout(sc: Scenario, question: str, reply: str) -> dict:
    """A held-out answer's grade: passes (answers, with the known content, as the user wants), why it
    is no answer at all (None when it is one), and whether it has the known content."""
    why = non_answer(question, reply)
    known = why is None and has_known_answer(reply, sc.heldout[question])
    return {"ok": known and sc.check(question, reply), "non_answer": why, "known": known}


def probe_right(question: str, answer: str, accepted: tuple[str, ...]) -> bool:
    """An answer, with an accepted one as a whole word, so that "12" is not found in "120" nor "au"
    in "because"."""
    return answers(question, answer) and any(
        re.search(rf"(?<![\w]){re.escape(a)}(?![\w])", answer.lower()) for a in accepted)
