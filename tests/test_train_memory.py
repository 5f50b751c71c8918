"""The one-device memory plan (clawd/train/memory.py, issue 18): pure arithmetic, no model.

Shapes are the published configs' (Llama-3.1-8B, Llama-3.2-3B, Qwen2.5-0.5B); file sizes are the
Q4_K_M GGUFs'. Each card's free memory is what the trainer child would read once the daemon has
loaded its model: the card, less a desktop's ~600 MiB, less what serving holds, less the child's
own CUDA context (~500 MiB, made by the reading itself).
"""

from __future__ import annotations

import pytest

from clawd.train.memory import (
    MIN_TRAIN_TOKENS,
    NF4_BYTES,
    STEP,
    GiB,
    MiB,
    Serving,
    Shape,
    kv_bytes,
    llama_serving,
    plan,
    training_bytes,
)

pytestmark = pytest.mark.fast

LLAMA_8B = Shape.from_hf_config({"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                                 "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                                 "tie_word_embeddings": False})
LLAMA_3B = Shape.from_hf_config({"num_hidden_layers": 28, "hidden_size": 3072, "intermediate_size": 8192,
                                 "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128,
                                 "vocab_size": 128256, "tie_word_embeddings": True})
QWEN_05B = Shape(layers=24, hidden=896, intermediate=4864, heads=14, kv_heads=2, head_dim=64, vocab=151936, tied=True)
JUDGE = (3088, 256, False)  # the judge's context (judge_budget_tokens + 16), not made yet


def served(shape: Shape, device: str, model_bytes: int, ctx: int) -> Serving:
    return llama_serving(device, model_bytes, 1.0, shape.layers, shape.heads, shape.kv_heads, shape.head_dim,
                         shape.vocab, [(ctx, 512, True), JUDGE])


def card_free(card_mib: int, serving: Serving) -> int:
    return card_mib * MiB - 600 * MiB - serving.resident - 500 * MiB


def test_shapes_count_the_published_parameters():
    # linear layers + embeddings (+ lm_head when untied) + RMSNorm weights (2 per block, 1 final)
    norms = lambda s: (2 * s.layers + 1) * s.hidden  # noqa: E731
    assert LLAMA_8B.linear_params + LLAMA_8B.embed_params + norms(LLAMA_8B) == 8_030_261_248
    assert LLAMA_3B.linear_params + LLAMA_3B.embed_params + norms(LLAMA_3B) == 3_212_749_824
    # r=16 on 7 projections of 32 blocks: 16·(2·4096 + 2·(4096+1024) + 2·(4096+14336) + 14336+4096) per block
    assert LLAMA_8B.lora_params(16) == 32 * 16 * 81920 == 41_943_040


def test_kv_cache_is_two_tensors_per_layer_at_f16():
    # 8B at OpenClaw's 32k context: 2 · 32 layers · 8 kv heads · 128 · 32768 · 2 bytes = 4 GiB
    assert kv_bytes(32, 8, 128, 32768) == 4 * GiB
    s = served(LLAMA_8B, "cuda", 4_920_734_016, 32768)
    assert s.kv == 4 * GiB + kv_bytes(32, 8, 128, 3088)
    assert s.pending == kv_bytes(32, 8, 128, 3088) + 4 * 256 * (32 * 3088 + 128256)  # the judge's, still to come


