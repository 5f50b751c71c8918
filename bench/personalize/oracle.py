"""The oracle column of bench/personalize/run.py: what this compute reaches with a perfect scorer (issue 27).

A fresh daemon (train_method rl, otherwise the run's own settings) answers each conversation prompt
K times at the simulated user's temperature, every answer a session of its own that ends with it
(so no judge ever sees it). The simulated user's verdict picks the answers that meet the preference
and say something (`oracle_keep`, `scenarios.accepts`), and each of those gets explicit feedback +1 through POST /v1/feedback, the
user's own channel. Then the daemon does what it always does: it trains a round for every
train_batch ready turns (a last round takes the rest), gates each adapter and hot-swaps it in. The
live weights are then scored like any other column.

With only positive, on-policy samples, the first-use PPO ratio is 1 and the RL loss is the
likelihood of the kept answers: supervised fine-tuning on the model's own best samples, through
the daemon's backend, learning rate, batch, epochs and gate. The loop's gain is read as a share of
this one. A result is cached by model file, scenario, seed, K and settings.

With `--oracle-pairs`, the labels are the ones a perfect GRPO scorer gives instead: within each
prompt, a passing and a failing sample are paired in sample order, +1 and -1, and the rest are left
out, so that each prompt's labels sum to zero as GRPO's advantages (reward minus the group's mean)
do. What a pair's answers share, their content, is pushed both ways; what differs, the
preference, one way; a prompt whose samples all pass or all fail teaches nothing, as in GRPO.
(Plain +1 reinforces every token of a kept answer, its mistakes too: the wrong-content share
doubled at lr 5e-4. Unpaired -1 on every failing sample was worse: with more failing than passing
samples per prompt, the shared content was pushed down, and the gate rejected the adapters for
making the kept answers less likely. docs/learning.md has both.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.personalize.evaluate import SAMPLING_TEMPERATURE, Daemon, greedy_answers, since, wait_for_round
from bench.personalize.scenarios import SYSTEM, Scenario, accepts, users_source


def oracle_keep(sc: Scenario, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Exactly the samples the simulated user accepts (each {"prompt", "text", ...}), in order: in
    the scenario's form and saying something (scenarios.accepts)."""
    return [s for s in samples if accepts(sc, s["prompt"], s["text"])]


def oracle_labels(sc: Scenario, samples: list[dict[str, Any]], pairs: bool) -> list[tuple[dict[str, Any], int]]:
    """(sample, ±1) in sample order: +1 on what the user accepts; with `pairs`, only each prompt's
    (pass, fail) pairs, matched in sample order, +1 and -1 (the unmatched rest left out)."""
    kept = {id(s) for s in oracle_keep(sc, samples)}
    if not pairs:
        return [(s, 1) for s in samples if id(s) in kept]
    chosen: set[int] = set()
    for prompt in dict.fromkeys(s["prompt"] for s in samples):
        group = [s for s in samples if s["prompt"] == prompt]
        for good, bad in zip([s for s in group if id(s) in kept], [s for s in group if id(s) not in kept]):
            chosen |= {id(good), id(bad)}
    return [(s, 1 if id(s) in kept else -1) for s in samples if id(s) in chosen]


def sample(d: Daemon, sc: Scenario, seed: int, k: int, max_tokens: int) -> list[dict[str, Any]]:
    """K answers to each conversation prompt at the served temperature, each its own closed session."""
    prompts = list(sc.prompts)
    random.Random(seed).shuffle(prompts)
    out = []
    for i, prompt in enumerate(prompts):
        for j in range(k):
            cid, text = d.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}], max_tokens,
                               temperature=SAMPLING_TEMPERATURE, seed=seed * 100_000 + i * 10 + j,
                               headers={"X-Session-Done": "1"})
            out.append({"prompt": prompt, "id": cid, "text": text})
    return out


def train_on(d: Daemon, labels: list[tuple[dict[str, Any], int]], timeout: float) -> list[dict[str, Any]]:
    """Each label as explicit feedback, then every round the daemon trains on them, to the last one."""
    for s, score in labels:
        r = httpx.post(d.url + "/v1/feedback", json={"id": s["id"], "score": score}, timeout=60)
        r.raise_for_status()
    rounds: list[dict[str, Any]] = []
    while True:
        t = time.time()
        st, waited = wait_for_round(d, since=t, timeout=timeout)
        train, publish = since(st["training"]["last"], t), since(st["training"]["last_publish"], t)
        if train or publish:
            rounds.append({"learn_s": round(waited, 1), "train": train, "publish": publish,
                           "adapter": (st["adapter"] or {}).get("version")})
            continue
        ready = st["training"]["ready"]
        if ready == 0:
            return rounds
        if ready >= st["training"]["batch"] or (rounds and rounds[-1].get("asked")):
            raise RuntimeError(f"{ready} kept answers are ready but no round ran: {json.dumps(st)[:800]}")
        httpx.post(d.url + "/v1/clawd/train", timeout=60).raise_for_status()  # the last, short round
        rounds.append({"asked": True})


def run_oracle(sc: Scenario, seed: int, args: argparse.Namespace, pools: list[tuple[str, list[str]]],
               cache: Path) -> dict[str, Any]:
    """The oracle's record: samples, what was kept, its rounds, and the trained weights' greedy answers."""
    home = Path(tempfile.mkdtemp(prefix=f"clawd-bench-oracle-{sc.name}-{seed}-"))
    d = Daemon("rl", args, home).start()
    try:
        key = json.dumps([d.model_key(), sc.name, sc.prompts, seed, args.oracle_k, args.max_tokens, d.settings, pools,
                          users_source()] + (["pairs"] if args.oracle_pairs else []))
        path = cache / f"oracle-{sc.name}-seed{seed}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"
        if path.is_file():
            return json.loads(path.read_text()) | {"cached": path.name}
        t0 = time.time()
        samples = sample(d, sc, seed, args.oracle_k, args.max_tokens)
        kept = oracle_keep(sc, samples)
        labels = oracle_labels(sc, samples, args.oracle_pairs)
        print(f"  oracle: {len(kept)} of {len(samples)} samples meet the preference; {len(labels)} labeled "
              f"({time.time() - t0:.0f}s)", flush=True)
        rounds = train_on(d, labels, args.round_timeout)
        live = (d.status()["adapter"] or {}).get("version")  # None: the gate passed none, the base is scored
        # every round's adapter with its gate verdict (`rounds` sees only what changed between waits)
        listed = httpx.get(d.url + "/v1/clawd/adapters", timeout=60).json()["adapters"]
        adapters = [{"version": a["version"], "status": a["status"], "parent": a["parent"],
                     "reasons": (a["gate"] or {}).get("reasons", [])} for a in listed]
        ev = greedy_answers(d, pools, args.max_tokens)
        kept_ids = {s["id"] for s in kept}
        rec = {"k": args.oracle_k, "samples": len(samples), "kept": len(kept), "settings": d.settings,
               "pass_rate": len(kept) / len(samples),
               "labels": [y for _, y in labels], "rounds": rounds, "adapters": adapters, "adapter": live, "eval": ev,
               "answers": [{"prompt": s["prompt"], "text": s["text"], "kept": s["id"] in kept_ids} for s in samples],
               "seconds": round(time.time() - t0, 1)}
        cache.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec, ensure_ascii=False))
        return rec
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)
