"""Will a training round fit beside serving? A pure function of sizes (design §2, issue 18).

One machine, one device: the daemon's llama.cpp engine holds the served model, its KV caches and
its compute buffers; the trainer child would add a base model, a LoRA adapter with its gradients
and optimizer state, and the activations of one sample. `plan()` compares the two with what the
device has free and decides: the round fits, it fits once its longest training sequence is
shortened (and says so), or it waits. Serving is never the part that gives way.

Every size is in bytes; each formula names the tensor shapes it counts. The estimates count what
stays alive at the peak, the backward of one micro-step (one sample: loop.py trains one turn at a
time, or one GRPO group's answers on their prompt read once, which the round's plan counts as a
sample of the prompt plus every answer padded to the longest; no micro-batch is left to shrink),
and lean high where a kernel's workspace is not known exactly: the price of an overestimate is a
shorter round, of an underestimate an OOM.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger("clawd.train")

MiB, GiB = 2**20, 2**30
# NF4 with double quantization (bitsandbytes, QLoRA paper §3): 4 bits per weight, one absmax per
# block of 64 weights quantized to 8 bits, and one fp32 scale per 256 such blocks (plus a 256-entry
# code): 0.5 + 1/64 + 4/(64·256) bytes per weight.
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
LORA_MODULES = 7  # q, k, v, o, gate, up, down (backend.TARGETS)
# Each LoRA parameter: the fp32 weight, its fp32 gradient and AdamW's two fp32 moments.
LORA_BYTES_PER_PARAM = 4 * 4
# Never shorten training below this: a shorter window holds too little of an OpenClaw turn (its
# system prompt alone is thousands of tokens) to teach what serving will see.
MIN_TRAIN_TOKENS = 1024
STEP = 256  # a shortened length is a multiple of this
# What the estimates do not see: on CUDA the caching allocator's fragmentation and cuBLAS/cuDNN
# workspaces; on a CPU the rest of the system. A fixed floor plus a tenth of the training estimate.
RESERVE_FIXED = {"cuda": 512 * MiB, "cpu": 1 * GiB}
RESERVE_SHARE = 0.10


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer (Llama, Qwen2, Gemma, ... in Hugging Face's names)."""

    layers: int
    hidden: int  # h
    intermediate: int  # I, the MLP's inner width
    heads: int
    kv_heads: int
    head_dim: int  # d; q is heads·d wide, k and v kv_heads·d
    vocab: int  # V
    tied: bool  # lm_head shares the input embedding

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> Shape:
        cfg = cfg.get("text_config", cfg)  # multimodal configs nest the language model's
        heads = int(cfg["num_attention_heads"])
        return cls(int(cfg["num_hidden_layers"]), int(cfg["hidden_size"]), int(cfg["intermediate_size"]), heads,
                   int(cfg.get("num_key_value_heads") or heads), int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
                   int(cfg["vocab_size"]), bool(cfg.get("tie_word_embeddings", False)))

    @classmethod
    def from_dir(cls, base_dir: Path) -> Shape:
        import json

        return cls.from_hf_config(json.loads((Path(base_dir) / "config.json").read_text()))

    def _linears(self) -> list[tuple[int, int]]:
        """(in, out) of each adapted linear layer of one block: q (h → heads·d), k and v
        (h → kv_heads·d), o (heads·d → h), gate and up (h → I), down (I → h)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]

    @property
    def linear_params(self) -> int:
        return self.layers * sum(a * b for a, b in self._linears())

    @property
    def embed_params(self) -> int:
        """The input embedding (V, h), and an untied lm_head (V, h)."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def lora_params(self, r: int) -> int:
        """A (r, in) and B (out, r) on every adapted layer: r·(in + out) each."""
        return self.layers * r * sum(a + b for a, b in self._linears())

    @property
    def largest_linear(self) -> int:
        return max(a * b for a, b in self._linears())


def kv_bytes(layers: int, kv_heads: int, head_dim: int, ctx: int, dtype_bytes: int = 2) -> int:
    """llama.cpp's KV cache: K and V, each (ctx, kv_heads·head_dim) per layer, f16 by default:
    2 · layers · kv_heads · head_dim · ctx · bytes."""
    return 2 * layers * kv_heads * head_dim * ctx * dtype_bytes


def llama_compute_bytes(heads: int, vocab: int, ctx: int, ubatch: int) -> int:
    """llama.cpp's compute buffer for one ubatch, high side: the f32 attention scores of a ubatch
    against the whole context (heads, ubatch, ctx) — what it holds without flash attention — plus
    a ubatch of f32 logits (ubatch, V)."""
    return 4 * ubatch * (heads * ctx + vocab)


