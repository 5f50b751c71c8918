"""Labeled cases for the preference scorer: a judge that says whether an answer respects what the
user said about earlier answers.

    python3 -m bench.judge.scorer_cases

Each case is one question from a scenario's prompt pool, the small model's recorded answers to it
(bench/personalize/reach.py: greedy and sampled, deduplicated), each labeled meets=True/False by the
scenario's pure checker, and 1 or 2 things the user said about an earlier answer (the evidence). A
case is kept only when its answers are mixed, so that it can test ranking; at most 12 per scenario.

The split is by scenario, not by case: the held-out scenarios (their preferences, and the
complaint wordings, written here apart from the scenarios' own) are never seen while tuning, so the
held-out score says whether the scorer reads a preference it was not tuned on.
Writes clawd/judge/data/scorer_cases.jsonl (tuning) and tests/data/scorer_heldout.jsonl (held-out).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from bench.personalize.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
ANSWERS = ROOT / "bench" / "results" / "personalize-reach-qwen2.5-coder-0.5b-instruct-q4_k_m-answers.json"
TUNING = ("no_lists", "metric", "brevity", "no_code", "sign_off", "french")
MAX_CASES = 12

# Complaint wordings for the held-out scenarios, written from each scenario's one-line preference
# alone, apart from (and before reading) the scenarios' own .complaints and the recorded answers.
HELDOUT = {
    "answer_first": (
        "Just give me the answer first, please.",
        "Skip the warm-up. Lead with the answer.",
        'You spent the whole first bit saying things like "Great question!" and "Sure, I can help with that" '
        "before getting anywhere. Start with the actual answer next time.",
        "I'd really appreciate it if you put the answer right at the top instead of building up to it. "
        "I don't need an introduction.",
    ),
    "no_bold": (
        "No bold text, please.",
        "Drop the headings and the bold. Plain text.",
        "Could you write it as plain text? The asterisks and headers make it look like a slide deck.",
        "Please stop formatting things like **Key point** or putting a '## Summary' header in. "
        "I just want ordinary sentences with no bold and no headings.",
    ),
    "one_paragraph": (
        "One paragraph, please.",
        "Too many line breaks. Keep it in a single block.",
        "Could you put the whole thing in one paragraph? Breaking it up into separate chunks makes it harder for me to read.",
        "You split that into four short pieces with blank lines between them, like the intro, then the details, "
        "then a separate conclusion. I'd rather have it all run together as one paragraph.",
    ),
    "ends_with_question": (
        "Ask me something at the end.",
        "You just stopped. End with a question for me.",
        "Could you finish by asking me a question back? It helps me keep the conversation going.",
        'I like it when an answer closes with something like "Do you want me to go into more detail on any part?" '
        "so I can steer where we go next. Please end with a question to me.",
    ),
}


def cases(name: str, wordings: tuple[str, ...], recorded: list[dict]) -> list[dict]:
    """The first MAX_CASES questions of the scenario's pool, in prompt order, with mixed answers."""
    sc = SCENARIOS[name]
    by_prompt: dict[str, dict[str, bool]] = {}  # prompt -> text -> meets, first occurrence kept
    for a in recorded:
        by_prompt.setdefault(a["prompt"], {}).setdefault(a["text"], sc.check(a["prompt"], a["text"]))
    out = []
    for question, answers in by_prompt.items():
        if len(set(answers.values())) < 2:
            continue
        case_id = f"{name}-{len(out) + 1:02d}"
        rng = random.Random(case_id)
        out.append({"id": case_id, "scenario": name, "evidence": rng.sample(wordings, rng.choice((1, 2))),
                    "question": question, "answers": [{"text": t, "meets": m} for t, m in answers.items()]})
        if len(out) == MAX_CASES:
            break
    return out


def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def main() -> None:
    recorded = json.loads(ANSWERS.read_text())
    splits = {
        ROOT / "clawd" / "judge" / "data" / "scorer_cases.jsonl":
            {n: cases(n, SCENARIOS[n].complaints, recorded[SCENARIOS[n].pool]) for n in TUNING},
        ROOT / "tests" / "data" / "scorer_heldout.jsonl":
            {n: cases(n, w, recorded[SCENARIOS[n].pool]) for n, w in HELDOUT.items()},
    }
    # ends_with_question has one mixed case, whose only passing answer rewords the question back
    # (the checker takes it for an answer): not a case to measure on
    splits[ROOT / "tests" / "data" / "scorer_heldout.jsonl"].pop("ends_with_question")
    for path, by_scenario in splits.items():
        rows = [c for cs in by_scenario.values() for c in cs]
        write(path, rows)
        print(f"{path.relative_to(ROOT)}: {len(rows)} cases")
        print(f"  {'scenario':<20}{'cases':>6}{'answers':>9}{'meets':>7}")
        for name, cs in by_scenario.items():
            answers = [a for c in cs for a in c["answers"]]
            share = sum(a["meets"] for a in answers) / len(answers) if answers else float("nan")
            print(f"  {name:<20}{len(cs):>6}{len(answers):>9}{share:>7.2f}" + ("  (no mixed case)" if not cs else ""))


if __name__ == "__main__":
    main()
