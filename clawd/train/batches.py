"""What a training round steps through: minibatches of its turns, then of its GRPO groups (issue
28; design §7), each group's answers as samples whose reward is their group advantage."""

from __future__ import annotations

import random
from dataclasses import replace

import torch

from ..store.records import RolloutGroup, RoundState, Turn
from ..store.store import Store
from .loss import group_advantages
from .samples import Sample, build


class GroupError(RuntimeError):
    """A group of the round is gone from the database."""


def minibatches(n: int, minibatch: int, epochs: int, seed: int) -> list[list[int]]:
    """Minibatches of sample indices, reshuffled each epoch; fixed by `seed` so a resume matches."""
    rng, plan = random.Random(seed), []
    for _ in range(epochs):
        order = list(range(n))
        rng.shuffle(order)
        plan += [order[i:i + minibatch] for i in range(0, n, minibatch)]
    return plan


def groups_of(store: Store, st: RoundState) -> list[tuple[RolloutGroup, Turn]]:
    """The round's rollout groups, each with the turn whose prompt its answers answer."""
    out = []
    for gid in st.group_ids:
        g = store.group(gid)
        t = store.turn(g.turn_id) if g is not None else None
        if g is None or t is None:
            raise GroupError(f"rollout group {gid} or its turn is gone from the database")
        out.append((g, t))
    return out


def group_samples(groups: list[tuple[RolloutGroup, Turn]], template, encode, limit: int,
                  spread: bool = False, length_neutral: bool = False) -> list[Sample]:
    """One sample per answer: the turn's prompt, the answer's tokens, and as its reward the
    answer's group advantage (`group_advantages`: reward minus the group's mean; with `spread`,
    in units of half the group's spread; with `length_neutral`, a sampled group's advantages less
    what its answers' lengths explain: a hindsight pair has two answers, which length would
    explain entirely). No hint: GRPO has no teacher. The engine's logprobs of a sampled answer
    weigh it as a served turn's do.

    An answer the scorer refused (Rollout.refused) keeps its reward 0 in the group's mean and spread,
    so the others are pushed up as better than it, but its own advantage is 0. Why: a loop's first
    sentences are the same words as the answers beside it, and it is long, so under the token mean
    pushing all of it down outweighs the push up (one_paragraph seed 0, stop 60: a 134-token loop at
    advantage −1.48 against its group's three other answers, 97 tokens at about +0.5, four to one).
    An empty answer (its end token alone) is not pushed down either: the push up beside it is what
    teaches the model to answer. On a round of the same 8 groups, pushed down or not, the gate's
    numbers were alike (docs/learning.md, stop 60)."""
    out = []
    for g, turn in groups:
        lengths = torch.tensor([[len(r.completion_ids) for r in g.rollouts]]) \
            if length_neutral and g.source == "sampled" and len(g.rollouts) >= 3 else None
        adv = group_advantages(torch.tensor([g.rewards]), spread, lengths)[0].tolist()  # (K,)
        for r, a in zip(g.rollouts, adv):
            answer = replace(turn, completion_ids=r.completion_ids, logprobs=r.logprobs, adapter_version=g.adapter_version)
            out.append(build(answer, 0.0 if r.refused else a, None, template, encode, limit))
    return out


def group_plan(sizes: list[int], offset: int, minibatch: int, epochs: int, seed: int) -> list[list[int]]:
    """Steps over the groups' samples (numbered from `offset`): `minibatch` whole groups a step,
    the groups reshuffled each epoch. A group is never split: its advantages sum to 0 within it."""
    starts = [offset + sum(sizes[:i]) for i in range(len(sizes))]
    return [[j for g in batch for j in range(starts[g], starts[g] + sizes[g])]
            for batch in minibatches(len(sizes), minibatch, epochs, seed + 1)]


def shared_tokens(prompt: int, completions: list[int]) -> int:
    """What a group's micro-step on its shared prompt reads: the prompt once and every answer
    padded to the longest, (B, C). The memory plan counts it as one sample of that many tokens."""
    return prompt + len(completions) * max(completions, default=0)


def shared_prompt(answers: list[Sample], limit: int) -> list[int] | None:
    """The prompt a group's answers can be read on together (`Backend.shared_logprobs`): the same
    prompt ids for all (none cut differently), at least 2 of them, and the whole micro-step within
    `limit`, the longest sequence the memory plan allows one micro-step; and no answer without a
    token. Else None: each answer is read with its own copy of the prompt."""
    prompt = answers[0].prompt_ids if answers else []
    if len(answers) < 2 or len(prompt) < 2 or any(a.prompt_ids != prompt or not a.completion_ids for a in answers):
        return None
    return prompt if shared_tokens(len(prompt), [len(a.completion_ids) for a in answers]) <= limit else None


def micro_steps(batch: list[int], shared: dict[int, int]) -> list[list[int]]:
    """A step's samples as micro-steps: one sample each, except the answers of a group read on its
    shared prompt (`shared`: first sample → the group's size), which go together. `group_plan`
    keeps a group's samples whole and in order, so they are consecutive in the batch."""
    out, i = [], 0
    while i < len(batch):
        n = shared.get(batch[i], 1)
        assert batch[i:i + n] == list(range(batch[i], batch[i] + n)), "a shared group's answers must be consecutive"
        out.append(batch[i:i + n])
        i += n
    return out
