"""One training round, top to bottom (design §7).

  1. select judged main turns and scored GRPO groups (sampled with the live adapter in idle time,
     judge/rollouts.py) that no finished run has used (or resume the staged round), and plan
     memory: does a round on them fit beside serving, at what length (memory.py)
  2. build samples: recorded ids, reward, hinted teacher prompt; each group answer with its group
     advantage as its reward (batches.py)
  3. load the model, check its tokenizer, start from the current adapter
  4. score, once, at each turn's sampling temperature: log π_old (adapter on), log π_teacher
     (adapter off, hint in the prompt), log π_base (adapter off) for the KL term, and the
     truncated importance weight of each token against the logprobs the engine recorded
  5. optimizer steps over minibatches (the turns' for train_epochs, then whole groups' for
     grpo_epochs, so the clip acts), one sample per micro-step (a group's answers together, on
     their prompt read once, where the backend can: batches.shared_prompt), AdamW continuing from the state
     the parent adapter's round ended with; a checkpoint after every step in adapters/.staging/,
     so a kill loses at most one step and the next round resumes
  6. write adapters/NNNN/ (peft adapter + meta.json) atomically, then the database rows in one
     transaction (Store.record_round)

Reads and writes the database through Store only, and the adapter directory through AdapterDir.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..adapter_dir import OPTIMIZER_NAME, AdapterDir, AdapterDirError, fsync_dir
from ..config import Settings, ensure_home
from ..engine.chat_template import ChatTemplate
from ..store.records import RoundState, TrainEvent
from ..store.store import Store
from . import memory
from .anchors import anchor_samples
from .backend import Backend, hf_base, is_oom, load_backend, resolve_kind, sha256_file, train_tokens
from .batches import GroupError, group_plan, group_samples, groups_of, micro_steps, minibatches, shared_prompt, shared_tokens
from .loss import grpo_loss, keep_floor, kl_k3, policy_loss
from .samples import WEIGHTS, TokenizerMismatch, build, centered, check_tokenizer, gguf_template, ready_turns, turn_signal
from .scoring import round_metrics, score_group, score_sample

log = logging.getLogger("clawd.train")

KNOBS = ("train_method", "train_batch", "train_minibatch", "train_epochs", "lr", "lora_r", "lora_alpha",
         "max_train_tokens", "w_rl", "w_opd", "train_tis_cap", "train_kl_coef", "train_base", "train_backend",
         "grpo_epochs", "opd_topk", "train_anchor_coef", "train_turn_baseline", "opd_contrast",
         "grpo_spread_norm", "grpo_length_neutral", "grpo_minibatch")
MAX_GRAD_NORM = 1.0
Progress = Callable[[TrainEvent], None]


class TrainError(RuntimeError):
    """A round that cannot run; the message names the fix."""


class NoRoom(TrainError):
    """The round does not fit beside serving now, even shortened; nothing was started."""

    def __init__(self, plan: memory.Plan):
        super().__init__(f"not training now: {plan.reason}")
        self.plan = plan


class Stopped(Exception):
    """The round was told to stop between micro-steps; its last checkpoint stays for the next round."""


class Control:
    """Pause and stop between micro-steps. `go` cleared = paused; `stop` set = stop (threading or
    multiprocessing Events). `on_pause(paused)` hears when a pause takes effect and when it ends."""

    def __init__(self, go=None, stop=None, on_pause: Callable[[bool], None] | None = None):
        self.go, self.stop, self.on_pause = go, stop, on_pause or (lambda paused: None)

    def checkpoint(self) -> None:
        paused = False
        while True:
            if self.stop is not None and self.stop.is_set():
                raise Stopped()
            if self.go is None or self.go.is_set():
                if paused:
                    self.on_pause(False)
                return
            if not paused:
                paused = True
                self.on_pause(True)
            self.go.wait(0.5)


@dataclass
class RoundResult:
    run_id: int
    version: int
    path: Path
    metrics: dict[str, Any]


def run_round(settings: Settings, store: Store | None = None, backend: Backend | None = None,
              progress: Progress | None = None, control: Control | None = None,
              serving: memory.Serving | None = None, template: ChatTemplate | None = None) -> RoundResult | None:
    """Train one round; None when no turn is ready. `backend` lets a caller keep a loaded model;
    `serving` is what the daemon's engine holds (None: nothing serves beside this round);
    `template` the engine's chat template (None: read from the GGUF with llama.cpp)."""
    home = ensure_home(settings.home)
    adapters = AdapterDir(home)
    own = store is None
    store = store or Store(home / "clawd.db")
    try:
        with adapters.exclusive():
            return _round(settings, store, adapters, backend, progress or (lambda e: None), control or Control(),
                          serving or memory.Serving("cpu", 0, 0, 0, 0), template)
    except AdapterDirError as e:
        raise TrainError(str(e)) from None
    finally:
        if own:
            store.close()


