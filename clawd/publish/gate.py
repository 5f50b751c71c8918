"""The gate an adapter passes before it can go live (design §8).

Everything is measured against the base weights (adapter off), never against the live adapter:
an adapter a little worse than the one before it would pass a relative check, and the next one a
little worse again, so damage would ratchet one margin at a time. Against the base, what an
adapter may lose is a budget for the whole chain.

Checks; the first two failing stop it, the rest all run and every reason is kept with the adapter:
1. finite: every tensor of the converted GGUF is finite (a NaN or an f16 overflow is fatal);
2. loads: llama.cpp accepts it on the served base;
3. replay: on recent positively judged main turns the adapter was not trained on, the mean
   log-probability per completion token is not lower than under the base by more than `margin`;
4. probes (probes.jsonl), answered greedily by the base and by the candidate:
   - answers checked: the candidate gets fewer than `probe_threshold` more of them wrong than
     the base does;
   - no echo: at most `probe_threshold - 1` answers newly repeat their question back;
   - no degenerate answer (empty, looping) newly, within the same allowance;
   - no refusal ("I'm sorry, but I can't assist with that.") newly, within the same allowance: every
     probe is harmless;
   - no stamped phrase: no 4-word phrase in most candidate answers (of those that ended within
     the answer length) that the base does not write;
   - tool calls: tool probes are answered as served (the call grammar once a call begins), and
     the candidate makes a call of the offered tool on at least as many as the base does;
   - repetition: on the open probes, answered at length for this check alone, the mean share of
     distinct token trigrams per answer falls by at most `repetition` below the base's. The
     learning bench's adapters began to loop after 80-150 words, past every other probe's answer.
     A share, not a count of looping answers: a gentle adapter on the 135M model turned 2 of 16
     borderline answers (49% distinct) into "loops" by the count, a flip of noise;
5. near flips: on the answer-checked probes both answer right, the margin of the base's answer at
   the token where its accepted answer begins (its logprob minus the likeliest other token's),
   under the candidate against under the base; a probe whose margin fell below half the base's
   (from at least MIN_MARGIN) is a near flip, the answer the next round would lose, and
   `near_flips` of them reject before any flips;
6. KL to the base on the general probes: per-token KL(candidate ‖ base) on the candidate's own
   greedy answers, mean within `kl_budget`, and at most `kl_worst_share` of the tokens above
   WORST_NATS (a few badly changed tokens hide in a mean, not in this share).

The base's probe answers are computed once per model file and probe set and cached on disk.
It runs on an `Engine` of its own (a small context on the same GGUF; mmap shares the weights),
never on the daemon's serving context.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from ..config import Settings
from ..engine import tool_calls
from ..engine.engine import Engine, GenInfo, Sampling
from ..engine.repetition import degenerate, distinct_share, echoes
from ..engine.sampling import log_softmax
from ..store.records import GateResult
from ..store.store import Store
from . import probes as P

log = logging.getLogger("clawd.publish")

WORST_NATS = 2.0  # a token whose distribution moved this far from the base's is a changed answer, not a style
MIN_MARGIN = 1.0  # nats: a probe the base answers by less is a coin toss already, not a near flip


GATE_SETTINGS = ("margin", "probe_threshold", "kl_budget", "kl_worst_share", "turns", "near_flips", "repetition")


def _setting(name: str) -> Any:
    """The default of Settings.gate_<name>: the one place a gate threshold's default is written."""
    return Settings.model_fields[f"gate_{name}"].default


@dataclass
class GateConfig:
    """The gate's thresholds (the `gate_*` settings, described there) and its fixed lengths."""

    margin: float = _setting("margin")
    probe_threshold: int = _setting("probe_threshold")
    # Measured on SmolLM2-135M (tests/test_publish_gate.py's adapters): a style-only adapter 0.06
    # nats/token and 0% of tokens above WORST_NATS; echoing 1.35 and 15%, a flipped fact 0.95 and 10%.
    kl_budget: float = _setting("kl_budget")
    kl_worst_share: float = _setting("kl_worst_share")
    turns: int = _setting("turns")
    near_flips: int = _setting("near_flips")
    repetition: float = _setting("repetition")
    max_tokens: int = 1024  # per replayed turn: the prompt is cut from the left to fit
    probe_tokens: int = 24  # greedy answer to an answer-checked probe
    tool_tokens: int = 48  # ... to a tool probe: a whole call, pretty-printed or not
    general_tokens: int = 32  # greedy answer to a general probe, on which the KL is measured
    # ... to an open probe: as long as the learning bench's answers (160), in which adapters looped
    # on 7 of 52 after 80-150 words (docs/learning.md, stops 54-56). 16 such answers are most of a
    # gate's decoding; the base's are cached.
    open_tokens: int = 160


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


