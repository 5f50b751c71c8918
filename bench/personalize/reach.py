"""Which preferences are within the model's reach: how often its own answers to the conversation
prompts already meet each scenario's checker (issue 27). Conversation prompts only; the held-out
prompts are never looked at here.

    python -m bench.personalize.reach --model "$(bash scripts/qwen-model.sh)" --threads 2

For each prompt pool (general, measure, coding), one daemon answers every conversation prompt
greedily, then K times at the simulated user's temperature, as closed side sessions. Every
scenario of that pool grades the same answers (checkers are pure), so one pass serves them all.

A scenario the oracle can teach needs samples that pass (the oracle trains on them) and a greedy
answer that mostly does not (room to gain): the report gives, per scenario, the greedy pass rate,
the sample pass rate, and the share of prompts with at least one passing sample among K.
Results: bench/results/personalize-reach-MODEL.json.

    python -m bench.personalize.reach --regrade bench/results/personalize-reach-MODEL-answers.json

grades recorded answers again (a scenario added since) with no model run, and rewrites the table
beside them, keeping the run's own settings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.personalize.evaluate import SAMPLING_TEMPERATURE, SIDE, Daemon
from bench.personalize.prompts import CODING, GENERAL, MEASURE
from bench.personalize.report import RESULTS, ROOT
from bench.personalize.scenarios import CONTROL, SCENARIOS, SYSTEM

POOLS = {"general": GENERAL, "measure": MEASURE, "coding": CODING}


def reach(answers: list[dict[str, Any]], check) -> dict[str, Any]:
    """Pass rates of one checker over recorded answers ({"prompt", "text", "greedy"})."""
    greedy = [a for a in answers if a["greedy"]]
    sampled = [a for a in answers if not a["greedy"]]
    prompts = {a["prompt"] for a in sampled}
    passing = {a["prompt"] for a in sampled if check(a["prompt"], a["text"])}
    return {"greedy": sum(check(a["prompt"], a["text"]) for a in greedy) / max(1, len(greedy)),
            "sampled": sum(check(a["prompt"], a["text"]) for a in sampled) / max(1, len(sampled)),
            "prompts_with_a_pass": len(passing) / max(1, len(prompts)), "samples": len(sampled)}


def graded(recorded: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Every scenario's `reach` over the recorded answers of its pool, printed as a table."""
    table = {sc.name: {"pool": sc.pool, **reach(recorded[sc.pool], sc.check)}
             for sc in (*SCENARIOS.values(), CONTROL) if sc.pool in recorded}
    print(f"\n{'scenario':<20}{'pool':<9}{'greedy':>8}{'sampled':>9}{'a pass in K':>13}")
    for name, r in table.items():
        print(f"{name:<20}{r['pool']:<9}{r['greedy']:>8.2f}{r['sampled']:>9.2f}{r['prompts_with_a_pass']:>13.2f}")
    return table


def regrade(answers: Path) -> None:
    """The table again from recorded answers, written beside them over the run that recorded them."""
    path = answers.with_name(answers.name.removesuffix("-answers.json") + ".json")
    result = json.loads(path.read_text())
    result["scenarios"] = graded(json.loads(answers.read_text()))
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="GGUF to serve (default: the daemon's)")
    p.add_argument("--threads", type=int)
    p.add_argument("--k", type=int, default=4, help="samples per conversation prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--pools", default=",".join(POOLS))
    p.add_argument("--daemon-args", default="")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    p.add_argument("--regrade", type=Path, help="recorded answers (…-answers.json) to grade again, with no model run")
    args = p.parse_args()
    if args.regrade:
        regrade(args.regrade)
        return
    home = Path(tempfile.mkdtemp(prefix="clawd-bench-reach-"))
    d = Daemon("combined", args, home).start()
    t0 = time.time()
    recorded: dict[str, list[dict[str, Any]]] = {}
    try:
        model = Path(d.status()["model"]["path"]).name
        for pool in args.pools.split(","):
            rows = recorded[pool] = []
            for i, prompt in enumerate(POOLS[pool]):
                msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
                rows.append({"prompt": prompt, "greedy": True,
                             "text": d.chat(msgs, args.max_tokens, temperature=0.0, seed=0, headers=SIDE)[1]})
                for j in range(args.k):
                    seed = args.seed * 100_000 + i * 10 + j
                    rows.append({"prompt": prompt, "greedy": False, "text": d.chat(
                        msgs, args.max_tokens, temperature=SAMPLING_TEMPERATURE, seed=seed, headers=SIDE)[1]})
                print(f"  {pool} {i + 1}/{len(POOLS[pool])} ({time.time() - t0:.0f}s)", flush=True)
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)
    table = graded(recorded)
    result = {"model": model, "k": args.k, "seed": args.seed, "temperature": SAMPLING_TEMPERATURE,
              "max_tokens": args.max_tokens, "threads": args.threads, "seconds": round(time.time() - t0, 1),
              "scenarios": table}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"personalize-reach-{Path(model).stem}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"personalize-reach-{Path(model).stem}-answers.json").write_text(
        json.dumps(recorded, indent=1, ensure_ascii=False))
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