def _round(settings, store, adapters: AdapterDir, backend, progress, control, serving, template) -> RoundResult | None:
    st = _load_staging(adapters)
    if st is None:
        if store.fail_unstaged_runs():  # runs killed before their first checkpoint: nothing to resume
            log.info("interrupted training run(s) marked failed")
        turn_ids = ready_turns(store, settings.train_method, settings.train_batch, settings.w_rl, settings.w_opd)
        parent = _parent(adapters)
        group_ids = store.ready_groups(parent, settings.grpo_groups) if settings.grpo_k >= 2 else []
        if not turn_ids and not group_ids:
            log.info("no judged turns or scored groups ready for %s training", settings.train_method)
            return None
        saved = {k: getattr(settings, k) for k in KNOBS} | {"train_base": str(settings.train_base or "") or None}
        st = RoundState(turn_ids, parent, saved, group_ids=group_ids)
    else:
        log.info("resuming run %d at step %d", st.run_id, st.step)
    # a resumed round keeps the settings it started with (those it predates: today's)
    knobs = Settings(**{**settings.model_dump(), **st.knobs})
    model_path = settings.resolved_model()
    sha = sha256_file(model_path)
    mem, limit = _memory_plan(knobs, store, st, backend, serving, model_path, sha)
    if st.run_id is None:  # a fresh round that fits: from here it is recorded
        st.run_id = store.start_run(settings.train_method, st.turn_ids, st.parent)
        st.limit = limit
    run_id = st.run_id
    try:
        return _train(knobs, store, adapters, backend, progress, control, st, model_path, sha, mem, template)
    except Stopped:
        log.info("run %d stopped after step %d; the next round resumes it", run_id, st.step)
        raise
    except Exception as e:
        if isinstance(e, (TokenizerMismatch, GroupError)):
            e = TrainError(str(e))
        elif is_oom(e):
            limit = st.limit or train_tokens(knobs.max_train_tokens, torch.cuda.is_available())
            e = TrainError(f"out of memory in training run {run_id}: lower max_train_tokens (now {limit}; "
                           "a micro-step holds one sample of up to that many tokens, whatever train_batch is). "
                           "Nothing was written and serving is unaffected; the next round starts this one afresh.")
        store.finish_run(run_id, "failed", error=str(e))
        shutil.rmtree(adapters.staging, ignore_errors=True)
        raise e


