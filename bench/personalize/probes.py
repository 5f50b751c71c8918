"""The personalization bench's own probes: short questions with one right answer, graded by answer.

They are the other side of the ledger from held-out adherence: scored on the base weights and after
every adapter, so that a preference learned at the cost of general ability shows up as a probe delta.

These are the BENCH's probes. The publish gate (clawd/publish/) has its own, and the two sets must
stay disjoint: a gate tuned on the questions the bench grades by would make the bench's probe
delta meaningless. Add a probe here only if it asks about a fact or a number the gate does not.

No question contains its own answer, not even as another form of a word ("walk" for "walked"):
non_answer in checkers.py, which every probe answer goes through first, would call the
right answer an echo. Accepted answers are matched as whole words, lower-case. The untrained
Qwen2.5-Coder-0.5B-Instruct answered 35 of 48 right, greedy, on a first check.
"""

from __future__ import annotations

JUST_THE_NUMBER = " Answer with just the number."

ARITHMETIC = [
    ("What is 34 plus 58?" + JUST_THE_NUMBER, ("92",)),
    ("What is 81 minus 26?" + JUST_THE_NUMBER, ("55",)),
    ("What is 6 times 9?" + JUST_THE_NUMBER, ("54",)),
    ("What is 72 divided by 8?" + JUST_THE_NUMBER, ("9", "nine")),
    ("What is 11 squared?" + JUST_THE_NUMBER, ("121",)),
    ("What is 250 plus 175?" + JUST_THE_NUMBER, ("425",)),
    ("What is 700 minus 3?" + JUST_THE_NUMBER, ("697",)),
    ("What is 13 times 3?" + JUST_THE_NUMBER, ("39",)),
    ("What is half of 86?" + JUST_THE_NUMBER, ("43",)),
    ("What is 5 cubed?" + JUST_THE_NUMBER, ("125",)),
    ("What is 17 plus 28?" + JUST_THE_NUMBER, ("45",)),
    ("What is 96 divided by 4?" + JUST_THE_NUMBER, ("24",)),
    ("What is 3 times 14?" + JUST_THE_NUMBER, ("42",)),
    ("What is 60 minus 45?" + JUST_THE_NUMBER, ("15",)),
    ("What is 8 times 12?" + JUST_THE_NUMBER, ("96",)),
    ("What is 20 percent of 50?" + JUST_THE_NUMBER, ("10", "ten")),
]

FACTS = [
    ("What is the capital of Italy?", ("rome",)),
    ("What is the capital of Egypt?", ("cairo",)),
    ("What is the capital of Portugal?", ("lisbon",)),
    ("What is the capital of Greece?", ("athens",)),
    ("Which gas do people need to breathe in to stay alive?", ("oxygen",)),
    ("How many legs does an insect have?", ("6", "six")),
    ("Which planet is closest to the Sun?", ("mercury",)),
    ("Who wrote the play Hamlet?", ("shakespeare",)),
    ("At how many degrees Celsius does water boil at sea level?", ("100",)),
    ("How many planets are there in our solar system?", ("8", "eight")),
    ("What is the chemical symbol for iron?", ("fe",)),
    ("Which language do most people in Brazil speak?", ("portuguese",)),
    ("What is the currency of Japan?", ("yen",)),
    ("Who was the first person to walk on the Moon?", ("armstrong",)),
    ("How many hours are there in one day?", ("24", "twenty-four")),
    ("What is the hardest natural material?", ("diamond", "diamonds")),
]

INSTRUCTIONS = [
    ("What is the plural of the word 'mouse'?", ("mice",)),
    ("What is the opposite of 'early'?", ("late",)),
    ("Which day of the week comes after Friday?", ("saturday",)),
    ("Which month comes just before March?", ("february",)),
    ("Translate 'thank you' into Spanish.", ("gracias",)),
    ("Translate 'cheese' into French.", ("fromage",)),
    ("What is the past tense of the verb 'run'?", ("ran",)),
    ("Continue the sequence 5, 10, 15, 20 with the next number only.", ("25",)),
    ("Write the number forty-two in digits.", ("42",)),
    ("Write the number 7 as an English word.", ("seven",)),
    ("Give one word that rhymes with 'cat'.", ("hat", "bat", "mat", "rat", "sat", "fat", "pat", "flat", "chat", "vat")),
    ("Which color do you get by mixing blue and yellow paint?", ("green",)),
    ("Which farm animal gives us wool?", ("sheep",)),
    ("How many minutes are in 2 hours?" + JUST_THE_NUMBER, ("120",)),
    ("Rewrite this sentence in the past tense: 'I eat an apple.'", ("ate",)),
    ("Give a synonym of 'big' that starts with the letter L.", ("large", "larger")),
]

PROBES: list[tuple[str, tuple[str, ...]]] = ARITHMETIC + FACTS + INSTRUCTIONS
