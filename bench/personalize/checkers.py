"""The simulated users' checkers: pure (question, reply) -> bool tests of whether a reply answers
the question at all (non_answer), says what a right answer says (has_known_answer), and is in a
scenario's form (one function per preference), plus the counts the continuous measures read.
scenarios.py holds the users themselves: their complaints, reactions and grades.
"""

from __future__ import annotations

import re
import unicodedata

from bench.personalize.prompts import Known

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


def probe_right(question: str, answer: str, accepted: tuple[str, ...]) -> bool:
    """An answer, with an accepted one as a whole word, so that "12" is not found in "120" nor "au"
    in "because"."""
    return answers(question, answer) and any(
        re.search(rf"(?<![\w]){re.escape(a)}(?![\w])", answer.lower()) for a in accepted)