@dataclass(frozen=True)
class Serving:
    """What serving holds on its device. It counts against training only on the same device."""

    device: Literal["cuda", "cpu"]
    weights: int  # the GGUF's tensors on this device
    kv: int  # the serving context's KV cache and the judge's
    compute: int  # llama.cpp's compute buffers of both contexts
    resident: int  # of the above, what is already allocated, so no longer in the device's free memory

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute

    @property
    def pending(self) -> int:
        """What serving may still take: the judge's context before its first use; on a CPU the
        model's pages too, which the kernel counts as available (they are mmap'd file cache) but
        which serving would have to read back from disk if training pushed them out."""
        return max(0, self.total - self.resident)


def llama_serving(device: Literal["cuda", "cpu"], model_bytes: int, offloaded: float, layers: int, heads: int,
                  kv_heads: int, head_dim: int, vocab: int, contexts: list[tuple[int, int, bool]]) -> Serving:
    """Serving's sizes from the engine's: the GGUF file's bytes, the share of its layers on the GPU
    (llama.cpp keeps the KV cache of an offloaded layer beside it), and each context's (n_ctx,
    ubatch, already allocated): the serving context and the judge's. On CUDA the weights were
    allocated at load; on a CPU they are mmap'd page cache, which the kernel counts as free."""
    share = offloaded if device == "cuda" else 1.0
    weights = int(model_bytes * share)
    kv = [int(kv_bytes(layers, kv_heads, head_dim, n) * share) for n, _, _ in contexts]
    compute = [llama_compute_bytes(heads, vocab, n, ub) for n, ub, _ in contexts]
    resident = (weights if device == "cuda" else 0) + sum(k + c for k, c, (_, _, made) in zip(kv, compute, contexts) if made)
    return Serving(device, weights, sum(kv), sum(compute), resident)


@dataclass(frozen=True)
class Training:
    """One round's peak, by part."""

    base: int
    lora: int  # LoRA weights, gradients and AdamW moments
    activations: int  # the checkpoints, one block's recomputation, and the gradients flowing back
    logits: int  # the completion's logits and their gradient
    tokens: int
    completion: int

    @property
    def total(self) -> int:
        return self.base + self.lora + self.activations + self.logits


def training_bytes(shape: Shape, four_bit: bool, compute_bytes: int, r: int, tokens: int, completion: int) -> Training:
    """Peak memory of a micro-step on one sample of `tokens` tokens (T), `completion` (C) of them
    scored, with gradient checkpointing per decoder block (a = compute_bytes: 2 for bf16, 4 fp32).

    - base: full precision, every weight in a; 4-bit, the block linears in NF4 plus one of them
      dequantized into a at a time for its matmul, embeddings (and an untied lm_head) in a.
    - activations: each block's input (T, h) saved at its checkpoint: layers·T·h·a. During the
      backward one block is recomputed and holds, per token, its normed input (h), q, its rotated
      copy and the attention output (3·heads·d), k, v and rotated k (3·kv_heads·d; SDPA's flash
      kernels keep no (T, T) scores), the MLP's normed input (h), gate, up, act(gate), their
      product (4·I), and the incoming and outgoing gradient (2·h). peft casts each adapted
      layer's input to the fp32 of the LoRA weights when a < 4: q/k/v and gate/up read (T, h)
      (5 copies), down (T, I); plus x·Aᵀ (T, r) for the 7 layers.
    - logits: only the completion's positions are computed (logits_to_keep): (C, V) in a, its
      fp32 copy, its tempered copy and their fp32 gradient: C·V·(a + 12).
    """
    h, t, c = shape.hidden, tokens, completion
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    if four_bit:
        base = int(shape.linear_params * NF4_BYTES) + (shape.largest_linear + shape.embed_params) * compute_bytes
    else:
        base = (shape.linear_params + shape.embed_params) * compute_bytes
    checkpoints = shape.layers * t * h * compute_bytes
    block = t * (h + 3 * q + 3 * kv + h + 4 * shape.intermediate + 2 * h) * compute_bytes
    lora_inputs = (t * (5 * h + shape.intermediate) * 4 if compute_bytes < 4 else 0) + LORA_MODULES * t * r * 4
    return Training(base=base, lora=shape.lora_params(r) * LORA_BYTES_PER_PARAM,
                    activations=checkpoints + block + lora_inputs, logits=c * shape.vocab * (compute_bytes + 12),
                    tokens=t, completion=c)


