"""What the tool-call grammar costs in generation speed, measured side by side.

The same prompts (OpenClaw's 12 real tools from the captured request, one short task each) are
answered at temperature 0 free and under the lazy grammar (tool_calls.CallTrigger), alternating, on
one engine. Reported per task: decode tok/s (first token to last, the prompt cached), the
median ratio grammar/free, whether each answer is a call of an offered tool with JSON arguments,
and where the grammar took over. A plain-text answer measures what watching for a call costs
when none comes.

    python3 -m bench.tools.toolcall [--model PATH] [--reps 5] [--out bench/results/toolcall.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from clawd import config
from clawd.engine import tool_calls
from clawd.engine.engine import Engine, GenInfo, Sampling

ROOT = Path(__file__).resolve().parents[2]

FIXTURE = ROOT / "tests" / "fixtures" / "openclaw" / "tool_call_request.json"
TASKS = {
    "exec": "Run `echo hello` in the shell.",
    "read": "Show me what is in the file README.md.",
    "ls": "List the files in the current directory.",
    "write": "Create a file notes.txt that contains the word done.",
    "plain": "In one sentence, what is a shell?",  # no call expected: the cost of watching for one
}


def run(engine: Engine, prompt: list[int], offered: list[dict], grammar: bool) -> dict:
    info = GenInfo()
    times, pieces = [], []
    sampling = Sampling(temperature=0, max_tokens=160, lazy=tool_calls.CallTrigger(offered) if grammar else None)
    with engine.lock.user():
        for step in engine.generate(prompt, sampling, info):
            times.append(time.perf_counter())
            pieces.append(step.piece)
    text = b"".join(pieces).decode("utf-8", "replace")
    _, calls = tool_calls.parse_tool_calls(text, {t["function"]["name"] for t in offered})
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return {"tokens": len(times), "tok_s": (len(times) - 1) / span if span else None, "text": text,
            "call": [c.name for c in calls], "grammar_from": info.grammar_from, "finish": info.finish}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF (default: the assembled Qwen2.5-Coder-0.5B)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "toolcall.json")
    a = ap.parse_args()
    model = a.model or config.assembled_model_path()
    if model is None:
        sys.exit("no model: run scripts/install.sh (it assembles Qwen2.5-Coder-0.5B) or pass --model")
    offered = json.loads(FIXTURE.read_text())["body"]["tools"]
    engine = Engine(model, n_ctx=8192)
    system = {"role": "system", "content": "You are a coding agent. Use the tools to act in the user's workspace."}
    results: dict = {"model": str(model), "reps": a.reps, "tools": len(offered), "tasks": {}}
    for name, task in TASKS.items():
        prompt = engine.tokenize(engine.template.render([system, {"role": "user", "content": task}], offered))
        run(engine, prompt, offered, False)  # warm: the prompt is evaluated once, then reused
        rows: dict[str, list[dict]] = {"free": [], "grammar": []}
        for _ in range(a.reps):
            for mode in ("free", "grammar"):
                rows[mode].append(run(engine, prompt, offered, mode == "grammar"))
        free = statistics.median(r["tok_s"] for r in rows["free"] if r["tok_s"])
        gram = statistics.median(r["tok_s"] for r in rows["grammar"] if r["tok_s"])
        results["tasks"][name] = {
            "prompt_tokens": len(prompt), "free_tok_s": round(free, 2), "grammar_tok_s": round(gram, 2),
            "ratio": round(gram / free, 3),
            "free": {k: rows["free"][0][k] for k in ("text", "call", "tokens", "finish")},
            "grammar": {k: rows["grammar"][0][k] for k in ("text", "call", "tokens", "finish", "grammar_from")},
        }
        print(f"{name:6s} free {free:6.2f} tok/s  grammar {gram:6.2f} tok/s  ratio {gram / free:.3f}  "
              f"calls free {rows['free'][0]['call']} grammar {rows['grammar'][0]['call']}", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
