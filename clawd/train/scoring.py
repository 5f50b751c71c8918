"""What a training round holds fixed for each sample, scored once before its first step
(`score_sample`), and what it records when it ends (`round_metrics`, meta.json and train_runs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..store.records import RoundState
from .backend import Backend
from .loss import tis_weight
from .samples import Sample


def _scored(checkpoint: Callable[[], None], score: Callable[[], torch.Tensor]) -> torch.Tensor:
    """One scoring forward pass, paused like a micro-step: a round's scoring is up to 3 passes per turn."""
    checkpoint()
    return score().cpu()


@torch.no_grad()
def score_sample(backend: Backend, checkpoint: Callable[[], None], s: Sample, teacher: bool, base: bool, cap: float,
           topk: int) -> dict[str, Any]:
    """What the update holds fixed for one sample, each (C,) at the turn's temperature T:

    - old: log π_old, the adapter at the start of the update;
    - teacher: the base weights with the hint in the prompt (= old without a hint, or for rl); with
      a null prompt (opd_contrast), that minus the teacher on it, plus old;
    - teacher_topk: with `topk` > 0 and a hint, the teacher's `topk` likeliest tokens at each
      position, (ids, logprobs), each (C, topk), from the same forward pass; else None;
    - base: the base weights on the served prompt, for the KL term (None when it is off);
    - tis: min(π_old / π_served, cap) per token. The engine records each token's logprob at T = 1
      (engine.py, Step.logprob), whatever T it sampled at, so the ratio is taken at T = 1 from
      the same forward pass: exact for T = 1, a proxy for the tempered ratio otherwise. A turn
      without its recorded logprobs gets weight 1.
    - drift: (Σ|log π_old − recorded logprob| at T = 1, tokens, tokens whose weight hit the cap):
      near 0 for a turn this adapter served; large for stale turns, or when trainer and engine
      disagree on the tokens (an off-by-one, a tokenizer or a base model that drifted).
    """
    n = len(s.prompt_ids)
    old, old_t1 = _scored(checkpoint, lambda: backend.logprobs_at(s.ids, n, (s.temperature, 1.0)))  # (C,), (C,)
    out = {"old": old, "teacher": old, "base": None, "tis": torch.ones_like(old), "drift": None, "teacher_topk": None}
    if teacher and s.teacher_ids is not None and s.teacher_prompt_ids is not None:
        ids, start = s.teacher_ids, len(s.teacher_prompt_ids)
        if topk:
            checkpoint()
            lp, top_ids, top_lp = backend.teacher_topk(ids, start, topk, s.temperature)
            out["teacher"], out["teacher_topk"] = lp.cpu(), (top_ids.cpu(), top_lp.cpu())
        else:
            out["teacher"] = _scored(checkpoint, lambda: backend.logprobs(ids, start, adapter=False,
                                                                       temperature=s.temperature))
            null_ids, null_prompt = s.null_ids, s.null_prompt_ids
            if null_ids is not None and null_prompt is not None:
                # opd_contrast: the loss's A_t = w_opd · (teacher − old) is to read log π_T(a_t | x, h) −
                # log π_T(a_t | x, h₀), h₀ the hint with the user's words emptied (hints.null_hint): what
                # the words add, not the teacher's reaction to any complaint. So held as teacher − null + old.
                null = _scored(checkpoint, lambda: backend.logprobs(null_ids, len(null_prompt), adapter=False,
                                                                    temperature=s.temperature))
                out["teacher"] = out["teacher"] - null + old  # (C,)
    if base:
        out["base"] = _scored(checkpoint, lambda: backend.logprobs(s.ids, n, adapter=False, temperature=s.temperature))
    return _weighed(out, old_t1, s, cap)