def _rows(engine: Engine, prompt: list[int], completion: list[int]) -> Iterator[np.ndarray]:
    """log softmax of the next-token logits at each completion position (row i predicts
    completion[i]) under the serving context as it is set now. Only the completion's positions
    produce logits, so memory stays at n_batch × n_vocab floats whatever the context."""
    llm = engine.llm
    ctx, batch, n_batch = llm._ctx, llm._batch, llm.n_batch  # llama-cpp-python internals, version pinned
    tokens = prompt + completion
    first = len(prompt) - 1  # logits at position i predict tokens[i + 1]
    ctx.kv_cache_seq_rm(-1, 0, -1)
    try:
        for start in range(0, len(tokens) - 1, n_batch):
            chunk = tokens[start:min(start + n_batch, len(tokens) - 1)]
            batch.set_batch(chunk, n_past=start, logits_all=False)
            for i in range(len(chunk)):
                batch.batch.logits[i] = start + i >= first
            ctx.decode(batch)
            for i in range(max(0, first - start), len(chunk)):
                yield log_softmax(np.ctypeslib.as_array(ctx.get_logits_ith(i), shape=(engine.n_vocab,)))
    finally:
        llm.reset()  # the Llama object's own bookkeeping no longer matches the KV cache


def score(engine: Engine, prompt: list[int], completion: list[int]) -> list[float]:
    """log p(completion[i] | prompt + completion[:i]), one per completion token."""
    return [float(row[t]) for row, t in zip(_rows(engine, prompt, completion), completion)]


def repetition(probes: Sequence[P.Probe], base_ids: list[list[int]], cand_ids: list[list[int]]) -> dict[str, Any]:
    """The open probes' answers, each side's mean distinct_share, and how far the candidate's fell."""
    share = {p.id: (distinct_share(b), distinct_share(c)) for p, b, c in zip(probes, base_ids, cand_ids) if p.kind == "open"}
    base, cand = (float(np.mean([s[k] for s in share.values()])) if share else 1.0 for k in (0, 1))
    worst = min(share, key=lambda k: share[k][1] - share[k][0], default=None)
    return {"probes": len(share), "base": round(base, 3), "candidate": round(cand, 3), "fall": round(base - cand, 3),
            "worst": worst, "shares": {k: [round(b, 3), round(c, 3)] for k, (b, c) in share.items()}}


def _fit(prompt: list[int], completion: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    completion = completion[: max_tokens // 2]
    keep = max_tokens - len(completion)
    return prompt[-keep:], completion


def _greedy(engine: Engine, prompt: list[int], max_tokens: int, tools: list[dict[str, Any]] | None) -> list[int]:
    # One answer after another on the serving context: a 135M model on a CPU is compute-bound, and
    # decoding all probes as parallel sequences of one batch measured no faster (45 s vs 46 s).
    # With tools offered, as served: a call, once begun, under the call grammar.
    sampling = Sampling(temperature=0.0, seed=0, max_tokens=max_tokens,
                        lazy=tool_calls.CallTrigger(tools) if tools else None)
    with engine.lock.user():
        engine.llm.reset()
        ids = [s.token for s in engine.generate(prompt, sampling, GenInfo())]
        engine.llm.reset()
    return ids


def _answers(engine: Engine, probes: tuple[P.Probe, ...], prompts: list[list[int]], cfg: GateConfig) -> list[list[int]]:
    """Greedy answers under the adapter the serving context has now."""
    return [_greedy(engine, p, _limit(pr, cfg), pr.tools()) for pr, p in zip(probes, prompts)]


def _limit(probe: P.Probe, cfg: GateConfig) -> int:
    return {"general": cfg.general_tokens, "open": cfg.open_tokens, "tool": cfg.tool_tokens}.get(probe.kind, cfg.probe_tokens)


def _base_answers(engine: Engine, probes: tuple[P.Probe, ...], prompts: list[list[int]], cfg: GateConfig,
                  cache_dir: Path | None) -> list[list[int]]:
    """The base weights' greedy answers, from the cache when this model file, probe set and
    answer lengths have been seen before. The engine must be on the base weights."""
    st = engine.model_path.stat()
    key = json.dumps([str(engine.model_path.resolve()), st.st_size, st.st_mtime_ns, cfg.probe_tokens,
                      cfg.general_tokens, cfg.open_tokens, cfg.tool_tokens, "call grammar", [asdict(p) for p in probes]],
                     sort_keys=True)
    path = cache_dir / f"base-answers-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json" if cache_dir else None
    if path is not None and path.is_file():
        return json.loads(path.read_text())["answers"]
    t0 = time.perf_counter()
    answers = _answers(engine, probes, prompts, cfg)
    log.info("gate: the base weights answered %d probes in %.1fs%s", len(probes), time.perf_counter() - t0,
             f" (cached in {path})" if path else "")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"model": str(engine.model_path), "answers": answers}))
        tmp.replace(path)
    return answers


