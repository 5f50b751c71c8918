"""The device check's Python half (issue 18); scripts/device-check.sh builds llama.cpp for this GPU
first and documents what travels. Each phase is timed; one JSON goes to stdout (and $OUT).

  python3 scripts/device_check.py WORK --llama-src DIR --tokenizer DIR [--build-s N] [--cpu]

1. model: a random-weight Llama from scripts/device-model.json (seeded, made on the GPU) with the
   bundled SmolLM2's tokenizer, saved as a Hugging Face checkpoint, converted to GGUF bf16 by the
   vendored convert_hf_to_gguf.py, and quantized to Q4_K_M by llama.cpp. The bf16 file is what
   the loop serves: its weights are the checkpoint's, so the trainer's base (train_base) matches it.
2. serve: tok/s of prompt and generation for both files on the CUDA engine (clawd.engine.Engine).
3. train: one QLoRA round of clawd's own loop in the trainer child the daemon starts, with the
   serving engine's footprint for its memory plan; the trainer's peak (torch) and the device's
   (NVML, serving included) against the plan's estimate.
4. swap: the adapter converted to a GGUF LoRA, then hot-swapped on and off while one client
   streams greedy requests back to back: each must be the answer of the weights it started on.
5. agree: next-token distributions at the trained turns' completion positions, llama.cpp (CUDA,
   bf16 + adapter) against transformers + peft (fp32 + adapter); a conversion without llama's q/k
   row permutation, and the trainer's own 4-bit view, for scale.

Processes. On the device image (torch 2.11 cu130, numpy 2.5, llama.cpp built there with CUDA;
first run 2026-12-04) torch and llama.cpp could not share a process: with torch imported, an
engine died at its first model load, and torch imported after llama.cpp aborted ("free(): invalid
pointer"); an engine made after numpy alone was imported died in its tokenizer's setup too. So
this process imports llama_cpp first and never torch; what needs torch (building the checkpoint,
the transformers side of the agreement) runs in a child of this script (`--torch-phase`), and the
round in the trainer child, started as the daemon starts it: with the engine's chat template, so
that it never loads llama.cpp either.

`--cpu` rehearses every phase here, on a CPU, with a tiny model of the same architecture (3 minutes
on 2 cores): what a device session should never be the first to find. With .device/ made by
scripts/device-prepare.sh, and sentencepiece installed (the converter imports it):

  mkdir -p /tmp/dc && tar -xzf .device/llama-cpp-python-0.3.36-trimmed.tar.gz -C /tmp/dc \
    && tar -xzf .device/payload.tar.gz -C /tmp/dc tokenizer
  python3 scripts/device_check.py /tmp/dc/work --cpu --tokenizer /tmp/dc/tokenizer \
    --llama-src /tmp/dc/llama_cpp_python-0.3.36/vendor/llama.cpp
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import llama_cpp  # before numpy (see "Processes" above); isort keeps it there
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout: bench.* imports
SWAPS, TURNS, PROMPT_WORDS = 20, 8, 700
MODEL_CONFIG = ROOT / "scripts/device-model.json"
TINY = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64}  # --cpu: the same architecture, 14e6 parameters


def timed(report: dict, name: str):
    """Run one phase; its result (or its error) and seconds go into report[name]."""
    def wrap(fn):
        t = time.perf_counter()
        try:
            report[name] = fn()
        except Exception as e:
            report[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
        report[name] = {**(report[name] or {}), "seconds": round(time.perf_counter() - t, 1)}
        print(f"[device-check] {name}: {json.dumps(report[name])[:400]}", file=sys.stderr, flush=True)
        return report[name]
    return wrap


def torch_phase(args: argparse.Namespace, phase: str, adapter: Path | None = None) -> dict:
    """Run `phase` (a function below taking (work, args)) in a child process, where torch may load."""
    cmd = [sys.executable, __file__, str(args.work), "--torch-phase", phase, "--llama-src", str(args.llama_src),
           "--tokenizer", str(args.tokenizer), *(["--cpu"] if args.cpu else []),
           *(["--adapter", str(adapter)] if adapter else [])]
    out = args.work / f"{phase}.json"
    out.unlink(missing_ok=True)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"the {phase} child exited with {done.returncode} (its stderr is above)")
    return json.loads(out.read_text())


def hf_checkpoint(work: Path, args: argparse.Namespace) -> dict:
    """(torch child) The random-weight checkpoint in work/hf, and what this torch sees."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    cfg = {k: v for k, v in json.loads(MODEL_CONFIG.read_text()).items() if not k.startswith("_")}
    cfg |= TINY if args.cpu else {}
    torch.manual_seed(0)
    with torch.device(args.device):  # initializing 1e9 weights on a CPU takes minutes
        model = LlamaForCausalLM(LlamaConfig(**cfg))
    n = sum(p.numel() for p in model.parameters())
    model.to(torch.bfloat16).save_pretrained(str(work / "hf"))
    AutoTokenizer.from_pretrained(str(args.tokenizer)).save_pretrained(str(work / "hf"))
    cuda = args.device == "cuda"
    return {"params": n, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "capability": ".".join(map(str, torch.cuda.get_device_capability(0))) if cuda else None}


