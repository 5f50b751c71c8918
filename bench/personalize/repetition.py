"""What the publish gate's repetition check (clawd/publish/gate.py, `gate_repetition`) can resolve,
from the learning bench's cached held-out answers (issue 28; docs/learning.md, stop 57).

    python -m bench.personalize.repetition read --model "$(bash scripts/qwen-model.sh)" \\
        --base bench/out/cache/base-HASH.json --runs bench/out/cache/loop-*.json
    python -m bench.personalize.repetition draws
    python -m bench.personalize.repetition push bench/results/personalize-*-grpo-seed*-24turns*.json

`read` re-reads each cached run's 52 held-out answers as the gate reads its open answers (the
model's tokens, `engine.repetition`: `distinct_share`, `loops`) and writes, per run, each prompt's fall in
distinct token-trigram share against the base's answer to the same prompt, and which answers loop,
to bench/results/repetition-falls.json (the answers themselves stay in the uncommitted cache).
`draws` prints, per run, the chance that a gate asking n questions drawn like these prompts (each
prompt's fall resampled with replacement) sees a mean fall above each budget: how often the check
would reject that adapter. `push` reads committed run summaries: per run, the ratio of negative to
positive token-weight in the groups a round could train (trusted, at least the scorer's margin apart;
each answer's advantage as the loss takes it, `group_advantages` with the spread, times its tokens),
beside the adapter's degenerate share: is a round mostly a push down?
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "repetition-falls.json"
QUESTIONS = (16, 32, 48)  # the gate asks 16 (`kind: open` in clawd/publish/probes.jsonl)
BUDGETS = (0.03, 0.05)  # gate_repetition ships at 0.05
DRAWS = 20000


def _heldout(cached: dict[str, Any]) -> dict[str, str]:
    """prompt → answer, from a cached base file (eval at the top) or loop run (its last curve point)."""
    ev = cached["curve"][-1]["eval"] if "curve" in cached else cached
    return {h["prompt"]: h["text"] for h in ev["heldout"]}


def read(model: str, base: Path, runs: list[Path]) -> dict[str, Any]:
    from llama_cpp import Llama

    from clawd.engine.repetition import distinct_share, loops

    vocab = Llama(model, vocab_only=True, verbose=False)

    def measure(text: str) -> tuple[float, bool]:
        ids = vocab.tokenize(text.encode("utf-8"), add_bos=False)
        return distinct_share(ids), bool(loops(ids))

    ref = {p: measure(t) for p, t in _heldout(json.loads(base.read_text())).items()}
    out: dict[str, Any] = {"model": Path(model).name, "base": base.name,
                           "base_loops": sum(lp for _, lp in ref.values()), "runs": {}}
    for path in runs:
        cached = json.loads(path.read_text())
        got = {p: measure(t) for p, t in _heldout(cached).items() if p in ref}
        code = cached.get("code", {}).get("commit", "?")[:7]
        out["runs"][f"{path.stem} (code {code})"] = {
            "fall": [round(ref[p][0] - s, 4) for p, (s, _) in got.items()],  # (prompts,)
            "loops": sum(lp for _, lp in got.values()),
            "new_loops": sum(lp and not ref[p][1] for p, (_, lp) in got.items()),
            "gone_loops": sum(ref[p][1] and not lp for p, (_, lp) in got.items())}
    return out


def reject_chance(fall: np.ndarray, n: int, budget: float, seed: int = 0) -> float:
    """P(mean of n prompts' falls, drawn with replacement from `fall` (prompts,), exceeds budget)."""
    draws = np.random.default_rng(seed).integers(0, len(fall), (DRAWS, n))  # (DRAWS, n)
    return float((fall[draws].mean(axis=1) > budget).mean())


def draws(falls: dict[str, Any]) -> list[str]:
    head = " | ".join(f"n = {n}: " + " / ".join(f"> {b:g}" for b in BUDGETS) for n in QUESTIONS)
    lines = [f"| run | loops (new, gone) | mean fall | SD per prompt | {head} |", "|---" * (4 + len(QUESTIONS)) + "|"]
    for name, r in falls["runs"].items():
        f = np.array(r["fall"])
        cells = " | ".join(" / ".join(f"{reject_chance(f, n, b):.2f}" for b in BUDGETS) for n in QUESTIONS)
        lines.append(f"| {name} | {r['loops']} ({r['new_loops']}, {r['gone_loops']}) | {f.mean():.3f} | {f.std():.3f} | {cells} |")
    return lines


def push_ratio(groups: list[dict[str, Any]], margin: float) -> tuple[float, int]:
    """Σ|A·L| over answers with A < 0 over the same for A > 0, and the groups counted: groups as
    summaries keep them (`scorer.by_group`: answers [reward, accepted, tokens]), A as the loss
    takes it (`group_advantages` with the spread)."""
    import torch

    from clawd.train.loss import group_advantages

    neg = pos = 0.0
    counted = 0
    for g in groups:
        r = torch.tensor([[a[0] for a in g["answers"]]], dtype=torch.float64)  # (1, K)
        if g.get("scorer") != "trusted" or float(r.max() - r.min()) < margin:
            continue
        w = (group_advantages(r, spread=True)[0] * torch.tensor([a[2] for a in g["answers"]])).numpy()  # (K,)
        neg, pos, counted = neg - w[w < 0].sum(), pos + w[w > 0].sum(), counted + 1
    return (neg / pos if pos else float("nan")), counted


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("read")
    r.add_argument("--model", required=True)
    r.add_argument("--base", type=Path, required=True)
    r.add_argument("--runs", type=Path, nargs="+", required=True)
    sub.add_parser("draws")
    sub.add_parser("push").add_argument("summaries", type=Path, nargs="+")
    args = p.parse_args()
    if args.cmd == "read":
        RESULTS.write_text(json.dumps(read(args.model, args.base, args.runs), indent=1) + "\n")
        print(f"wrote {RESULTS}")
    elif args.cmd == "draws":
        print("\n".join(draws(json.loads(RESULTS.read_text()))))
    else:
        for path in args.summaries:
            d = json.loads(path.read_text())
            sc = d.get("scorer") or {}
            if sc.get("by_group") and sc.get("margin") is not None:
                ratio, n = push_ratio(sc["by_group"], sc["margin"])
                print(f"{path.name}: {n} groups, negative/positive token-weight {ratio:.2f}, "
                      f"degenerate {d['columns'][d['scenario']]['loop']['degenerate']:.3f}")


if __name__ == "__main__":
    main()