def _memory_plan(settings: Settings, store: Store, st: RoundState, backend: Backend | None, serving: memory.Serving,
                 model_path: Path, sha: str) -> tuple[memory.Plan, int]:
    """Whether this round fits beside serving, and the longest training sequence it may use
    (max_train_tokens, or less when the plan shrank it): logged, kept in the round's metrics, and
    NoRoom (nothing started, a staged round kept) when it does not fit at all."""
    if backend is None:
        cuda = torch.cuda.is_available()
        kind = resolve_kind(settings.train_backend, cuda)  # first: Unsloth must import before transformers
        base_dir, loaded = hf_base(settings, model_path, sha), 0
    else:  # a caller's model, already in memory: what it holds is free for this round's purposes
        cuda, kind, base_dir, loaded = backend.device.type == "cuda", backend.name, backend.base_dir, backend.resident_bytes()
    groups = groups_of(store, st)
    turns = [t for t in (store.turn(i) for i in st.turn_ids) if t is not None] + [
        replace(t, completion_ids=r.completion_ids) for g, t in groups for r in g.rollouts]
    limit = st.limit or train_tokens(settings.max_train_tokens, cuda)
    sizes = [(len(t.prompt_ids) + len(t.completion_ids), len(t.completion_ids)) for t in turns]  # (T, C) a micro-step
    if kind in ("full", "qlora"):  # their groups' answers read together on the prompt (batches.shared_prompt)
        sizes += [(n, n - len(t.prompt_ids)) for g, t in groups
                  if (n := shared_tokens(len(t.prompt_ids), [len(r.completion_ids) for r in g.rollouts])) <= limit]
    plan = memory.plan("cuda" if cuda else "cpu", memory.free_memory(cuda) + loaded, serving, memory.Shape.from_dir(base_dir),
                       four_bit=kind in ("qlora", "unsloth"), r=settings.lora_r,
                       tokens=min(limit, max((n for n, _ in sizes), default=limit)),
                       completion=max((c for _, c in sizes), default=1), may_shrink=st.run_id is None)
    d = plan.as_dict()
    log.info("memory plan (%s, %s): %s. Free %.0f MiB; serving %.0f MiB (%.0f MiB still to come); training %.0f MiB "
             "(base %.0f, LoRA+AdamW %.0f, activations %.0f, logits %.0f) at %d tokens; reserve %.0f MiB", kind, plan.device,
             plan.reason, d["free_mib"], d["serving_mib"]["weights"] + d["serving_mib"]["kv"] + d["serving_mib"]["compute"],
             d["serving_mib"]["pending"], d["training_mib"]["total"], d["training_mib"]["base"], d["training_mib"]["lora"],
             d["training_mib"]["activations"], d["training_mib"]["logits"], plan.training.tokens, d["reserve_mib"])
    if plan.decision == "wait":
        raise NoRoom(plan)
    if cuda and backend is None:  # this process allocates nothing past the plan's cap: serving keeps the rest
        torch.cuda.set_per_process_memory_fraction(max(0.0, min(1.0, plan.cap / torch.cuda.mem_get_info()[1])))
    if plan.decision == "shrink":
        log.warning("training at %d tokens instead of %d so that serving keeps its memory: %s", plan.train_tokens,
                    plan.requested_tokens, plan.reason)
        return plan, plan.train_tokens
    return plan, limit


