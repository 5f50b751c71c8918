"""The gate an adapter passes before it can go live (design §8).

Checks, in order; the first failure rejects, and the reasons are kept with the adapter:
1. finite: every tensor of the converted GGUF is finite (a NaN or an f16 overflow is fatal);
2. loads: llama.cpp accepts it on the served base;
3. replay: on recent positively judged main turns the adapter was not trained on, the mean
   log-probability per completion token under the candidate is not lower than under the live
   weights (the current adapter, or the base) by more than `margin` nats;
4. probes: greedy answers to a fixed probe set are not degenerate (empty, or looping) more often
   than the live weights' answers, and the live weights' answers keep their likelihood under the
   candidate within `probe_margin` nats per token (catches a collapse even with no replay data).

It runs on an `Engine` of its own (a small context on the same GGUF; mmap shares the weights),
never on the daemon's serving context.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from ..engine import Engine, GenInfo, Sampling, log_softmax
from ..store import Store

log = logging.getLogger("clawd.publish")

PROBES = [
    "What is the capital of France?",
    "Write a Python function that returns the sum of a list of numbers.",
    "Give me three tips for staying focused while working.",
    "Explain in two sentences what a hash table is.",
]


@dataclass
class GateConfig:
    margin: float = 0.1  # nats per completion token the replay mean may drop
    probe_margin: float = 1.0  # nats per token the live weights' probe answers may drop
    turns: int = 8  # recent positive turns replayed
    max_tokens: int = 1024  # per replayed turn: the prompt is cut from the left to fit
    probe_tokens: int = 48


def finite_check(path: Path) -> dict[str, Any]:
    """Read the adapter GGUF back and look at every tensor: shape (r, in) or (out, r) each."""
    reader = gguf.GGUFReader(str(path))
    bad, biggest = [], 0.0
    for t in reader.tensors:
        a = np.asarray(t.data, dtype=np.float32)
        if not np.isfinite(a).all():
            bad.append(t.name)
        else:
            biggest = max(biggest, float(np.abs(a).max()) if a.size else 0.0)
    return {"ok": not bad, "tensors": len(reader.tensors), "non_finite": bad[:10], "max_abs": biggest}


def score(engine: Engine, prompt: list[int], completion: list[int]) -> list[float]:
    """log p(completion[i] | prompt + completion[:i]) under the engine's serving context as it
    is set now, one per completion token. Only the completion's positions produce logits, so
    memory stays at n_batch × n_vocab floats whatever the context."""
    llm = engine.llm
    ctx, batch, n_batch = llm._ctx, llm._batch, llm.n_batch  # llama-cpp-python internals, version pinned
    tokens = prompt + completion
    first = len(prompt) - 1  # logits at position i predict tokens[i + 1]
    out: list[float] = []
    ctx.kv_cache_seq_rm(-1, 0, -1)
    try:
        for start in range(0, len(tokens) - 1, n_batch):
            chunk = tokens[start:min(start + n_batch, len(tokens) - 1)]
            batch.set_batch(chunk, n_past=start, logits_all=False)
            for i in range(len(chunk)):
                batch.batch.logits[i] = start + i >= first
            ctx.decode(batch)
            for i in range(max(0, first - start), len(chunk)):
                row = np.ctypeslib.as_array(ctx.get_logits_ith(i), shape=(engine.n_vocab,))
                out.append(float(log_softmax(row)[tokens[start + i + 1]]))
    finally:
        llm.reset()  # the Llama object's own bookkeeping no longer matches the KV cache
    return out


def degenerate(ids: list[int], text: str) -> str | None:
    """Why an answer is degenerate, or None: empty, one token repeated 8 times in a row, or
    most of its token trigrams repeats."""
    if not text.strip():
        return "empty"
    run = best = 1
    for a, b in itertools.pairwise(ids):
        run = run + 1 if a == b else 1
        best = max(best, run)
    if best >= 8:
        return f"token repeated {best}×"
    grams = [tuple(ids[i:i + 3]) for i in range(len(ids) - 2)]
    if len(grams) >= 16 and len(set(grams)) / len(grams) < 0.5:
        return f"loops ({len(set(grams))}/{len(grams)} distinct trigrams)"
    return None


def _fit(prompt: list[int], completion: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    completion = completion[: max_tokens // 2]
    keep = max_tokens - len(completion)
    return prompt[-keep:], completion


def _side(engine: Engine, replay: list[tuple[list[int], list[int]]], probes: list[list[int]],
          cfg: GateConfig, probe_answers: list[list[int]] | None) -> dict[str, Any]:
    """Everything measured under the adapter the engine has now: the replay's logprobs, greedy
    answers to the probes, and the logprobs of `probe_answers` (default: its own answers)."""
    lps = [lp for p, c in replay for lp in score(engine, p, c)]
    answers, reasons = [], []
    for prompt in probes:
        ids: list[int] = []
        with engine.lock.user():
            engine.llm.reset()
            for step in engine.generate(prompt, Sampling(temperature=0.0, seed=0, max_tokens=cfg.probe_tokens), GenInfo()):
                ids.append(step.token)
            engine.llm.reset()
        answers.append(ids)
        reasons.append(degenerate(ids, engine.detokenize(ids)))
    scored = probe_answers if probe_answers is not None else answers
    plps = [lp for p, a in zip(probes, scored) if a for lp in score(engine, p, a)]
    return {"replay_mean": float(np.mean(lps)) if lps else None, "replay_tokens": len(lps), "answers": answers,
            "degenerate": reasons, "probe_mean": float(np.mean(plps)) if plps else None}


def run_gate(engine: Engine, candidate: Path, reference: Path | None, store: Store, exclude: set[int],
             cfg: GateConfig, reference_version: int | None = None, version: int = -1) -> dict[str, Any]:
    """Gate `candidate` against `reference` (None: base weights). Leaves the engine on base weights."""
    t0 = time.perf_counter()
    result: dict[str, Any] = {"passed": False, "reasons": [], "config": asdict(cfg), "reference": reference_version}
    fin = finite_check(candidate)
    result["finite"] = fin
    if not fin["ok"]:
        result["reasons"].append(f"non-finite weights in {', '.join(fin['non_finite'])}")
        return _done(result, t0)
    try:
        engine.set_adapter(candidate, version)
    except ValueError as e:
        result["reasons"].append(str(e))
        return _done(result, t0)
    turns = store.positive_turns(cfg.turns, exclude)
    replay = [_fit(t.prompt_ids, t.completion_ids, cfg.max_tokens) for t in turns]
    probes = [engine.tokenize(engine.template.render([{"role": "user", "content": q}], None)) for q in PROBES]
    engine.set_adapter(reference, reference_version)
    ref = _side(engine, replay, probes, cfg, None)
    engine.set_adapter(candidate, version)
    cand = _side(engine, replay, probes, cfg, ref["answers"])
    engine.set_adapter(None, None)

    if replay:
        drop = ref["replay_mean"] - cand["replay_mean"]
        result["replay"] = {"turns": [t.id for t in turns], "tokens": cand["replay_tokens"],
                            "reference_mean": ref["replay_mean"], "candidate_mean": cand["replay_mean"], "drop": drop}
        if drop > cfg.margin:
            result["reasons"].append(f"replay: mean logprob of {len(turns)} positively judged turns fell by "
                                     f"{drop:.3f} nats/token (margin {cfg.margin})")
    else:
        result["replay"] = {"skipped": "no positively judged turns to replay yet"}
    n_ref = sum(r is not None for r in ref["degenerate"])
    n_cand = sum(r is not None for r in cand["degenerate"])
    probe_drop = (ref["probe_mean"] - cand["probe_mean"]) if ref["probe_mean"] is not None else 0.0
    result["probes"] = {"reference_degenerate": ref["degenerate"], "candidate_degenerate": cand["degenerate"],
                        "candidate_texts": [engine.detokenize(a)[:200] for a in cand["answers"]],
                        "reference_answers_mean": ref["probe_mean"], "under_candidate_mean": cand["probe_mean"],
                        "drop": probe_drop}
    if n_cand > n_ref:
        result["reasons"].append(f"probes: {n_cand} of {len(PROBES)} answers degenerate (live weights: {n_ref}): "
                                 + "; ".join(r for r in cand["degenerate"] if r))
    if probe_drop > cfg.probe_margin:
        result["reasons"].append(f"probes: the live weights' answers lost {probe_drop:.2f} nats/token under the "
                                 f"candidate (margin {cfg.probe_margin})")
    return _done(result, t0)


def _done(result: dict[str, Any], t0: float) -> dict[str, Any]:
    result["passed"] = not result["reasons"]
    result["seconds"] = round(time.perf_counter() - t0, 2)
    log.info("gate %s in %.1fs%s", "passed" if result["passed"] else "REJECTED", result["seconds"],
             "" if result["passed"] else ": " + "; ".join(result["reasons"]))
    return result
