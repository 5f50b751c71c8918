"""A GRPO group's answers read on their prompt once (Backend.shared_logprobs): the KV cache it runs
on, the switch that lets transformers keep that cache under gradient checkpointing, and the probe
at load that decides whether this model and this transformers reproduce reading each answer whole.
Imported by the trainer child only, like backend.py."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

log = logging.getLogger("clawd.train")


@functools.cache
def prompt_cache() -> type:
    """The KV cache `shared_logprobs` runs on: a DynamicCache that gradient checkpointing can
    replay. Checkpointing recomputes each decoder block in the backward pass, and a plain cache
    would take the recomputed keys a second time. Recording (the prompt's pass), each layer keeps
    its first (k, v), (1, kv_heads, P − 1, d), and returns the (k, v) it is given, recomputed or
    not. Frozen (`frozen()`, the answers' pass), it returns the prompt's (k, v) expanded to the
    batch, then the answers' own, (B, kv_heads, P − 1 + C, d), and keeps nothing new, so a replay
    reads exactly what the first pass read. Its layers hold the prompt, so the model's positions
    (P − 1 onward) and causal mask ((C, P − 1 + C)) come out as for any cache of P − 1 tokens."""
    from transformers import DynamicCache

    class PromptCache(DynamicCache):
        def __init__(self, prompt: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None):
            super().__init__()
            self.prompt, self.is_frozen = prompt if prompt is not None else {}, prompt is not None
            for i, (k, v) in sorted(self.prompt.items()):
                super().update(k, v, i)

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            if self.is_frozen:
                k, v = self.prompt[layer_idx]
                b = key_states.shape[0]
                return (torch.cat([k.expand(b, -1, -1, -1), key_states], -2),
                        torch.cat([v.expand(b, -1, -1, -1), value_states], -2))
            self.prompt.setdefault(layer_idx, (key_states, value_states))
            return key_states, value_states

        def frozen(self) -> PromptCache:
            return PromptCache(self.prompt)

    return PromptCache


@contextmanager
def cache_under_checkpointing(model: Any) -> Iterator[None]:
    """Let the decoder blocks keep a cache under gradient checkpointing, for this forward pass.
    transformers drops a block's cache when it checkpoints, because a plain cache would take the
    recomputed keys twice; `prompt_cache` is one a replay reads exactly as the first pass did,
    which is what `_can_checkpoint_with_cache` says of a block. The recompute in the backward
    pass reuses the arguments of this forward, cache included."""
    blocks = [m for m in model.modules() if hasattr(type(m), "_can_checkpoint_with_cache")]
    for m in blocks:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m in blocks:
            del m._can_checkpoint_with_cache


def probe_shared_prompts(backend: Any) -> bool:  # a backend.Backend (typed Any: backend.py imports this module)
    """Whether `shared_logprobs` gives what reading each answer whole gives, values and
    gradients, on this model and this transformers: a few tokens forward and back, once at load.
    A version that drops the cache under gradient checkpointing (each answer would see no
    prompt: logprobs off by nats), or replays it twice (an error in the backward pass), fails,
    and every answer is read whole. The tolerance is far above bf16's rounding of the same sums
    and far below what either failure does."""
    ids = backend.encode("The quick brown fox jumps over the lazy dog, and then it runs home to sleep.")[:16]
    prompt, answers = ids[:8], [ids[8:11], ids[8:16]]
    try:
        got: list[torch.Tensor] = []
        want: list[torch.Tensor] = []
        for out, read in ((got, lambda: backend.shared_logprobs(prompt, answers, (1.0,))),
                          (want, lambda: [backend.logprobs_at(prompt + a, len(prompt), (1.0,)) for a in answers])):
            lps = read()
            torch.stack([x.sum() for x in lps]).sum().backward()
            out += [torch.cat([x.detach().flatten() for x in lps]),
                    torch.cat([p.grad.flatten() if p.grad is not None else torch.zeros(p.numel(), device=p.device)
                               for p in backend.lora])]
            backend.model.zero_grad(set_to_none=True)
        ok = bool((got[0] - want[0]).abs().max() < 0.05) and bool(
            (got[1] - want[1]).norm() <= 0.05 * want[1].norm() + 1e-6)
        why = "" if ok else f"logprobs differ by up to {float((got[0] - want[0]).abs().max()):.3g}"
    except Exception as e:  # noqa: BLE001 - any failure means: read each answer whole
        ok, why = False, f"{type(e).__name__}: {str(e)[:200]}"
        backend.model.zero_grad(set_to_none=True)
    if not ok:
        log.warning("GRPO groups: each answer is read with its own copy of the prompt (the shared prompt "
                    "does not reproduce it here: %s)", why)
    return ok