@torch.no_grad()
def score_group(backend: Backend, checkpoint: Callable[[], None], answers: list[Sample], base: bool,
                cap: float) -> list[dict[str, Any]]:
    """`score_sample` for the answers of one group, read on their shared prompt (batches.shared_prompt;
    `Backend.shared_logprobs`): the prompt once per pass instead of once per answer. A group has no
    teacher (GRPO's answers carry no hint), so teacher = old."""
    prompt, completions, temperature = answers[0].prompt_ids, [a.completion_ids for a in answers], answers[0].temperature
    assert all(a.temperature == temperature for a in answers), "a group's answers share their turn's temperature"
    checkpoint()
    old = [x.cpu() for x in backend.shared_logprobs(prompt, completions, (temperature, 1.0))]  # each (2, C)
    based: list[torch.Tensor | None] = [None] * len(answers)
    if base:
        checkpoint()
        based = [x[0].cpu() for x in backend.shared_logprobs(prompt, completions, (temperature,), adapter=False)]
    return [_weighed({"old": o[0], "teacher": o[0], "base": b, "tis": torch.ones_like(o[0]), "drift": None,
                      "teacher_topk": None}, o[1], a, cap) for a, o, b in zip(answers, old, based)]


def _weighed(out: dict[str, Any], old_t1: torch.Tensor, s: Sample, cap: float) -> dict[str, Any]:
    """The scores with the sample's importance weights against the engine's logprobs, where recorded."""
    if s.rollout_logprobs is not None:
        rollout = torch.tensor(s.rollout_logprobs, dtype=old_t1.dtype)  # (C,)
        out["tis"] = tis_weight(old_t1, rollout, cap)
        out["drift"] = (float((old_t1 - rollout).abs().sum()), len(rollout), int((out["tis"] >= cap).sum()))
    return out


def round_metrics(samples: list[Sample], n_turns: int, n_trained: int, st: RoundState, w_opd: float, kl_coef: float,
                  seconds: float, backend: Backend, baseline: float = 0.0) -> dict[str, Any]:
    """The round's record (meta.json, train_runs.metrics); samples[n_turns:n_trained] are the groups'
    answers, whose `reward` is their group advantage, and samples[n_trained:] the anchors. The turns'
    rewards are recorded as the user or judge gave them: `baseline` (the mean they were centered on,
    `samples.centered`) added back."""
    assert st.teacher is not None and st.old is not None and st.tis is not None and st.drift is not None
    plan = st.plan or []
    opd = [float((t - o).mean()) for s, t, o in zip(samples, st.teacher, st.old) if s.teacher_ids is not None and w_opd]
    tokens = sum(len(samples[i].ids) for batch in plan for i in batch)
    drift = [d for d in st.drift if d is not None]
    n = sum(d[1] for d in drift)
    weights = sum(float(w.sum()) for w, d in zip(st.tis, st.drift) if d is not None)
    adv = [abs(s.reward) for s in samples[n_turns:n_trained]]
    turn_rewards = [s.reward + baseline for s in samples[:n_turns]]
    return {"samples": len(samples), "rewards": turn_rewards, "turn_baseline": baseline,
            "groups": len(st.group_ids), "group_answers": len(adv), "anchors": len(samples) - n_trained,
            "advantage_mean_abs": round(sum(adv) / len(adv), 4) if adv else None,
            "advantage_max_abs": round(max(adv), 4) if adv else None,
            "temperatures": [s.temperature for s in samples],
            "stale_turns": sum(s.adapter_version != st.parent for s in samples[:n_trained]),
            "rollout_drift": sum(d[0] for d in drift) / n if n else None,
            "tis_weight_mean": weights / n if n else None, "tis_clipped": sum(d[2] for d in drift) / n if n else None,
            "hints_cut": sum(s.hint_cut for s in samples), "system_prompt_cut": sum(s.system_cut > 0 for s in samples),
            "kl_to_base": st.kl if kl_coef else None,
            "mean_reward": sum(turn_rewards) / len(turn_rewards) if turn_rewards else None, "opd_samples": len(opd),
            "mean_opd_advantage": sum(opd) / len(opd) if opd else None,
            "opd_topk_samples": sum(t is not None for t in st.teacher_topk or []), "losses": st.losses, "steps": len(plan),
            "tokens_trained": tokens, "cut_tokens": sum(s.cut for s in samples), "seconds": round(seconds, 2),
            "peak_memory_mb": round(backend.peak_memory_mb(), 1), "backend": backend.name}


# -- output ----------------------------------------------------------------------------------