def _kl(engine: Engine, candidate: Path, version: int, prompts: list[list[int]],
        answers: list[list[int]]) -> list[float]:
    """Per-token KL(candidate ‖ base) on the candidate's `answers`, one prompt at a time (two
    rows of n_vocab floats per token; adapters switch in milliseconds)."""
    kls: list[float] = []
    for prompt, ids in zip(prompts, answers):
        if not ids:
            continue
        if engine.adapter_path != candidate:
            engine.set_adapter(candidate, version)
        cand = np.stack(list(_rows(engine, prompt, ids)))
        engine.set_adapter(None, None)
        base = np.stack(list(_rows(engine, prompt, ids)))
        kls += (np.exp(cand) * (cand - base)).sum(axis=1).tolist()
    return kls


def decisive(engine: Engine, ids: list[int], accept: tuple[str, ...]) -> int | None:
    """The index of the token where the first accepted answer begins in the answer `ids`; None
    when no accepted answer appears (as probes.contains reads it)."""
    text, starts = "", []
    for t in ids:
        starts.append(len(text))
        text += engine.piece(t).decode("utf-8", "replace")
    hits = P.accepted_at(text, accept)
    if not hits:
        return None
    first = min(hits)
    return max(i for i, s in enumerate(starts) if s <= first)


def margin_at(engine: Engine, prompt: list[int], ids: list[int], i: int) -> float:
    """log p(ids[i]) minus the likeliest other token's log p there, under the weights set now."""
    row = list(_rows(engine, prompt, ids[: i + 1]))[-1]
    chosen = float(row[ids[i]])
    row[ids[i]] = -np.inf
    return chosen - float(row.max())


def near_flips(engine: Engine, candidate: Path, version: int, probes: tuple[P.Probe, ...], prompts: list[list[int]],
               base_ids: list[list[int]], both_right: list[int]) -> dict[str, Any]:
    """Margins of the base's answers at their decisive token, under the base and the candidate, on
    the probes both answer right; leaves the engine on the base weights."""
    at = {i: k for i in both_right if probes[i].accept and (k := decisive(engine, base_ids[i], probes[i].accept)) is not None}
    base = {i: margin_at(engine, prompts[i], base_ids[i], k) for i, k in at.items()}
    engine.set_adapter(candidate, version)
    cand = {i: margin_at(engine, prompts[i], base_ids[i], k) for i, k in at.items()}
    engine.set_adapter(None, None)
    near = sorted(probes[i].id for i in at if base[i] >= MIN_MARGIN and cand[i] < base[i] / 2)
    return {"probes": len(at), "near": near, "margins": {probes[i].id: [round(base[i], 3), round(cand[i], 3)] for i in at}}