def build_model(args: argparse.Namespace) -> dict:
    from clawd.publish.merge import quantize

    work, llama_src = args.work, args.llama_src
    info = torch_phase(args, "hf_checkpoint")
    # the converter must import its own gguf-py, not the PyPI gguf clawd uses (design §12)
    env = {**os.environ, "PYTHONPATH": f"{llama_src / 'gguf-py'}:{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run([sys.executable, str(llama_src / "convert_hf_to_gguf.py"), str(work / "hf"), "--outtype", "bf16",
                    "--outfile", str(work / "model-bf16.gguf")], env=env, check=True, stdout=subprocess.DEVNULL)
    import gguf

    q_s = quantize(work / "model-bf16.gguf", work / "model-q4_k_m.gguf", int(gguf.LlamaFileType.MOSTLY_Q4_K_M),
                   threads=os.cpu_count() or 1)
    return info | {"bf16_bytes": (work / "model-bf16.gguf").stat().st_size,
                   "q4_k_m_bytes": (work / "model-q4_k_m.gguf").stat().st_size, "quantize_s": round(q_s, 1)}


def prompt_ids(engine, words: int = PROMPT_WORDS) -> list[int]:
    rng = np.random.default_rng(0)
    vocab = ["river", "stone", "seven", "market", "orbit", "paper", "green", "answer", "window", "quiet"]
    text = " ".join(rng.choice(vocab, words))
    return engine.tokenize(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")


def greedy(engine, ids: list[int], n: int) -> tuple[list[int], dict]:
    """`n` greedy tokens after `ids` under the engine's lock: (tokens, timings)."""
    from clawd.engine.engine import GenInfo, Sampling

    with engine.lock.user():
        state = engine.adapter_version
        engine.llm.reset()  # evaluate the whole prompt each time: the same arithmetic every request
        t0, times, out = time.perf_counter(), [], []
        for step in engine.generate(ids, Sampling(temperature=0.0, max_tokens=n), GenInfo()):
            out.append(step.token)
            times.append(time.perf_counter())
    gen = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else None
    return out, {"adapter": state, "prompt_tokens": len(ids), "ttft_s": times[0] - t0 if times else None,
                 "prompt_tok_s": len(ids) / (times[0] - t0) if times else None, "gen_tok_s": gen, "tokens": len(out)}


def serve(path: Path) -> dict:
    import llama_cpp

    from clawd.engine.engine import Engine

    engine = Engine(path, n_ctx=4096, threads=os.cpu_count() or 1, gpu_layers=-1)
    ids = prompt_ids(engine)
    greedy(engine, ids, 8)  # warm-up: CUDA graphs, kernels' first launch
    _, t = greedy(engine, ids, 256)
    out = {"gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()), "file_bytes": path.stat().st_size,
           **{k: round(v, 3) if isinstance(v, float) else v for k, v in t.items() if k != "adapter"}}
    del engine
    return out


def train(work: Path, engine, cuda: bool) -> dict:
    from bench.training.train import synthetic_turns
    from clawd.config import Settings, ensure_home
    from clawd.store.store import Store
    from clawd.train import Trainer
    from clawd.train.memory import llama_serving

    home = ensure_home(work / "home")
    store = Store(home / "clawd.db")
    synthetic_turns(store, engine.model_path, n=TURNS, tokens=512)
    store.close()
    # lr 2e-3, 2 epochs (tests/test_train_qlora.py's): a strong adapter, so that the agreement below
    # measures the adapter's conversion, not only the base's
    settings = Settings(home=home, model=engine.model_path, train_base=work / "hf", train_backend="qlora",
                        train_batch=TURNS, train_minibatch=2, train_epochs=2, lr=2e-3, threads=os.cpu_count() or 1)
    serving = llama_serving(**engine.footprint(3088))
    used = lambda: 0  # noqa: E731  (--cpu: no device memory to read)
    if cuda:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        used = lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used  # noqa: E731
    peak, done = [0], threading.Event()

    def sample() -> None:  # the whole device's memory in use, serving's and the trainer's
        while not done.is_set():
            peak[0] = max(peak[0], used())
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()
    before = used()
    trainer, events, deadline = Trainer(settings, serving=asdict(serving), template=engine.template.spec()).start(), [], time.time() + 300
    while time.time() < deadline and not any(e["event"] in ("done", "error", "waiting", "idle") for e in events):
        events += [e.to_json() for e in trainer.events()]  # TrainEvent records, flat as status shows them
        time.sleep(0.2)
    trainer.join(60)
    done.set()
    end = next((e for e in events if e["event"] in ("done", "error", "waiting", "idle")), {"event": "timeout"})
    if end["event"] != "done":
        raise RuntimeError(f"the round ended with {end}")
    plan = end["memory_plan"]
    return {"backend": end["backend"], "path": end["path"], "round_s": end["seconds"], "steps": end["steps"],
            "losses": [round(x, 4) for x in end["losses"]], "trainer_peak_allocated_mib": end["peak_memory_mb"],
            "device_used_before_mib": round(before / 2**20), "device_peak_used_mib": round(peak[0] / 2**20),
            "plan": plan, "plan_training_mib": plan["training_mib"]["total"],
            "plan_over_measured": round(plan["training_mib"]["total"] / end["peak_memory_mb"], 2)}


def trained_turns(work: Path, n: int = 4) -> list:
    from clawd.store.store import Store

    store = Store(work / "home" / "clawd.db")
    try:
        return [t for t in store.turns() if t.kind == "main"][:n]
    finally:
        store.close()


def swap(work: Path, engine, adapter: Path) -> dict:
    ids = trained_turns(work, 1)[0].prompt_ids  # where the adapter acts most: a prompt it trained on
    engine.set_adapter(adapter, 1)
    with_adapter, _ = greedy(engine, ids, 32)
    engine.set_adapter(None, None)
    base, _ = greedy(engine, ids, 32)
    refs = {None: base, 1: with_adapter}
    results, stop = [], threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                toks, t = greedy(engine, ids, 32)
                results.append((t["adapter"], toks, None))
            except Exception as e:  # noqa: BLE001  (counted, not raised: the check reports it)
                results.append((None, [], repr(e)))
            # A client's turn-around before its next request. With none, this thread takes the
            # lock straight back (PriorityLock does not queue users) and a swap would wait for
            # the client to stop, not for the request in flight to end.
            time.sleep(0.02)

    th = threading.Thread(target=client)
    th.start()
    swap_ms = []
    for k in range(SWAPS):
        time.sleep(0.05)  # mid-stream: the client is generating now
        t = engine.set_adapter(adapter if k % 2 == 0 else None, 1 if k % 2 == 0 else None)
        swap_ms.append(t["total_s"] * 1e3)
    time.sleep(0.2)
    stop.set()
    th.join()
    engine.set_adapter(None, None)
    failed = sum(err is not None or not toks for _, toks, err in results)
    wrong = sum(err is None and toks and toks != refs[state] and toks == refs[1 if state is None else None]
                for state, toks, err in results)
    other = sum(err is None and toks and toks not in (refs[None], refs[1]) for state, toks, err in results)
    return {"swaps": SWAPS, "requests": len(results), "failed": failed, "wrong_adapter": wrong, "neither_answer": other,
            "adapter_changes_answer": base != with_adapter, "swap_ms_median": round(float(np.median(swap_ms)), 2),
            "swap_ms_max": round(max(swap_ms), 2), "errors": sorted({e for _, _, e in results if e})[:3]}


def transformers_logprobs(work: Path, args: argparse.Namespace) -> dict:
    """(torch child) Log-softmax at each trained turn's completion positions, transformers + peft
    (fp32 + adapter) and the trainer's 4-bit view, into work/transformers_logprobs.npz."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from clawd.config import Settings
    from clawd.train.backend import QLoRABackend

    adapter_dir = Path(args.adapter)

    def positions(model, ids: list[int], start: int) -> np.ndarray:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids], device=args.device)).logits[0, start - 1:-1].double()
        return torch.log_softmax(logits, -1).cpu().numpy()  # (C, V)

    base = AutoModelForCausalLM.from_pretrained(str(work / "hf"), dtype=torch.float32).to(args.device)
    hf = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    four = QLoRABackend.load(Settings(home=work / "home"), work / "hf", args.device)
    four.load_lora(adapter_dir)
    four.model.eval()
    arrays = {}
    for k, t in enumerate(trained_turns(work)):
        ids, start = t.prompt_ids + t.completion_ids, len(t.prompt_ids)
        arrays[f"ref{k}"], arrays[f"four{k}"] = positions(hf, ids, start), positions(four.model, ids, start)
    np.savez(work / "transformers_logprobs.npz", **arrays)
    return {"turns": len(arrays) // 2}


def agree(args: argparse.Namespace, engine, adapter_dir: Path, good: Path, naive: Path) -> dict:
    """KL(transformers ‖ llama.cpp) per position, at each trained turn's completion positions."""
    from clawd.engine.sampling import log_softmax

    work = args.work
    torch_phase(args, "transformers_logprobs", adapter_dir)
    saved = np.load(work / "transformers_logprobs.npz")

    def llama_positions(adapter: Path | None, version: int | None, ids: list[int], start: int) -> np.ndarray:
        engine.set_adapter(adapter, version)
        with engine.lock.user():
            engine.llm.reset()
            engine.llm.eval(ids[:start])
            rows = []
            for i in range(start, len(ids)):  # the logits that predict ids[i], then feed it
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(engine.llm.ctx, -1), shape=(engine.n_vocab,))
                rows.append(log_softmax(logits.astype(np.float64)))
                engine.llm.eval([ids[i]])
        return np.stack(rows)  # (C, V)

    def kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
        return (np.exp(p) * (p - q)).sum(-1)  # (C,)

    out: dict[str, list[float]] = {k: [] for k in ("kl", "tv", "naive_kl", "adapter_effect_kl", "qlora_view_kl")}
    for k, t in enumerate(trained_turns(work)):
        ids, start = t.prompt_ids + t.completion_ids, len(t.prompt_ids)
        ref = saved[f"ref{k}"]
        served = llama_positions(good, 1, ids, start)
        out["kl"] += kl(ref, served).tolist()
        out["tv"] += (np.abs(np.exp(ref) - np.exp(served)).sum(-1) / 2).tolist()
        out["naive_kl"] += kl(ref, llama_positions(naive, 2, ids, start)).tolist()
        out["adapter_effect_kl"] += kl(llama_positions(None, None, ids, start), served).tolist()
        out["qlora_view_kl"] += kl(saved[f"four{k}"], served).tolist()
    engine.set_adapter(None, None)
    summary = {f"{k}_mean": float(f"{np.mean(v):.3g}") for k, v in out.items()}
    return summary | {"kl_max": float(f"{max(out['kl']):.3g}"), "tv_max": float(f"{max(out['tv']):.3g}"),
                      "positions": len(out["kl"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path)
    ap.add_argument("--llama-src", type=Path, required=True, help="the trimmed sdist's vendor/llama.cpp")
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--build-s", type=float, default=None, help="seconds the llama.cpp build took (reported)")
    ap.add_argument("--cpu", action="store_true", help="rehearse here: a tiny model, transformers on the CPU")
    ap.add_argument("--torch-phase", choices=["hf_checkpoint", "transformers_logprobs"], help=argparse.SUPPRESS)
    ap.add_argument("--adapter", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.device = "cpu" if args.cpu else "cuda"  # where transformers runs; llama.cpp offloads every layer it can
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    if args.torch_phase:  # a child of torch_phase: its result into WORK/PHASE.json
        result = {"hf_checkpoint": hf_checkpoint, "transformers_logprobs": transformers_logprobs}[args.torch_phase](work, args)
        (work / f"{args.torch_phase}.json").write_text(json.dumps(result))
        return

    report: dict = {"llama_build_s": args.build_s, "llama_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload())}
    timed(report, "model")(lambda: build_model(args))
    for name in ("bf16", "q4_k_m"):
        timed(report, f"serve_{name}")(lambda name=name: serve(work / f"model-{name}.gguf"))

    from clawd.engine.engine import Engine
    from clawd.publish import convert as C

    engine = Engine(work / "model-bf16.gguf", n_ctx=4096, threads=os.cpu_count() or 1, gpu_layers=-1)
    tr = timed(report, "train")(lambda: train(work, engine, cuda=not args.cpu))
    if "path" in tr:
        adapter_dir = Path(tr["path"])
        base = C.BaseInfo.of(engine.model_path)

        def convert() -> dict:
            summary = C.convert_adapter(adapter_dir, base, work / "adapter.gguf", "f32")
            saved = C.PERMUTED_QK  # the same adapter without llama's q/k permutation: a wrong conversion, for scale
            C.PERMUTED_QK, C.UNPERMUTED = set(), C.UNPERMUTED | {"llama"}
            try:
                C.convert_adapter(adapter_dir, base, work / "adapter-naive.gguf", "f32")
            finally:
                C.PERMUTED_QK, C.UNPERMUTED = saved, C.UNPERMUTED - {"llama"}
            return summary

        timed(report, "convert")(convert)
        timed(report, "swap")(lambda: swap(work, engine, work / "adapter.gguf"))
        timed(report, "agree")(lambda: agree(args, engine, adapter_dir, work / "adapter.gguf", work / "adapter-naive.gguf"))
    sw, ag = report.get("swap", {}), report.get("agree", {})
    report["ok"] = bool(not any("error" in v for v in report.values() if isinstance(v, dict))
                        and sw.get("failed") == 0 and sw.get("wrong_adapter") == 0 and ag.get("kl_mean", 1) < 0.03)
    text = json.dumps(report, indent=1)
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "device-check.json").write_text(text)


if __name__ == "__main__":
    main()