def _train(k: Settings, store, adapters: AdapterDir, backend, progress, control, st: RoundState, model_path: Path,
           sha: str, mem: memory.Plan, template: ChatTemplate | None) -> RoundResult:
    """The round from loading to its adapter; `k`: the settings with the round's own knobs."""
    t0 = time.perf_counter()
    control.checkpoint()  # loading is seconds of CPU that cannot pause: a request waiting now goes first
    progress(TrainEvent("load", run_id=st.run_id, detail={"turns": len(st.turn_ids)}))
    if backend is None:
        backend = load_backend(k, model_path, sha)
    template = template or gguf_template(model_path)
    turns = [store.turn(i) for i in st.turn_ids]
    if any(t is None for t in turns):
        raise TrainError(f"turns {[i for i, t in zip(st.turn_ids, turns) if t is None]} are gone from the database")
    groups = groups_of(store, st)
    group_turns = [t.id for _, t in groups if t.id is not None]
    _check_not_excluded(store, st, group_turns)
    match = check_tokenizer((turns + [t for _, t in groups])[0], template, backend.encode, backend.decode)
    # the planned length (a staged round from before memory plans: the setting's)
    limit = st.limit or train_tokens(k.max_train_tokens, backend.device.type == "cuda")
    samples = [build(t, *turn_signal(store, t.id), template, backend.encode, limit, k.opd_contrast) for t in turns]
    baseline = 0.0  # what each judged turn's reward is measured against: 0, or the round's mean
    if k.train_turn_baseline:
        samples, baseline = centered(samples)
    n_turns = len(samples)  # then each group's answers, each with its group advantage as the reward
    samples += group_samples(groups, template, backend.encode, limit, k.grpo_spread_norm, k.grpo_length_neutral)
    n_trained = len(samples)  # then the anchors: the base's own answers, kept (anchors.py)
    w_rl, w_opd = (a * b for a, b in zip(WEIGHTS[k.train_method], (k.w_rl, k.w_opd)))
    kl_coef, anchor_coef = k.train_kl_coef, k.train_anchor_coef
    if anchor_coef:
        samples += anchor_samples(backend, template, k.home / "train", sha, control.checkpoint)
    # each group's answers (first sample → size) that one micro-step reads on their shared prompt
    spans = [(n_turns + sum(len(h.rollouts) for h, _ in groups[:j]), len(g.rollouts)) for j, (g, _) in enumerate(groups)]
    shared = {a: n for a, n in spans if backend.shares_prompts and shared_prompt(samples[a:a + n], limit) is not None}

    if st.old is not None and [len(o) for o in st.old] != [len(s.completion_ids) for s in samples]:
        raise TrainError("the staged round does not match its turns any more; it was discarded, run again")
    if st.lora is not None:
        backend.set_lora_state(st.lora)
    elif st.parent is not None:
        try:
            backend.load_lora(adapters.dir(st.parent))
        except ValueError as e:
            raise TrainError(f"cannot continue from adapter {st.parent}: {e}") from None
    else:
        backend.reset_lora()
    if not st.scored:  # a fresh round (or one staged before the importance weights were kept)
        scores = []
        for unit in micro_steps(list(range(len(samples))), shared):
            scores += score_group(backend, control.checkpoint, [samples[i] for i in unit], kl_coef > 0, k.train_tis_cap) \
                if len(unit) > 1 else [score_sample(backend, control.checkpoint, samples[unit[0]], w_opd > 0 and unit[0] < n_turns,
                                                    kl_coef > 0 or unit[0] >= n_trained, k.train_tis_cap, k.opd_topk)]
        st.old, st.teacher, st.base, st.tis, st.drift, st.teacher_topk = (
            [sc[key] for sc in scores] for key in ("old", "teacher", "base", "tis", "drift", "teacher_topk"))
        st.plan = (minibatches(n_turns, k.train_minibatch, k.train_epochs, seed=st.run_id or 0)
                   + group_plan([len(g.rollouts) for g, _ in groups], n_turns, k.grpo_minibatch, k.grpo_epochs,
                                 seed=st.run_id or 0))
        for j, a in enumerate(range(n_trained, len(samples))):  # the anchors, spread over the round's steps
            st.plan[j % len(st.plan)].append(a)
        _save_staging(adapters, st)  # from here a kill resumes without scoring again
    assert st.old is not None and st.teacher is not None and st.base is not None and st.tis is not None
    opt = torch.optim.AdamW(backend.lora, lr=k.lr, weight_decay=0.0)
    if st.optim is None and st.parent is not None:
        st.optim = _parent_optimizer(adapters, st.parent, k.lr)
    if st.optim is not None:
        opt.load_state_dict(st.optim)
    plan = st.plan or []
    progress(TrainEvent("start", run_id=st.run_id, step=st.step, steps=len(plan),
                        detail={"samples": len(samples), "tokenizer": match, "max_train_tokens": limit, **backend.describe()}))

    dev = backend.device
    olds, teachers, weights, bases = st.old, st.teacher, st.tis, st.base  # each a (C,) per sample

    def loss_of(i: int, logp: torch.Tensor, topk, counts: tuple[int, int, int, int]) -> torch.Tensor:
        """Sample i's share of its step's loss; logp (1, C); counts: the step's (turns, anchors, GRPO
        answer tokens, GRPO answers). A GRPO step's loss is its token mean over all its answers, or
        with grpo_answer_mean the mean of its answers' token means (grpo_loss); a turn's, its mean
        over the step's turns; an anchor's, over its anchors."""
        step_turns, step_anchors, step_tokens, step_answers = counts
        s = samples[i]
        old, teacher, tis = (x[i].to(dev)[None] for x in (olds, teachers, weights))  # (1, C)
        base = bases[i].to(dev)[None] if bases[i] is not None else None  # (1, C)
        if i < n_turns:
            return policy_loss(logp, old, teacher, torch.tensor([s.reward], device=dev), torch.ones_like(old),
                               w_rl, w_opd, tis, base, kl_coef, topk) / step_turns
        if i >= n_trained:  # an anchor: only the pull back to the base's own answer
            assert base is not None
            return anchor_coef * keep_floor(logp, base).mean() / step_anchors
        mask, reward = torch.ones_like(old), torch.tensor([s.reward], device=dev)
        if k.grpo_answer_mean:
            return grpo_loss(logp, old, reward, mask, base, kl_coef, answer_mean=True) / step_answers
        return grpo_loss(logp, old, reward, mask, base, kl_coef) * mask.sum() / step_tokens

    micro: list[float] = []  # seconds per micro-step, this process's share of the round
    for step in range(st.step, len(plan)):
        total, kl = 0.0, 0.0
        units = micro_steps(plan[step], shared)
        counts = (sum(i < n_turns for i in plan[step]), sum(i >= n_trained for i in plan[step]),
                  sum(len(samples[i].completion_ids) for i in plan[step] if n_turns <= i < n_trained),
                  sum(n_turns <= i < n_trained for i in plan[step]))
        for unit in units:
            control.checkpoint()
            t_micro = time.perf_counter()
            s = samples[unit[0]]
            top = st.teacher_topk[unit[0]] if st.teacher_topk else None  # the teacher's (ids, logprobs), each (C, K)
            topk = None
            if len(unit) > 1:  # a group's answers on their prompt, read once: one (1, C) row each
                logps = [lp[:1] for lp in backend.shared_logprobs(s.prompt_ids, [samples[i].completion_ids for i in unit],
                                                                  (s.temperature,))]
            elif top is None:
                logps = [backend.logprobs(s.ids, len(s.prompt_ids), temperature=s.temperature)[None]]  # (1, C)
            else:
                logp, at = backend.logprobs_and_at(s.ids, len(s.prompt_ids), s.temperature, top[0])  # (C,), (C, K)
                logps, topk = [logp[None]], (at[None], top[1].to(dev)[None])  # (1, C); (1, C, K) twice
            loss = torch.stack([loss_of(i, logp, topk, counts) for i, logp in zip(unit, logps)]).sum()
            loss.backward()
            total += float(loss.detach())
            for i, logp in zip(unit, logps):
                if bases[i] is not None and kl_coef and i < n_trained:
                    kl += float(kl_k3(logp.detach(), bases[i].to(dev)[None]).mean()) / (len(plan[step]) - counts[1])
            micro.append(time.perf_counter() - t_micro)  # what a request arriving now may wait for (issue 6)
        norm = torch.nn.utils.clip_grad_norm_(backend.lora, MAX_GRAD_NORM)
        # A step with no gradient (every advantage 0: a round of equal rewards under the turn
        # baseline, turns weighted 0, every token clipped in a later epoch; no KL, no anchor) is
        # skipped: AdamW's momentum, kept across rounds, would move the weights with nothing behind it.
        if float(norm) != 0.0:
            opt.step()
        opt.zero_grad(set_to_none=True)
        st.step, st.losses = step + 1, st.losses + [total]
        st.kl = st.kl + [kl]  # mean k3 to the base on this step's samples, before its update
        st.lora, st.optim = backend.lora_state(), opt.state_dict()
        _save_staging(adapters, st)
        progress(TrainEvent("step", run_id=st.run_id, step=step + 1, steps=len(plan), loss=total,
                            detail={"micro_step_s": round(max(micro[-len(units):]), 3)}))

    seconds = time.perf_counter() - t0
    metrics = round_metrics(samples, n_turns, n_trained, st, w_opd, kl_coef, seconds, backend, baseline) | {
        "max_train_tokens": limit, "memory_plan": mem.as_dict(), "shared_prompt_groups": len(shared)}
    if metrics["rollout_drift"] is not None:  # slime logs the same: it catches stale turns and token drift
        log.info("run %d: mean |log π_old − served logprob| %.4f per token, %d of %d turns served by another adapter; "
                 "importance weights mean %.3f, %.1f%% capped at %g", st.run_id, metrics["rollout_drift"],
                 metrics["stale_turns"], len(samples), metrics["tis_weight_mean"], 100 * metrics["tis_clipped"],
                 k.train_tis_cap)
    if micro:
        metrics["micro_step_s"] = {"mean": round(sum(micro) / len(micro), 3), "max": round(max(micro), 3)}
    _check_not_excluded(store, st, group_turns)  # a session excluded while this round ran: nothing of it is written
    version, path, meta = _write_adapter(adapters, store, backend, st, metrics, model_path, sha)
    assert st.run_id is not None
    store.record_round(st.run_id, version, str(path), st.parent, meta, st.turn_ids, metrics, st.group_ids)
    shutil.rmtree(adapters.staging, ignore_errors=True)
    log.info("run %d: adapter %04d from %d turns, loss %.4f → %.4f, %.0fs", st.run_id, version, len(samples),
             st.losses[0], st.losses[-1], seconds)
    progress(TrainEvent("done", run_id=st.run_id, version=version, step=st.step, steps=len(plan),
                        loss=st.losses[-1], detail={"path": str(path), **metrics}))
    return RoundResult(st.run_id, version, path, metrics)


