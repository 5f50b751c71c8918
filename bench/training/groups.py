"""A GRPO group's answers on their shared prompt against each read whole, side by side.

    python -m bench.training.groups                                   # bundled SmolLM2, all cores
    python -m bench.training.groups --model "$(bash scripts/qwen-model.sh)" --threads 2

What a training round does with a group of K answers to one question (clawd.train.loop), timed both
ways on the same backend in one run: scoring (log π_old at the turn's temperature and at 1, and
log π_base with the adapter off; no gradient), and a micro-step (forward and backward of the
answers' logprobs with the adapter on, gradient checkpointing as in training). "shared" reads the
prompt once for the whole group (Backend.shared_logprobs); "whole" reads prompt + answer once per
answer, as every round did before. A round takes grpo_epochs (2) micro-steps per group after its
scoring, so a group costs one scoring and two micro-steps.

The prompt is a real OpenClaw request with its tools (tests/fixtures/openclaw), cut from the left
to each --prompt-tokens length; the answers are ANSWERS tokens long (the tool-learning bench's
calls are 20-80 tokens, chat answers up to 160). Each figure is the median of --repeats after one
warm-up. Results go to bench/out/train-groups.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import write_result

ROOT = Path(__file__).resolve().parents[2]
ANSWERS = (40, 60, 80, 120)  # K = 4, the daemon's grpo_k
FIXTURE = ROOT / "tests" / "fixtures" / "openclaw" / "tool_call_request.json"


def scoring_shared(backend, prompt: list[int], answers: list[list[int]]) -> None:
    import torch

    with torch.no_grad():
        backend.shared_logprobs(prompt, answers, (0.7, 1.0))
        backend.shared_logprobs(prompt, answers, (0.7,), adapter=False)


def scoring_whole(backend, prompt: list[int], answers: list[list[int]]) -> None:
    import torch

    with torch.no_grad():
        for a in answers:
            backend.logprobs_at(prompt + a, len(prompt), (0.7, 1.0))
            backend.logprobs_at(prompt + a, len(prompt), (0.7,), adapter=False)


def step_shared(backend, prompt: list[int], answers: list[list[int]]) -> None:
    import torch

    torch.stack([x.sum() for x in backend.shared_logprobs(prompt, answers, (0.7,))]).sum().backward()
    backend.model.zero_grad(set_to_none=True)


def step_whole(backend, prompt: list[int], answers: list[list[int]]) -> None:
    for a in answers:
        backend.logprobs_at(prompt + a, len(prompt), (0.7,)).sum().backward()
    backend.model.zero_grad(set_to_none=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="GGUF (default: the bundled SmolLM2)")
    p.add_argument("--threads", type=int)
    p.add_argument("--prompt-tokens", default="512,2048", help="comma-separated prompt lengths")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    import torch

    from clawd.config import Settings, bundled_model_path
    from clawd.train.backend import load_backend, sha256_file
    from clawd.train.samples import gguf_template, render

    model = Path(args.model) if args.model else bundled_model_path()
    assert model is not None, "no model: pass --model or install the bundled one"
    sha = sha256_file(model)
    with tempfile.TemporaryDirectory() as home:
        backend = load_backend(Settings(home=Path(home), threads=args.threads), model, sha)
        print(f"{backend.name} on {backend.device}: the shared prompt {'is' if backend.shares_prompts else 'is NOT'} "
              "reproduced by this model and transformers", flush=True)
        request = json.loads(FIXTURE.read_text())["body"]
        full = backend.encode(render(gguf_template(model), request))
        filler = backend.encode(" The quick brown fox jumps over the lazy dog.")[1:] * 2000
        answers = [filler[i:i + n] for i, n in enumerate(ANSWERS)]
        torch.manual_seed(0)  # a trained adapter, not B = 0: the same work either way, but realistic values
        backend.set_lora_state({k: torch.randn_like(v) * 0.01 for k, v in backend.lora_state().items()})
        rows = []
        for n in (int(x) for x in args.prompt_tokens.split(",")):
            prompt = (filler + full)[-n:]

            row = {"prompt_tokens": n, "answers": list(ANSWERS)}
            for name, fn in (("scoring_shared", scoring_shared), ("scoring_whole", scoring_whole),
                             ("step_shared", step_shared), ("step_whole", step_whole)):
                times = []
                for _ in range(args.repeats + 1):  # the first is a warm-up
                    t0 = time.perf_counter()
                    fn(backend, prompt, answers)
                    times.append(time.perf_counter() - t0)
                row[name] = round(statistics.median(times[1:]), 3)
            # a group in a round: one scoring, then grpo_epochs (2) micro-steps
            row["group_shared_s"] = round(row["scoring_shared"] + 2 * row["step_shared"], 3)
            row["group_whole_s"] = round(row["scoring_whole"] + 2 * row["step_whole"], 3)
            row["speedup"] = round(row["group_whole_s"] / row["group_shared_s"], 2)
            print(f"prompt {n:5d} tokens, answers {ANSWERS}: scoring {row['scoring_whole']:.2f} s → "
                  f"{row['scoring_shared']:.2f} s, micro-step {row['step_whole']:.2f} s → {row['step_shared']:.2f} s; "
                  f"a group {row['group_whole_s']:.1f} s → {row['group_shared_s']:.1f} s ({row['speedup']:.2f}×)", flush=True)
            rows.append(row)
    write_result("train-groups", {"model": model.name, "backend": backend.name, "device": str(backend.device),
                                  "threads": args.threads, "shares_prompts": backend.shares_prompts,
                                  "repeats": args.repeats, "rows": rows})


if __name__ == "__main__":
    main()
