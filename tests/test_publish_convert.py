"""peft → GGUF LoRA conversion, proven by agreement: llama.cpp (Q4_1 base + converted adapter)
and transformers (the same GGUF dequantized + the peft adapter) give the same next-token
distribution.

Tolerance: KL(hf ‖ llama.cpp) < 0.03 nats and total variation < 0.1. The floor is llama.cpp's
quantized arithmetic (Q4_1 weights × Q8 activations) against fp32: with no adapter at all the
two differ by KL ≈ 0.003, TV ≈ 0.03 on these prompts. The adapter is strong enough to matter
(KL base → adapted ≈ 1), and the same adapter written without llama's q/k row permutation
misses by an order of magnitude more, so the bound does separate right from wrong.
"""

from __future__ import annotations

import numpy as np
import pytest
from publish_util import hf_logprobs, make_adapter

import clawd.publish.convert as convert_mod
from clawd.config import bundled_model_path
from clawd.engine.engine import Engine
from clawd.engine.sampling import log_softmax
from clawd.publish.convert import BaseInfo
from clawd.publish.convert import convert_adapter as convert

PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France? Answer briefly.<|im_end|>\n<|im_start|>assistant\n",
    ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWrite a haiku about rain.<|im_end|>\n"
     "<|im_start|>assistant\nSoft"),
]


def kl_tv(p_log: np.ndarray, q_log: np.ndarray) -> tuple[float, float]:
    p, q = np.exp(p_log), np.exp(q_log)
    return float((p * (p_log - q_log)).sum()), float(np.abs(p - q).sum() / 2)


def next_token_logprobs(engine: Engine, ids: list[int]) -> np.ndarray:
    import llama_cpp

    engine.llm.reset()
    engine.llm.eval(ids)
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(engine.llm.ctx, -1), shape=(engine.n_vocab,))
    return log_softmax(logits.copy())


@pytest.fixture(scope="module")
def engine():
    return Engine(bundled_model_path(), n_ctx=512, threads=1)


def test_gguf_adapter_layout(tmp_path):
    import gguf

    make_adapter(tmp_path / "peft", sigma=0.01, seed=2)
    out = tmp_path / "a.gguf"
    summary = convert(tmp_path / "peft", BaseInfo.of(bundled_model_path()), out, dtype="f32")
    r = gguf.GGUFReader(str(out))
    assert r.fields["general.type"].contents() == "adapter"
    assert r.fields["general.architecture"].contents() == "llama"
    assert r.fields["adapter.type"].contents() == "lora"
    assert r.fields["adapter.lora.alpha"].contents() == pytest.approx(32.0)
    shapes = {t.name: t.shape.tolist() for t in r.tensors}  # ggml order: ne[0] first
    assert len(shapes) == 30 * 7 * 2 and summary["layers"] == 30
    assert shapes["blk.0.attn_q.weight.lora_a"] == [576, 16]  # A (r=16, in=576)
    assert shapes["blk.0.attn_k.weight.lora_b"] == [16, 192]  # B (out=192, r)
    assert shapes["blk.29.ffn_down.weight.lora_a"] == [1536, 16]


def test_llama_cpp_agrees_with_peft(tmp_path, engine):
    make_adapter(tmp_path / "peft", sigma=0.1, seed=3)
    base = BaseInfo.of(bundled_model_path())
    convert(tmp_path / "peft", base, tmp_path / "good.gguf", dtype="f32")
    # the same adapter without the q/k permutation llama needs: what a naive writer would produce
    saved = convert_mod.PERMUTED_QK
    try:
        convert_mod.PERMUTED_QK, convert_mod.UNPERMUTED = set(), convert_mod.UNPERMUTED | {"llama"}
        convert(tmp_path / "peft", base, tmp_path / "naive.gguf", dtype="f32")
    finally:
        convert_mod.PERMUTED_QK, convert_mod.UNPERMUTED = saved, convert_mod.UNPERMUTED - {"llama"}

    for text in PROMPTS:
        ids = engine.tokenize(text)
        hf = hf_logprobs(ids)
        engine.set_adapter(None, None)
        plain = next_token_logprobs(engine, ids)
        engine.set_adapter(tmp_path / "good.gguf", 1)
        good = next_token_logprobs(engine, ids)
        engine.set_adapter(tmp_path / "naive.gguf", 2)
        naive = next_token_logprobs(engine, ids)
        kl, tv = kl_tv(hf, good)
        assert kl < 0.03 and tv < 0.1, (text, kl, tv)
        assert hf.argmax() == good.argmax()
        assert kl_tv(plain, good)[0] > 0.3  # the adapter changes the answer distribution a lot
        assert kl_tv(hf, naive)[0] > 4 * kl  # and a wrong conversion is far outside the bound
    engine.set_adapter(None, None)


def test_refuses_what_it_cannot_convert(tmp_path):
    make_adapter(tmp_path / "peft", sigma=0.01)
    with pytest.raises(convert_mod.ConvertError, match="not known to convert"):
        convert(tmp_path / "peft", BaseInfo("mamba", 8, 8), tmp_path / "x.gguf")