def _parent_optimizer(adapters: AdapterDir, parent: int, lr: float) -> dict[str, Any] | None:
    """The AdamW state the parent's round ended with, so that this round continues its moments and
    step count (bias correction included) instead of starting fresh: a fresh AdamW moves every
    LoRA element by about lr at its first steps, whatever the signal, so each round would add the
    same noise-sized step everywhere. None (a fresh optimizer) when the parent kept none (trained
    before this was kept, or merged). The learning rate is today's setting, not the parent's."""
    path = adapters.optimizer(parent)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, weights_only=True)
    except Exception as e:
        log.warning("adapter %04d: its optimizer state %s is unreadable (%s); this round starts AdamW afresh",
                    parent, path, e)
        return None
    for group in state["param_groups"]:
        group["lr"] = lr
    return state


def _check_not_excluded(store: Store, st: RoundState, group_turns: list[int]) -> None:
    """`group_turns`: the turns whose prompts the round's groups answer."""
    excluded = store.excluded_turns(st.turn_ids + group_turns)
    if excluded:
        raise TrainError(f"turns {excluded} of run {st.run_id} belong to a session excluded from training since the "
                         "round began; the round is discarded and the next one selects its turns again")


def _parent(adapters: AdapterDir) -> int | None:
    """The live adapter this round continues from (publish owns `current`)."""
    version = adapters.current()
    if version is not None and not adapters.is_complete(version):
        raise TrainError(f"{adapters.root / 'current'} names version {version}, but {adapters.dir(version)} "
                         "holds no adapter: `clawd adapters use N` or `clawd adapters off` fixes it")
    return version


