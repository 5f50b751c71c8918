"""The prompts the simulated users of bench/personalize/run.py ask, in three pools (general questions,
measurements, programming concepts), each in two parts that never meet:

- conversation prompts (here): what the user asks while the daemon learns; scenarios and the
  oracle may be tuned on them;
- held-out prompts (bench/personalize/data/heldout-POOL.json): only ever scored, each with what any right
  answer contains (`Known`). The first 8 of the general and measure pools came with the first
  scenarios; the rest (44 a pool, and all of coding) were written apart, on 2026-12-03, by a
  helper that had seen neither the scenarios, nor their prompts, nor their checkers, and no
  choice of this bench has looked at how a model scores on them. Each file's entries say which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Known:
    """What any right answer to a held-out prompt contains: one of `words` (prefixes of a word, in
    English and French, since the french scenario asks the same prompts), or a number inside one of
    `ranges` (bounds in every unit a right answer might use, so the check does not take the metric
    scenario's side)."""
    words: tuple[str, ...] = ()
    ranges: tuple[tuple[float, float], ...] = ()


@cache
def heldout(pool: str) -> dict[str, Known]:
    """A pool's held-out prompts, each with its known answer, in file order."""
    return _known(DATA / f"heldout-{pool}.json")


@cache
def conversation_known(pool: str) -> dict[str, Known]:
    """What any right answer to a general or coding conversation prompt contains
    (data/conversation-POOL.json, written apart on 2026-12-05 from the held-out prompts and from any
    model's answers): the simulated user's own check that an answer says something. The measure
    pool's are the figures in scenarios.CONTROL_FACTS."""
    return _known(DATA / f"conversation-{pool}.json")


def _known(path: Path) -> dict[str, Known]:
    return {x["q"]: Known(words=tuple(x.get("words", ())), ranges=tuple(tuple(r) for r in x.get("ranges", ())))
            for x in json.loads(path.read_text())}


# -- conversation prompts ---------------------------------------------------------------------------
# Questions that invite a long, listy answer: room for every preference to be missed.
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
# Programming concepts, asked in conversation (held-out: heldout-coding.json): a coding model
# answers many of them with code whether asked or not.
CODING = [
    "What is the difference between a list and a tuple in Python?",
    "How does garbage collection work?",
    "What is a race condition?",
    "What is a mutex used for?",
    "What does a compiler do?",
    "What is the difference between a class and an object?",
    "What is a thread pool?",
    "What is a checksum?",
    "What is JSON used for?",
    "What is the difference between a library and a framework?",
    "What is a database index?",
    "What does a DNS server do?",
    "What is the difference between TCP and UDP?",
    "What is a hash function?",
    "What is the difference between breadth-first and depth-first search?",
    "What is a binary tree?",
    "What is an exception in programming?",
    "What is a stack overflow error?",
    "What is a callback function?",
    "What is the difference between a function and a method?",
    "What is an environment variable?",
    "What is a cron job?",
    "What are the parts of a URL?",
    "What is a merge conflict in git?",
    "What does a linter do?",
    "What is a software license?",
    "What is a CSV file?",
    "What is an integer overflow?",
    "What is a microservice?",
    "What is a WebSocket?",
    "What is the difference between a bug and a feature request?",
    "What is the difference between a shell and a terminal?",
]