def test_24gb_card_serving_8b_q4_k_m_trains_4bit_shortened():
    s = served(LLAMA_8B, "cuda", 4_920_734_016, 32768)
    free = card_free(24564, s)  # an RTX 4090's 24564 MiB: ~11.5 GiB free beside serving
    assert 11 * GiB < free < 12.5 * GiB
    p = plan("cuda", free, s, LLAMA_8B, four_bit=True, r=16, tokens=16384, completion=1024)
    # 4-bit base: 6.98e9 linear weights in NF4 (3.6 GB) + bf16 embedding and lm_head (2.1 GB)
    assert p.training.base == pytest.approx(6_979_321_856 * NF4_BYTES + (1_050_673_152 + 14336 * 4096) * 2, rel=1e-9)
    assert p.training.lora == 41_943_040 * 16  # fp32 weight, gradient, two AdamW moments
    assert p.decision == "shrink" and "16384 training tokens need" in p.reason
    assert MIN_TRAIN_TOKENS <= p.train_tokens < 16384 and p.train_tokens % STEP == 0
    assert p.training.total <= p.available  # what it trains at fits (available: free less pending and reserve)
    assert p.cap == free - s.pending - 512 * MiB and p.available < p.cap  # the trainer's hard limit on CUDA
    longer = plan("cuda", free, s, LLAMA_8B, four_bit=True, r=16, tokens=p.train_tokens + STEP, completion=1024)
    assert longer.decision == "shrink"  # and the next step up would not: the longest length that fits
    assert p.as_dict()["train_tokens"] == p.train_tokens and p.as_dict()["training_mib"]["total"] > 9000
    # the same round in bf16 (16 GB of weights) cannot fit beside serving at any length: why it is 4-bit
    assert plan("cuda", free, s, LLAMA_8B, four_bit=False, r=16, tokens=16384, completion=1024).decision == "wait"


def test_12gb_card_serving_3b_waits_at_32k_context_and_trains_at_8k():
    long = served(LLAMA_3B, "cuda", 2_019_377_696, 32768)  # KV 3.5 GiB, f32 attention scores at 32k 1.7 GiB
    p = plan("cuda", card_free(12288, long), long, LLAMA_3B, four_bit=True, r=16, tokens=16384, completion=1024)
    assert p.decision == "wait" and p.train_tokens == 0 and f"not even {MIN_TRAIN_TOKENS} fit" in p.reason
    short = served(LLAMA_3B, "cuda", 2_019_377_696, 8192)
    p = plan("cuda", card_free(12288, short), short, LLAMA_3B, four_bit=True, r=16, tokens=16384, completion=1024)
    assert p.decision == "shrink" and 2048 <= p.train_tokens < 16384
    # a round whose turns are short needs no shrinking at all
    p = plan("cuda", card_free(12288, short), short, LLAMA_3B, four_bit=True, r=16, tokens=1500, completion=300)
    assert p.decision == "fit" and p.train_tokens == 1500


def test_cpu_ram_counts_the_mmapped_model_as_servings():
    s = llama_serving("cpu", 491_400_064, 0.0, 24, 14, 2, 64, 151936, [(32768, 512, True), JUDGE])
    assert s.weights == 491_400_064 and s.pending >= s.weights  # page cache the kernel calls available
    fp32 = training_bytes(QWEN_05B, False, 4, 16, 8192, 512)
    assert fp32.base == (QWEN_05B.linear_params + QWEN_05B.embed_params) * 4  # 2.0 GB
    assert fp32.logits == 512 * 151936 * 16  # (C, V) in fp32, its tempered copy, two gradients
    roomy = plan("cpu", 9 * GiB, s, QWEN_05B, four_bit=False, r=16, tokens=8192, completion=512)
    assert roomy.decision == "fit" and roomy.train_tokens == 8192
    tight = plan("cpu", 6 * GiB, s, QWEN_05B, four_bit=False, r=16, tokens=8192, completion=512)
    assert tight.decision == "shrink" and tight.train_tokens < 8192
    assert plan("cpu", 6 * GiB, s, QWEN_05B, four_bit=True, r=16, tokens=8192, completion=512).decision == "fit"
    assert plan("cpu", 4 * GiB, s, QWEN_05B, four_bit=True, r=16, tokens=8192, completion=512).decision == "wait"


def test_resumed_round_keeps_its_length_or_waits():
    s = llama_serving("cpu", 491_400_064, 0.0, 24, 14, 2, 64, 151936, [(32768, 512, True), JUDGE])
    p = plan("cpu", 6 * GiB, s, QWEN_05B, four_bit=False, r=16, tokens=8192, completion=512, may_shrink=False)
    assert p.decision == "wait" and "resumed round" in p.reason


def test_serving_on_the_other_device_takes_none_of_this_one():
    on_gpu = served(LLAMA_3B, "cuda", 2_019_377_696, 32768)
    p = plan("cpu", 32 * GiB, on_gpu, LLAMA_3B, four_bit=False, r=16, tokens=2048, completion=256)  # 12.8 GB fp32
    assert p.serving.total == 0 and p.decision == "fit"