def run_gate(engine: Engine, candidate: Path, store: Store, exclude: set[int], cfg: GateConfig,
             version: int = -1, cache_dir: Path | None = None) -> GateResult:
    """Gate `candidate` against the base weights. Leaves the engine on base weights."""
    t0 = time.perf_counter()
    result = GateResult(False, [], checks={"config": asdict(cfg), "reference": "base"})
    checks = result.checks
    fin = finite_check(candidate)
    checks["finite"] = fin
    if not fin["ok"]:
        result.reasons.append(f"non-finite weights in {', '.join(fin['non_finite'])}")
        return _done(result, t0)
    try:
        engine.set_adapter(candidate, version)
    except ValueError as e:
        result.reasons.append(str(e))
        return _done(result, t0)
    turns = store.positive_turns(cfg.turns, exclude) if cfg.turns else []  # 0: no replay
    replay = [_fit(t.prompt_ids, t.completion_ids, cfg.max_tokens) for t in turns]
    probes = P.load_probes()
    prompts = [engine.tokenize(engine.template.render(p.messages(), p.tools())) for p in probes]

    cand_replay = [lp for p, c in replay for lp in score(engine, p, c)]
    cand_ids = _answers(engine, probes, prompts, cfg)
    general = [i for i, p in enumerate(probes) if p.kind == "general"]
    kls = _kl(engine, candidate, version, [prompts[i] for i in general], [cand_ids[i] for i in general])
    engine.set_adapter(None, None)
    base_replay = [lp for p, c in replay for lp in score(engine, p, c)]
    base_ids = _base_answers(engine, probes, prompts, cfg, cache_dir)

    reasons = result.reasons
    if replay:
        base_mean, cand_mean = float(np.mean(base_replay)), float(np.mean(cand_replay))
        drop = base_mean - cand_mean
        checks["replay"] = {"turns": [t.id for t in turns], "tokens": len(cand_replay),
                            "base_mean": base_mean, "candidate_mean": cand_mean, "drop": drop}
        if drop > cfg.margin:
            reasons.append(f"replay: mean logprob of {len(turns)} positively judged turns fell {drop:.3f} "
                           f"nats/token below the base weights' (margin {cfg.margin})")
    else:
        checks["replay"] = {"skipped": "no positively judged turns to replay yet"}

    cand_text = [engine.detokenize(a) for a in cand_ids]
    base_text = [engine.detokenize(a) for a in base_ids]
    checked = [i for i, p in enumerate(probes) if p.kind not in P.UNCHECKED]
    base_right = {i for i in checked if P.right(probes[i], base_text[i])}
    cand_right = {i for i in checked if P.right(probes[i], cand_text[i])}
    lost, gained = sorted(base_right - cand_right), sorted(cand_right - base_right)
    checks["probes"] = {"checked": len(checked), "base_right": len(base_right), "candidate_right": len(cand_right),
                        "lost": [probes[i].id for i in lost], "gained": [probes[i].id for i in gained],
                        "lost_answers": {probes[i].id: cand_text[i][:120] for i in lost}}
    # Counted net: on a small model a gentle adapter flips several borderline answers each way
    # (measured on SmolLM2-135M: a style-only adapter lost 5 and gained 7), so per-probe losses
    # alone would reject it; a fact flipped under both its phrasings still costs 2 net.
    worse = len(base_right) - len(cand_right)
    if worse >= cfg.probe_threshold:
        reasons.append(f"probes: {worse} more of the {len(checked)} answer-checked probes wrong than the base weights "
                       f"({len(base_right)} → {len(cand_right)} right; lost {', '.join(probes[i].id for i in lost)}; "
                       f"threshold {cfg.probe_threshold})")

    checks["near_flips"] = nf = near_flips(engine, candidate, version, probes, prompts, base_ids,
                                            sorted(base_right & cand_right))
    if len(nf["near"]) >= cfg.near_flips:
        reasons.append(f"near flips: on {len(nf['near'])} probes both answer right, the margin of the base's answer "
                       f"fell below half the base's ({', '.join(nf['near'])}; threshold {cfg.near_flips}): "
                       "they would be the next lost")

    checks["tool_calls"], lost_calls = tool_calls_kept(probes, base_text, cand_text)
    if lost_calls:
        reasons.append(lost_calls)

    flags = {"echo": (lambda p, t, ids: "repeats its question" if echoes(p.q, t) else None, "repeat their question back"),
             "degenerate": (lambda p, t, ids: degenerate(ids, t), "are degenerate"),
             "refusal": (lambda p, t, ids: "declines to answer" if P.refuses(t) else None, "decline to answer")}
    text_of = {p.id: t for p, t in zip(probes, cand_text)}
    short = [i for i, p in enumerate(probes) if p.kind != "open"]  # the open probes are read by `repetition`
    for name, (flag, what) in flags.items():
        c = {probes[i].id: r for i in short if (r := flag(probes[i], cand_text[i], cand_ids[i]))}
        b = {probes[i].id: r for i in short if (r := flag(probes[i], base_text[i], base_ids[i]))}
        new = [k for k in c if k not in b]
        checks[name] = {"candidate": c, "base": b}
        if len(new) >= cfg.probe_threshold:
            reasons.append(f"{name}: {len(c)} of {len(short)} answers {what} (base weights: {len(b)}; threshold "
                           f"{cfg.probe_threshold} new), e.g. {new[0]} ({c[new[0]]}): {text_of[new[0]][:60]!r}")
    checks["repetition"] = rep = repetition(probes, base_ids, cand_ids)
    if rep["fall"] > cfg.repetition:
        reasons.append(f"repetition: on {rep['probes']} open questions answered at length, {rep['candidate']:.0%} of the "
                       f"candidate's token trigrams are distinct against the base weights' {rep['base']:.0%} (a fall of "
                       f"{rep['fall']:.2f}; budget {cfg.repetition}), e.g. {rep['worst']}: {text_of[rep['worst']][:60]!r}")
    # a phrase appended to an answer cut at the length limit is past the cut: count answers that ended
    ended = [i for i in short if len(cand_ids[i]) < _limit(probes[i], cfg)]
    stamp = P.stamped_phrase([cand_text[i] for i in ended],
                             [base_text[i] for i in short if len(base_ids[i]) < _limit(probes[i], cfg)])
    checks["stamp"] = stamp
    if stamp:
        reasons.append(f"stamped phrase: {stamp['phrase']!r} in {stamp['candidate']} of {stamp['answers']} answers that "
                       f"ended within the length limit (base weights: {stamp['base']} of {stamp['base_answers']})")

    kl_mean = float(np.mean(kls)) if kls else 0.0
    worst = float(np.mean(np.array(kls) > WORST_NATS)) if kls else 0.0
    checks["kl"] = {"tokens": len(kls), "mean": kl_mean, "worst_share": worst, "max": max(kls, default=0.0)}
    if kl_mean > cfg.kl_budget:
        reasons.append(f"KL to the base weights: {kl_mean:.3f} nats/token on the general probes (budget {cfg.kl_budget})")
    if worst > cfg.kl_worst_share:
        reasons.append(f"KL to the base weights: {worst:.0%} of tokens above {WORST_NATS:g} nats "
                       f"(budget {cfg.kl_worst_share:.0%})")
    result.summary = (f"probes {len(cand_right)}/{len(checked)} right (base {len(base_right)}, lost {len(lost)}), "
                      f"KL {kl_mean:.3f} nats/token, {worst:.0%} of tokens > {WORST_NATS:g}, "
                      f"distinct trigrams {rep['candidate']:.3f} (base {rep['base']:.3f}, allowed fall {cfg.repetition:g})")
    checks["answers"] = {p.id: t[:200] for p, t in zip(probes, cand_text)}
    return _done(result, t0)


