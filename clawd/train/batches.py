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
    weigh it as a served turn's do."""
    out = []
    for g, turn in groups:
        lengths = torch.tensor([[len(r.completion_ids) for r in g.rollouts]]) \
            if length_neutral and g.source == "sampled" and len(g.rollouts) >= 3 else None
        adv = group_advantages(torch.tensor([g.rewards]), spread, lengths)[0].tolist()  # (K,)
        for r, a in zip(g.rollouts, adv):
            answer = replace(turn, completion_ids=r.completion_ids, logprobs=r.logprobs, adapter_version=g.adapter_version)
            out.append(build(answer, a, None, template, encode, limit))
    return out


def group_plan(sizes: list[int], offset: int, minibatch: int, epochs: int, seed: int) -> list[list[int]]:
    """Steps over the groups' samples (numbered from `offset`): `minibatch` whole groups a step,
    the groups reshuffled each epoch. A group is never split: its advantages sum to 0 within it."""
    starts = [offset + sum(sizes[:i]) for i in range(len(sizes))]
    return [[j for g in batch for j in range(starts[g], starts[g] + sizes[g])]
            for batch in minibatches(len(sizes), minibatch, epochs, seed + 1)]
