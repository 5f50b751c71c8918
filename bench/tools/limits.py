"""What a tool-call grammar costs against the number of tools offered: where `max_tools` (128)
and tool_calls.MAX_GRAMMAR_BYTES come from.

OpenClaw's 12 real tools (the captured request) are repeated under new names up to N. For each N:
the grammar's size, the time clawd takes to build its rules (CallTrigger, in the request's
preparation), the time llama.cpp takes to parse it (GrammarMask, when a call begins), and one
masked sampling step at the tool name, where every offered name is still open. Medians of --reps.

    python3 -m bench.tools.limits [--model PATH] [--reps 3] [--out bench/results/tool_limits.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import numpy as np

from clawd import config
from clawd.engine import tool_calls
from clawd.engine.engine import Engine
from clawd.engine.grammar import GrammarMask

ROOT = Path(__file__).resolve().parents[2]

FIXTURE = ROOT / "tests" / "fixtures" / "openclaw" / "tool_call_request.json"
COUNTS = (12, 32, 64, 128, 256, 512, 1000)


def offered(n: int) -> list[dict]:
    real = json.loads(FIXTURE.read_text())["body"]["tools"]
    out = []
    for i in range(n):
        t = copy.deepcopy(real[i % len(real)])
        t["function"]["name"] += f"_{i}"
        out.append(t)
    return out


def measure(engine: Engine, n: int, reps: int) -> dict:
    build, parse, step, size = [], [], [], 0
    start = engine.tokenize('{"name": "')
    start = start[1:] if start and start[0] == engine.llm.token_bos() else start
    logits = np.random.default_rng(0).normal(size=engine.n_vocab).astype(np.float32)  # (V,)
    for _ in range(reps):
        t0 = time.perf_counter()
        trigger = tool_calls.CallTrigger(offered(n))
        t1 = time.perf_counter()
        gbnf = trigger(b'{"name"')
        assert gbnf is not None
        size = len(gbnf)
        mask = GrammarMask(engine._vocab, engine.n_vocab, gbnf)
        t2 = time.perf_counter()
        assert mask.take_over(start)
        t3 = time.perf_counter()
        mask.apply(logits)
        step.append(time.perf_counter() - t3)
        mask.close()
        build.append(t1 - t0)
        parse.append(t2 - t1)
    return {"tools": n, "grammar_bytes": size, "build_s": statistics.median(build),
            "parse_s": statistics.median(parse), "step_at_name_s": statistics.median(step)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/tool_limits.json")
    a = ap.parse_args()
    model = a.model or config.Settings().resolved_model()
    engine = Engine(model, n_ctx=512, threads=a.threads)
    rows = []
    for n in COUNTS:
        try:
            rows.append(measure(engine, n, a.reps))
        except tool_calls.ToolGrammarError as e:
            print(f"{n:5d} tools: refused ({e})")
            continue
        r = rows[-1]
        print(f"{n:5d} tools: grammar {r['grammar_bytes'] / 1e6:.2f} MB, rules {r['build_s'] * 1e3:.0f} ms, "
              f"llama.cpp parse {r['parse_s'] * 1e3:.0f} ms, a step at the name {r['step_at_name_s'] * 1e3:.0f} ms",
              flush=True)
    base = rows[0]
    for r in rows[1:]:
        print(f"{r['tools']:5d} against {base['tools']}: size x{r['grammar_bytes'] / base['grammar_bytes']:.1f}, "
              f"step x{r['step_at_name_s'] / base['step_at_name_s']:.1f}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"model": model.name, "threads": a.threads, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
