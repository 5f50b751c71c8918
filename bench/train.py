"""Training benchmark: LoRA steps per second and peak memory on a 512- and a 2048-token sample.

    python bench/train.py                    # bundled SmolLM2, all cores
    python bench/train.py --model X.gguf --threads 2 --steps 3

One step is what a training round does per sample (clawd.train.loop): a forward without grad for
log π_old, then forward + backward of the clipped loss with the adapter on, and an AdamW step
(r=16, α=32 on q,k,v,o,gate,up,down; gradient checkpointing). Tokens/s = sequence tokens / step
time, median over --steps after one warm-up step. Peak memory: resident set (CPU, reset between
lengths through /proc/self/clear_refs) or torch's peak allocation (CUDA).

With a GPU, each backend runs in its own process (Unsloth patches transformers for the whole
process): Unsloth QLoRA (4-bit NF4) and plain peft (bf16), then their speed and memory ratios.
Results go to bench/out/train.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = (512, 2048)
COMPLETION = 128  # tokens scored by the loss; the rest is prompt


def peak_mb(device) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    else:
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass


def measure(kind: str, args) -> dict:
    """Load one backend in this process and time steps at each length."""
    import torch

    from clawd.config import Settings
    from clawd.train.backend import PeftBackend, UnslothBackend, hf_base, sha256_file
    from clawd.train.loss import policy_loss

    model = Path(args.model)
    settings = Settings(home=Path(args.home), threads=args.threads, max_train_tokens=max(LENGTHS))
    torch.set_num_threads(args.threads or torch.get_num_threads())
    t0 = time.perf_counter()
    if kind == "unsloth":
        import unsloth  # noqa: F401  (before transformers)

        backend = UnslothBackend.load(settings, hf_base(settings, model, sha256_file(model)))
    else:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        backend = PeftBackend.load(settings, hf_base(settings, model, sha256_file(model)), device)
    out = {"backend": backend.name, "device": str(backend.device), "load_s": round(time.perf_counter() - t0, 1),
           "threads": torch.get_num_threads(), "lengths": {}}
    vocab = len(backend.tokenizer)
    opt = torch.optim.AdamW(backend.lora, lr=1e-5, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    for n in LENGTHS:
        ids = torch.randint(100, vocab - 100, (n,), generator=g).tolist()
        n_prompt = n - COMPLETION
        reset_peak(backend.device)
        times = []
        for _ in range(args.steps + 1):
            if backend.device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.no_grad():
                old = backend.logprobs(ids, n_prompt)[None]
            logp = backend.logprobs(ids, n_prompt)[None]
            loss = policy_loss(logp, old, old, torch.tensor([1.0], device=backend.device), torch.ones_like(old))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if backend.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        step = statistics.median(times[1:])
        out["lengths"][str(n)] = {"step_s": round(step, 3), "tokens_per_s": round(n / step, 1),
                                  "peak_memory_mb": round(peak_mb(backend.device), 1), "warmup_s": round(times[0], 2)}
        print(f"{backend.name:>14} {n:>5} tokens: {step:7.2f} s/step, {n / step:8.1f} tokens/s, "
              f"peak {peak_mb(backend.device):8.0f} MB", file=sys.stderr)
    return out


def main() -> None:
    from clawd.config import bundled_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(bundled_model_path()), help="GGUF to train on (default: bundled SmolLM2)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--steps", type=int, default=2, help="timed steps per length, after one warm-up")
    ap.add_argument("--home", default=None, help="where the dequantized base is cached (default: a temp dir)")
    ap.add_argument("--only", choices=["peft", "unsloth"], help=argparse.SUPPRESS)  # one backend, JSON on stdout
    args = ap.parse_args()
    if args.only:
        print(json.dumps(measure(args.only, args)))
        return
    import torch

    tmp = None
    if args.home is None:
        tmp = tempfile.TemporaryDirectory(prefix="clawd-bench-train-")
        args.home = tmp.name
    kinds = ["unsloth", "peft"] if torch.cuda.is_available() else ["peft"]
    results = {"model": args.model, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
               "completion_tokens": COMPLETION, "runs": []}
    for kind in kinds:
        cmd = [sys.executable, __file__, "--only", kind, "--model", args.model, "--threads", str(args.threads),
               "--steps", str(args.steps), "--home", args.home]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if p.returncode != 0:
            results["runs"].append({"backend": kind, "error": f"exit {p.returncode} (see stderr above)"})
            continue
        results["runs"].append(json.loads(p.stdout.strip().splitlines()[-1]))
    ok = {r["backend"]: r for r in results["runs"] if "error" not in r}
    if "unsloth-qlora" in ok and "peft" in ok:
        results["unsloth_vs_peft"] = {
            n: {"speed": round(ok["unsloth-qlora"]["lengths"][n]["tokens_per_s"] / ok["peft"]["lengths"][n]["tokens_per_s"], 2),
                "memory": round(ok["unsloth-qlora"]["lengths"][n]["peak_memory_mb"] / ok["peft"]["lengths"][n]["peak_memory_mb"], 2)}
            for n in map(str, LENGTHS)}
    out = ROOT / "bench" / "out" / "train.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