@dataclass(frozen=True)
class Plan:
    device: Literal["cuda", "cpu"]
    free: int  # the device's free memory when the plan was made
    serving: Serving
    training: Training  # at the planned length (at the requested one when it waits)
    reserve: int
    requested_tokens: int  # the round's longest sequence within max_train_tokens
    train_tokens: int  # what the round may use: requested_tokens, less when shrunk, 0 when it waits
    decision: Literal["fit", "shrink", "wait"]
    reason: str

    @property
    def available(self) -> int:
        """What training may take: free memory less serving's pending part and the reserve."""
        return self.free - self.serving.pending - self.reserve

    @property
    def cap(self) -> int:
        """The most the trainer may ever hold: free memory less serving's pending part and the
        fixed reserve (the estimate's own tenth is the trainer's to use). On CUDA the trainer caps
        its allocator at this, so an estimate that fell short makes training fail, not serving."""
        return self.free - self.serving.pending - RESERVE_FIXED[self.device]

    def as_dict(self) -> dict[str, Any]:
        """The record kept with the round: sizes in MiB, the decision and why."""
        mib = lambda b: round(b / MiB, 1)  # noqa: E731
        return {"device": self.device, "decision": self.decision, "reason": self.reason,
                "requested_tokens": self.requested_tokens, "train_tokens": self.train_tokens,
                "free_mib": mib(self.free), "available_mib": mib(self.available), "reserve_mib": mib(self.reserve),
                "cap_mib": mib(self.cap),
                "serving_mib": {k: mib(v) for k, v in asdict(self.serving).items() if k != "device"}
                | {"pending": mib(self.serving.pending)},
                "training_mib": {k: mib(getattr(self.training, k)) for k in ("base", "lora", "activations", "logits", "total")},
                "completion_tokens": self.training.completion}


def plan(device: Literal["cuda", "cpu"], free: int, serving: Serving, shape: Shape, *, four_bit: bool, r: int,
         tokens: int, completion: int, may_shrink: bool = True) -> Plan:
    """Decide how a round on samples of up to `tokens` tokens (`completion` of them scored) fits
    in `free` bytes beside `serving`: as is, shortened to the longest multiple of 256 tokens ≥
    MIN_TRAIN_TOKENS that fits (the completion shortened with it, as samples.fit cuts it), or not
    at all. `may_shrink` = False for a resumed round, whose samples were scored at their length."""
    compute_bytes = 2 if device == "cuda" else 4
    if serving.device != device:  # served from the other device: no share of this one
        serving = Serving(device, 0, 0, 0, 0)

    def need(t: int) -> tuple[Training, int]:
        tr = training_bytes(shape, four_bit, compute_bytes, r, t, min(completion, max(1, t - 64)))
        return tr, RESERVE_FIXED[device] + int(RESERVE_SHARE * tr.total)

    def room(t: int) -> int:
        tr, reserve = need(t)
        return free - serving.pending - reserve - tr.total

    def made(t: int, decision, reason: str) -> Plan:
        tr, reserve = need(t or tokens)
        return Plan(device, free, serving, tr, reserve, tokens, t, decision, reason)

    beside = (free - serving.pending) / MiB  # what serving leaves, in MiB
    if room(tokens) >= 0:
        return made(tokens, "fit", f"{tokens} training tokens fit with {room(tokens) / MiB:.0f} MiB to spare")
    tr, reserve = need(tokens)
    wanted = f"{tokens} training tokens need {tr.total / MiB:.0f} MiB + {reserve / MiB:.0f} MiB reserve, {beside:.0f} MiB are free beside serving"
    if may_shrink and tokens > MIN_TRAIN_TOKENS and room(MIN_TRAIN_TOKENS) >= 0:
        lo, hi = MIN_TRAIN_TOKENS // STEP, (tokens - 1) // STEP  # room(lo·STEP) ≥ 0 > room(tokens): bisect
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if room(mid * STEP) >= 0 else (lo, mid - 1)
        return made(lo * STEP, "shrink", f"{wanted}: trained at {lo * STEP} tokens")
    why = ("a resumed round keeps the length it was scored at" if not may_shrink and tokens > MIN_TRAIN_TOKENS
           else f"not even {min(tokens, MIN_TRAIN_TOKENS)} fit")
    return made(0, "wait", f"{wanted}, and {why}")


def free_memory(cuda: bool) -> int:
    """Free bytes now on the device training would use: CUDA's (this process's context already
    made), or the RAM Linux reports available; elsewhere the physical RAM (no better reading)."""
    if cuda:
        import torch

        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
