"""Adapter hot-swap benchmark (issue 5): swap latency vs a full model reload, and generation
speed with and without an active LoRA adapter.

    python -m bench.serving.swap                  # bundled SmolLM2-135M, plus Qwen2.5 0.5B if scripts/qwen-model.sh gives it
    python -m bench.serving.swap --model X.gguf --threads 2 --swaps 20 --tokens 96

1. Swap: `Engine.set_adapter` alternating between two r=16 adapters on all 7 projections (load
   the GGUF adapter, set it on the serving context, free the old one), median of --swaps. The
   re-prefill every change of weights needs is not counted (design §12); neither is it in the
   reload, which is `Llama(...)` on the same file with the page cache warm (its best case).
2. Generation tok/s (tokens after the first / time after the first), greedy, same prompt, base
   weights vs an active adapter; median of 3, interleaved.
The adapters are random (A kaiming-uniform, B ~ N(0, 0.01)) in peft's file layout, made from the
base's shapes and converted with clawd.publish.convert — speed does not depend on their values.
Results go to bench/out/swap.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from clawd.config import bundled_model_path
from clawd.engine.engine import Engine, GenInfo, Sampling
from clawd.publish.convert import BaseInfo, convert_adapter

ROOT = Path(__file__).resolve().parents[2]

PROMPT = "Write a short story about a lighthouse keeper and the night the lamp went out."


def random_peft(out: Path, meta: dict, r: int = 16, seed: int = 0) -> Path:
    """A peft-layout LoRA (adapter_config.json + adapter_model.safetensors) for this base."""
    arch = meta["general.architecture"]
    n_layer, n_embd = int(meta[f"{arch}.block_count"]), int(meta[f"{arch}.embedding_length"])
    n_ff, n_head = int(meta[f"{arch}.feed_forward_length"]), int(meta[f"{arch}.attention.head_count"])
    n_kv = int(meta.get(f"{arch}.attention.head_count_kv", n_head))
    d_head = int(meta.get(f"{arch}.attention.key_length", n_embd // n_head))
    shapes = {"self_attn.q_proj": (n_head * d_head, n_embd), "self_attn.k_proj": (n_kv * d_head, n_embd),
              "self_attn.v_proj": (n_kv * d_head, n_embd), "self_attn.o_proj": (n_embd, n_head * d_head),
              "mlp.gate_proj": (n_ff, n_embd), "mlp.up_proj": (n_ff, n_embd), "mlp.down_proj": (n_embd, n_ff)}
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(n_layer):
        for mod, (o, i) in shapes.items():
            stem = f"base_model.model.model.layers.{layer}.{mod}"
            tensors[f"{stem}.lora_A.weight"] = rng.uniform(-1, 1, (r, i)).astype(np.float32) / np.sqrt(i)
            tensors[f"{stem}.lora_B.weight"] = rng.normal(0, 0.01, (o, r)).astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": 2 * r, "peft_type": "LORA",
                                                         "target_modules": [m.split(".")[1] for m in shapes]}))
    return out


def tok_per_s(engine: Engine, prompt: list[int], tokens: int) -> float:
    info = GenInfo()
    with engine.lock.user():
        engine.llm.reset()
        t_first, n = None, 0
        for _ in engine.generate(prompt, Sampling(temperature=0.0, seed=0, max_tokens=tokens), info):
            n += 1
            if t_first is None:
                t_first = time.perf_counter()
        return (n - 1) / (time.perf_counter() - t_first)


def bench(model: Path, threads: int, swaps: int, tokens: int) -> dict:
    print(f"== {model.name}", flush=True)
    engine = Engine(model, n_ctx=2048, threads=threads)
    meta = engine.llm.metadata
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for seed in (1, 2):
            peft = random_peft(Path(tmp) / f"peft{seed}", meta, seed=seed)
            files.append(Path(tmp) / f"a{seed}.gguf")
            summary = convert_adapter(peft, BaseInfo.of(model), files[-1])
        times = [engine.set_adapter(files[i % 2], i % 2 + 1) for i in range(swaps + 1)][1:]
        swap = statistics.median(t["total_s"] for t in times)
        from llama_cpp import Llama

        reloads = []
        for _ in range(3):
            t0 = time.perf_counter()
            llm = Llama(model_path=str(model), n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False)
            reloads.append(time.perf_counter() - t0)
            del llm
        reload = statistics.median(reloads)
        prompt = engine.tokenize(engine.template.render([{"role": "user", "content": PROMPT}], None))
        runs: dict[str, list[float]] = {"base": [], "adapter": []}
        for _ in range(3):  # interleaved, so a change in the machine's load hits both alike
            engine.set_adapter(files[0], 1)
            runs["adapter"].append(tok_per_s(engine, prompt, tokens))
            engine.set_adapter(None, None)
            runs["base"].append(tok_per_s(engine, prompt, tokens))
        base, with_adapter = statistics.median(runs["base"]), statistics.median(runs["adapter"])
    res = {"model": str(model), "threads": threads, "adapter_mb": round(summary["bytes"] / 1e6, 1),
           "swap_ms": round(swap * 1e3, 2),
           "swap_parts_ms": {k: round(statistics.median(t[k] for t in times) * 1e3, 2) for k in ("load_s", "set_s", "free_s")},
           "reload_ms": round(reload * 1e3, 1), "reload_over_swap": round(reload / swap, 1),
           "tok_s_base": round(base, 1), "tok_s_adapter": round(with_adapter, 1),
           "adapter_slowdown_pct": round(100 * (1 - with_adapter / base), 1)}
    print(json.dumps(res, indent=2), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, action="append", help="GGUF (repeatable); default bundled + Qwen if present")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--swaps", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=96)
    ns = ap.parse_args()
    models = ns.model or [bundled_model_path()]
    qwen = ROOT / "scripts/qwen-model.sh"
    if not ns.model and qwen.is_file():
        got = subprocess.run(["bash", str(qwen)], capture_output=True, text=True, check=False)
        if got.returncode == 0 and got.stdout.strip():
            models.append(Path(got.stdout.strip().splitlines()[-1]))
    results = [bench(m, ns.threads, ns.swaps, ns.tokens) for m in models]
    out = ROOT / "bench/out/swap.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"results": results, "at": time.time()}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
