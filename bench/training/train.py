"""Training benchmark: a whole round's seconds and peak memory, then LoRA steps per second and
peak memory on a 512- and a 2048-token sample, for each training backend.

    python -m bench.training.train                    # bundled SmolLM2, all cores
    python -m bench.training.train --model X.gguf --threads 2 --steps 3 --backends full,qlora

One step is what a training round does per sample (clawd.train.loop): a forward without grad for
log π_old, then forward + backward of the clipped loss with the adapter on, and an AdamW step
(r=16, α=32 on q,k,v,o,gate,up,down; gradient checkpointing). Tokens/s = sequence tokens / step
time, median over --steps after one warm-up step. Peak memory: resident set (CPU, reset between
lengths through /proc/self/clear_refs) or torch's peak allocation (CUDA).

A round is clawd.train.loop.run_round on ROUND_TURNS (16) synthetic judged turns of ~ROUND_TOKENS
tokens, a quarter of them with a hint, 4 per optimizer step, one epoch (the daemon's default round
was 16 turns when bench/results/train-*.json was measured; it is 8 now): load
excluded (the model is loaded first), scoring, steps, checkpoints and the adapter's writing included.

Each backend runs in its own process (Unsloth patches transformers for the whole process, and
peak memory is per process): full (fp32 on CPU, bf16 on CUDA), qlora (bitsandbytes NF4), and on
CUDA unsloth. Results go to bench/out/train.json.
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

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = (512, 2048)
COMPLETION = 128  # tokens scored by the loss; the rest is prompt
ROUND_TURNS, ROUND_TOKENS = 16, 512


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


def synthetic_turns(store, model: Path, n: int = ROUND_TURNS, tokens: int = ROUND_TOKENS) -> list[int]:
    """`n` judged main turns of about `tokens` prompt tokens: rewards alternate ±1, every fourth
    has a hint. Rendered with the GGUF's template and tokenized as the engine does."""
    import random

    from llama_cpp import Llama

    from clawd.store.records import Judgment, NextState, Turn
    from clawd.train import samples as S

    # No torch here: scripts/device_check.py calls this in a process that holds llama.cpp's CUDA
    # build, and the two abort together there
    llm, template = Llama(str(model), vocab_only=True, verbose=False), S.gguf_template(model)
    rng = random.Random(1)
    words = ["river", "stone", "seven", "quietly", "market", "orbit", "paper", "green", "answer", "window"]
    ids = []
    for i in range(n):
        pick = lambda k: " ".join(rng.choices(words, k=k))  # noqa: E731
        req = {"messages": [{"role": "system", "content": "You are a helpful assistant. " + pick(tokens // 2)},
                            {"role": "user", "content": f"Question {i}: {pick(tokens // 4)}?"}],
               "tools": [], "tool_choice": "none", "temperature": 0.7}
        sid = store.open_session(f"bench-{i}")
        turn = Turn(session_id=sid, index=0, kind="main", completion_id=f"bench-{i}", request=req,
                    prompt_ids=llm.tokenize(S.render(template, req).encode(), add_bos=True, special=True))
        if turn.prompt_ids[:2] == [llm.token_bos()] * 2:  # the template wrote BOS and so did the tokenizer (as the engine)
            turn.prompt_ids = turn.prompt_ids[1:]
        store.insert_turn(turn)
        turn.completion_ids = llm.tokenize(pick(COMPLETION // 2).encode(), add_bos=False, special=False)
        turn.text, turn.status, turn.finish_reason = "", "ok", "stop"
        store.finish_turn(turn)
        store.add_next_state(NextState(turn.id, "user", "thanks", [{"role": "user", "content": "thanks"}]))
        store.add_judgment(Judgment(turn_id=turn.id, method="vote", score=1 if i % 2 else -1, judge_model="bench",
                                    hint="Answer in one word." if i % 4 == 0 else None))
        ids.append(turn.id)
    return ids


def measure_round(backend, settings, model: Path) -> dict:
    """One run_round on ROUND_TURNS synthetic judged turns, in a fresh home beside the cached base."""
    from clawd.store.store import Store
    from clawd.train.loop import run_round

    home = Path(tempfile.mkdtemp(prefix="round-", dir=settings.home))
    (home / "train").mkdir(parents=True)
    (home / "train" / backend.base_dir.name).symlink_to(backend.base_dir)
    store = Store(home / "clawd.db")
    synthetic_turns(store, model)
    reset_peak(backend.device)
    t = time.perf_counter()
    result = run_round(settings.model_copy(update={"home": home}), store=store, backend=backend)
    seconds = time.perf_counter() - t
    store.close()
    m = result.metrics
    return {"seconds": round(seconds, 1), "peak_memory_mb": round(peak_mb(backend.device), 1), "turns": m["samples"],
            "steps": m["steps"], "tokens_trained": m["tokens_trained"], "micro_step_s": m.get("micro_step_s"),
            "memory_plan": m["memory_plan"]}


def measure(kind: str, args) -> dict:
    """Load one backend in this process, time a round, then steps at each length."""
    import torch

    from clawd.config import Settings
    from clawd.train.backend import load_backend, sha256_file
    from clawd.train.loss import policy_loss
    from clawd.train.runner import return_freed_memory

    return_freed_memory()  # as the trainer child does: peak RSS then follows live tensors
    model = Path(args.model)
    settings = Settings(home=Path(args.home), threads=args.threads, max_train_tokens=max(LENGTHS), train_backend=kind,
                        train_batch=ROUND_TURNS)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    t0 = time.perf_counter()
    backend = load_backend(settings, model, sha256_file(model))
    out = {"backend": backend.name, "device": str(backend.device), "load_s": round(time.perf_counter() - t0, 1),
           "threads": torch.get_num_threads(), "resident_mb": round(backend.resident_bytes() / 2**20, 1),
           "loaded_peak_mb": round(peak_mb(backend.device), 1), **backend.describe()}
    out["round"] = measure_round(backend, settings, model)
    print(f"{backend.name:>8} round of {ROUND_TURNS} turns: {out['round']['seconds']:.1f} s, "
          f"peak {out['round']['peak_memory_mb']:.0f} MB", file=sys.stderr)
    out["lengths"] = {}
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
    ap.add_argument("--backends", default=None, help="comma-separated: full, qlora, unsloth (default: all this machine runs)")
    ap.add_argument("--only", choices=["full", "qlora", "unsloth"], help=argparse.SUPPRESS)  # one backend, JSON on stdout
    args = ap.parse_args()
    if args.only:
        print(json.dumps(measure(args.only, args)))
        return
    import torch

    tmp = None
    if args.home is None:
        tmp = tempfile.TemporaryDirectory(prefix="clawd-bench-train-")
        args.home = tmp.name
    kinds = args.backends.split(",") if args.backends else ["unsloth", "qlora", "full"] if torch.cuda.is_available() else ["full", "qlora"]
    results = {"model": args.model, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
               "completion_tokens": COMPLETION, "runs": []}
    for kind in kinds:
        cmd = [sys.executable, "-m", "bench.training.train", "--only", kind, "--model", args.model, "--threads", str(args.threads),
               "--steps", str(args.steps), "--home", args.home]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        if p.returncode != 0:
            results["runs"].append({"backend": kind, "error": f"exit {p.returncode} (see stderr above)"})
            continue
        results["runs"].append(json.loads(p.stdout.strip().splitlines()[-1]))
    ok = {r["backend"]: r for r in results["runs"] if "error" not in r}
    for kind in ("qlora", "unsloth"):  # each 4-bit backend against the full-precision one
        if kind in ok and "full" in ok:
            a, b = ok[kind], ok["full"]
            results[f"{kind}_vs_full"] = {"round_seconds": round(a["round"]["seconds"] / b["round"]["seconds"], 2),
                                          "round_memory": round(a["round"]["peak_memory_mb"] / b["round"]["peak_memory_mb"], 2)} | {
                n: {"speed": round(a["lengths"][n]["tokens_per_s"] / b["lengths"][n]["tokens_per_s"], 2),
                    "memory": round(a["lengths"][n]["peak_memory_mb"] / b["lengths"][n]["peak_memory_mb"], 2)}
                for n in map(str, LENGTHS)}
    out = ROOT / "bench" / "out" / "train.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