def tool_calls_kept(probes: tuple[P.Probe, ...], base_text: list[str], cand_text: list[str]) -> tuple[dict[str, Any], str | None]:
    """Tool probes on which each side made a call at all (an offered name, JSON arguments), right
    or not, and the reason to reject when the candidate made fewer. The answer check is net and
    forgiving; this one is not: an adapter must never teach the model to stop calling tools."""
    tool = [i for i, p in enumerate(probes) if p.kind == "tool"]
    base, cand = ({i for i in tool if tool_calls.parse_tool_calls(texts[i], _offered(probes[i]))[1]}
                  for texts in (base_text, cand_text))
    out = {"probes": len(tool), "base": len(base), "candidate": len(cand),
           "stopped": [probes[i].id for i in sorted(base - cand)]}
    if len(cand) >= len(base):
        return out, None
    i = min(base - cand)
    return out, (f"tool calls: the candidate calls the offered tool on {len(cand)} of {len(tool)} tool probes, the "
                 f"base weights on {len(base)}; e.g. {probes[i].id}: {cand_text[i][:60]!r}")


def _offered(probe: P.Probe) -> set[str]:
    return {t["function"]["name"] for t in probe.tools() or []}


def _done(result: GateResult, t0: float) -> GateResult:
    result.passed = not result.reasons
    result.seconds = round(time.perf_counter() - t0, 2)
    # a pass says what it saw too: the log is where a user reads how near an adapter came to a limit
    detail = result.summary if result.passed else "; ".join(result.reasons)
    log.info("gate %s in %.1fs%s", "passed" if result.passed else "REJECTED", result.seconds, f": {detail}" if detail else "")
    return result