def _write_adapter(adapters: AdapterDir, store: Store, backend: Backend, st: RoundState, metrics: dict,
                   model_path: Path, sha: str) -> tuple[int, Path, dict]:
    """adapters/NNNN/ with its meta.json; a round killed after writing it finds it on resume."""
    if st.version is None:
        st.version = adapters.next_version(store.max_adapter_version())
        _save_staging(adapters, st)  # a kill from here on finishes this same version
    version = st.version
    written = adapters.dir(version) / "meta.json"
    if written.is_file() and (meta := json.loads(written.read_text())).get("run_id") == st.run_id:
        return version, adapters.dir(version), meta  # written before a kill; only the rows were missing
    meta = {"version": version, "parent": st.parent, "run_id": st.run_id, "method": st.knobs["train_method"],
            "turn_ids": st.turn_ids, "base_model": {"path": str(model_path), "sha256": sha},
            "hf_base": str(backend.base_dir), "settings": st.knobs, "backend": backend.describe(),
            "metrics": metrics, "created": time.time(), "versions": {"torch": torch.__version__}}

    def fill(tmp: Path) -> None:
        backend.save_lora(tmp)
        if st.optim is not None:
            torch.save(st.optim, tmp / OPTIMIZER_NAME)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))

    return version, adapters.write(version, fill), meta


# -- the round's checkpoint ------------------------------------------------------------------
def _save_staging(adapters: AdapterDir, st: RoundState) -> None:
    adapters.staging.mkdir(parents=True, exist_ok=True)
    tmp = adapters.staged_state.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        torch.save(asdict(st), f)  # a plain dict of tensors and lists: loadable with weights_only
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, adapters.staged_state)
    fsync_dir(adapters.staging)


def _load_staging(adapters: AdapterDir) -> RoundState | None:
    path = adapters.staged_state
    if not path.is_file():
        return None
    try:
        return RoundState.from_saved(torch.load(path, weights_only=True))
    except Exception as e:  # a torn file cannot happen (rename), but a version change can
        log.warning("discarding unreadable training checkpoint %s: %s", path, e)
        shutil.rmtree(adapters.staging, ignore_errors=True)
        return None
