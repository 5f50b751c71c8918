"""Prompt cache benchmark (issue 15): real OpenClaw requests against two daemons side by side.

    python -m bench.serving.cache                   # Qwen2.5-Coder-0.5B (scripts/qwen-model.sh), 5 turns a session
    python -m bench.serving.cache --turns 2         # shorter: fewer alternating turns, the same prompt sizes
    python -m bench.serving.cache --model M.gguf --ctx 8192 --system-chars 6000   # a smoke run on a small model

1. State copies, on the bundled SmolLM2-135M, a 4,096-token prefix: `Llama.save_state`/`load_state`
   against `llama_state_get_data`/`set_data` (the whole context) and `llama_state_seq_get_data`/
   `set_data` (one sequence): bytes and milliseconds (median of 5).
2. The scenarios, over HTTP, on two daemons run side by side (one request at a time, alternating,
   so that both see the same machine): `cache` (the prompt cache at its defaults) and `off`
   (`--prompt-cache-mb 0`: only the context's own prefix is reused, today's behaviour):
   (a) session A's first turn, a side call (OpenClaw's compaction request), A's next turn;
   (b) sessions A and B alternating, `--turns` each (B = A with another first message and session id);
   (c) a new session's first turn after another session;
   (d) a new session's first turn after a daemon restart (SIGTERM, start again).
   Each case reports prompt tokens evaluated and time to first token (the daemon's own timings),
   with the memory the kept prompt states cost. A cold prefill (nothing reused: the `off` daemon
   after an unrelated request, or where `off` is cold anyway) is run for A's second turn, B's last,
   (c) and (d), and every answer (greedy, token ids) is compared between `cache` and `off` and
   with the cold run's.
Results: bench/results/cache.json (and bench/out/cache.json).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import Daemon, write_result

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "openclaw"
MAX_TOKENS = 48
QUESTIONS = ["second message", "what is in my workspace?", "make a todo list for today", "check the git status",
             "thanks. and the weather tomorrow?", "summarize what we did", "one more thing: remind me at 5"]


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())["body"]


# -- 1. state copies ---------------------------------------------------------------------------------
def state_copies(model: Path, threads: int, n_tokens: int = 4096, reps: int = 5) -> dict:
    import llama_cpp
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=str(model), n_ctx=2 * n_tokens, n_threads=threads, n_threads_batch=threads, n_batch=512,
                n_ubatch=512, verbose=False)
    tokens = [llm.token_bos()] + np.random.default_rng(0).integers(100, 30000, n_tokens - 1).tolist()
    t0 = time.perf_counter()
    llm.eval(tokens)
    prefill = time.perf_counter() - t0
    u8p = ctypes.POINTER(ctypes.c_uint8)

    def ms(f):
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            out = f()
            times.append(time.perf_counter() - t)
        return out, round(statistics.median(times) * 1e3, 1)

    st, save = ms(llm.save_state)
    _, load = ms(lambda: llm.load_state(st))

    def whole_get():
        n = llama_cpp.llama_state_get_size(llm.ctx)
        buf = np.empty(n, np.uint8)
        return buf[:llama_cpp.llama_state_get_data(llm.ctx, buf.ctypes.data_as(u8p), n)]

    whole, whole_save = ms(whole_get)
    _, whole_load = ms(lambda: llama_cpp.llama_state_set_data(llm.ctx, whole.ctypes.data_as(u8p), whole.nbytes))

    def seq_get():
        n = llama_cpp.llama_state_seq_get_size(llm.ctx, 0)
        buf = np.empty(n, np.uint8)
        return buf[:llama_cpp.llama_state_seq_get_data(llm.ctx, buf.ctypes.data_as(u8p), n, 0)]

    def seq_set():
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llm.ctx), -1, -1, -1)
        return llama_cpp.llama_state_seq_set_data(llm.ctx, seq.ctypes.data_as(u8p), seq.nbytes, 0)

    seq, seq_save = ms(seq_get)
    _, seq_load = ms(seq_set)
    mib = 2**20
    out = {"model": model.name, "prefix_tokens": n_tokens, "prefill_s": round(prefill, 1),
           "Llama.save_state": {"MiB": round((st.llama_state_size + st.scores.nbytes + st.input_ids.nbytes) / mib, 1),
                                "of_which_scores_MiB": round(st.scores.nbytes / mib, 1), "save_ms": save, "load_ms": load},
           "llama_state_get_data (context)": {"MiB": round(whole.nbytes / mib, 1), "save_ms": whole_save, "load_ms": whole_load},
           "llama_state_seq_get_data (sequence)": {"MiB": round(seq.nbytes / mib, 1), "save_ms": seq_save, "load_ms": seq_load,
                                                   "KiB_per_token": round(seq.nbytes / n_tokens / 1024, 2)}}
    return out  # the Llama is freed with this frame, before the daemons start


# -- 2. scenarios ------------------------------------------------------------------------------------
class Session:
    """An OpenClaw conversation: the fixture's system prompt and 12 tools, its first message (with
    OpenClaw's runtime line) changed, and the internal-context block re-sent after the newest user
    message, as OpenClaw does (the previous one dropped)."""

    def __init__(self, first: str, session_id: str, system_chars: int):
        base = fixture("turn1_first_request")
        self.system = {**base["messages"][0], "content": base["messages"][0]["content"][:system_chars]}
        self.tools = base["tools"]
        self.block = base["messages"][2]
        first_message = base["messages"][1]["content"].replace("] hello\n", f"] {first}\n").replace("demo1", session_id)
        self.history: list[dict] = [{"role": "user", "content": first_message}]
        self.turn = 0

    def body(self) -> dict:
        return {"model": "clawd", "messages": [self.system, *self.history, self.block], "tools": self.tools,
                "tool_choice": "auto", "temperature": 0, "seed": 1, "max_completion_tokens": MAX_TOKENS, "stream": False}

    def answered(self, message: dict) -> None:
        self.turn += 1
        calls = message.get("tool_calls") or []
        self.history.append({"role": "assistant", "content": message.get("content"), **({"tool_calls": calls} if calls else {})})
        for c in calls:
            self.history.append({"role": "tool", "tool_call_id": c["id"], "content": "(done)"})
        self.history.append({"role": "user", "content": f"[Mon 2026-11-30 14:{10 + self.turn:02d} UTC] "
                                                        f"{QUESTIONS[(self.turn - 1) % len(QUESTIONS)]}"})


class Side:
    """One daemon (the harness's `clawd serve` on its own home, log tmp/NAME.log, in a session of its
    own) and what it answered."""

    def __init__(self, name: str, tmp: Path, args: argparse.Namespace, cache_mb: int | None):
        self.name, home = name, tmp / name
        self.daemon = Daemon(home, "--home", str(home), "--model", str(args.model), "--ctx", str(args.ctx),
                             "--threads", str(args.threads), "--auto-learn", "false",
                             *(["--prompt-cache-mb", str(cache_mb)] if cache_mb is not None else []),
                             log=tmp / f"{name}.log", new_session=True)
        self.sessions: dict[str, Session] = {}
        self.client = httpx.Client(timeout=3600)

    def start(self) -> None:
        self.daemon.start()

    def stop(self) -> None:
        self.daemon.stop(timeout=300)  # a graceful stop: the cache side writes its states to disk

    def status(self) -> dict:
        return self.client.get(self.daemon.url + "/v1/clawd/status").json()

    def ask(self, body: dict) -> tuple[dict, dict]:
        r = self.client.post(self.daemon.url + "/v1/chat/completions", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"{self.name}: HTTP {r.status_code}: {r.text[:500]}")
        out = r.json()
        row = self.daemon.turn(out["id"])
        prompt, completion, t = row["prompt_ids"], row["completion_ids"], json.loads(row["timings"])
        cache = self.status()["prompt_cache"] or {}
        rec = {"prompt_tokens": t["prompt_tokens"], "evaluated": t["evaluated_prompt_tokens"], "cached": t["cached_tokens"],
               "cached_from": t.get("cached_from"), "ttft_s": t["first_token_s"], "tok_s": t.get("tokens_per_s"),
               "completion_tokens": t["completion_tokens"], "kept_states": cache.get("entries", 0),
               "kept_MiB": round(cache.get("bytes", 0) / 2**20, 1), "kept_tokens": cache.get("tokens", 0),
               "prompt_ids": list(memoryview(prompt).cast("i")), "completion_ids": list(memoryview(completion).cast("i"))}
        return rec, out["choices"][0]["message"]


def common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def play(sides: list[Side], args: argparse.Namespace, cold: Side) -> list[dict]:
    cases: list[dict] = []
    compaction = fixture("compaction_request") | {"temperature": 0, "seed": 1, "max_completion_tokens": MAX_TOKENS, "stream": False}
    compaction.pop("stream_options", None)
    for part in compaction["messages"][1]["content"]:  # --system-chars cuts the conversation it summarizes too
        part["text"] = part["text"][:args.system_chars]

    def step(case: str, who: str | None, first: str = "", sid: str = "") -> None:
        row: dict = {"case": case, "session": who}
        for side in sides:
            if who is not None and who not in side.sessions:
                side.sessions[who] = Session(first, sid, args.system_chars)
            body = side.sessions[who].body() if who else compaction
            t0 = time.perf_counter()
            rec, message = side.ask(body)
            rec["wall_s"] = round(time.perf_counter() - t0, 2)
            if who:
                side.sessions[who].answered(message)
            row[side.name] = rec
            row[f"{side.name}_body"] = body
        cases.append(row)
        c = row["cache"]
        print(f"  {case:44} cache: {c['evaluated']:>6} of {c['prompt_tokens']:>6} evaluated ({c['cached_from']:>6}), "
              f"ttft {c['ttft_s']:7.2f} s | off: {row['off']['evaluated']:>6} evaluated, ttft {row['off']['ttft_s']:7.2f} s",
              flush=True)

    step("(a) A turn 1", "A", "hello", "demo1")
    step("(a) side call (compaction)", None)
    step("(a) A turn 2", "A")
    for k in range(args.turns):
        step(f"(b) B turn {k + 1}", "B", "what files are in my workspace?", "demo2")
        step(f"(b) A turn {k + 3}", "A")
    step("(c) new session C, turn 1", "C", "write a haiku about the sea", "demo3")
    # Cold prefills of B's last turn (restored from memory) and of (c), on the `off` daemon after an
    # unrelated request: nothing of those prompts is in its context then. (A's turn 2 in (a) and (d)
    # are cold on `off` anyway.) Each costs a full prefill, the bench's largest cost.
    for row in (cases[-3], cases[-1]):
        cold.ask({"model": "clawd", "messages": [{"role": "user", "content": "Say hi."}], "max_completion_tokens": 2})
        row["cold"], _ = cold.ask(row["cache_body"])
        print(f"  {'cold prefill: ' + row['case']:44} {row['cold']['evaluated']:>6} evaluated, ttft {row['cold']['ttft_s']:7.2f} s",
              flush=True)
    for side in sides:
        side.stop()
        side.start()
    step("(d) new session D after a restart, turn 1", "D", "what time is it in Lisbon?", "demo4")
    for row in cases:
        for name in ("(a) A turn 1", "(a) A turn 2", "(d) new session D"):
            if row["case"].startswith(name) and row["off"]["cached"] == 0:
                row["cold"] = row["off"]  # `off` evaluated this one cold: it is the cold run
    return cases


def summarize(cases: list[dict]) -> dict:
    out: dict = {"per_case": []}
    last_prompt: dict[str, list[int]] = {}
    for row in cases:
        c, o, k = row["cache"], row["off"], row.get("cold")
        prev = last_prompt.get(row["session"] or "")
        s = {"case": row["case"], "prompt_tokens": c["prompt_tokens"],
             "evaluated": {"cache": c["evaluated"], "off": o["evaluated"], "cold": k["evaluated"] if k else None},
             "cached_from": c["cached_from"],
             "ttft_s": {"cache": c["ttft_s"], "off": o["ttft_s"], "cold": k["ttft_s"] if k else None},
             "tok_s": {"cache": c["tok_s"], "off": o["tok_s"]},
             "kept": {"states": c["kept_states"], "MiB": c["kept_MiB"],
                      "KiB_per_token": round(c["kept_MiB"] * 1024 / c["kept_tokens"], 2) if c["kept_tokens"] else None},
             "same_answer_as_off": c["completion_ids"] == o["completion_ids"],
             "same_answer_as_cold": (c["completion_ids"] == k["completion_ids"]) if k else None}
        if prev is not None:
            shared = common(prev, c["prompt_ids"])
            s["previous_prompt"] = {"tokens": len(prev), "shared_with_this": shared,
                                    "cached_share_of_previous": round(c["cached"] / len(prev), 4),
                                    "cached_share_of_shared": round(c["cached"] / shared, 4) if shared else None}
        if k:
            s["ttft_ratio_to_cold"] = {"cache": round(c["ttft_s"] / k["ttft_s"], 4), "off": round(o["ttft_s"] / k["ttft_s"], 4)}
        if row["session"]:
            last_prompt[row["session"]] = c["prompt_ids"]
        out["per_case"].append(s)
    tok = {side: [r["tok_s"][side] for r in out["per_case"] if r["tok_s"][side]] for side in ("cache", "off")}
    out["generation_tok_s_median"] = {side: round(statistics.median(v), 2) if v else None for side, v in tok.items()}
    out["answers_equal"] = {"cache_vs_off": f"{sum(r['same_answer_as_off'] for r in out['per_case'])}/{len(out['per_case'])}",
                            "cache_vs_cold": f"{sum(bool(r['same_answer_as_cold']) for r in out['per_case'])}/"
                                             f"{sum(r['same_answer_as_cold'] is not None for r in out['per_case'])}"}
    return out


def table(summary: dict) -> None:
    print(f"\n{'case':44}{'prompt':>7}{'evaluated: cache / off / cold':>32}{'TTFT s: cache / off / cold':>30}"
          f"{'cache÷cold':>11}{'kept MiB':>10}{'same':>6}")
    for r in summary["per_case"]:
        e, t = r["evaluated"], r["ttft_s"]
        cold_e = "-" if e["cold"] is None else str(e["cold"])
        cold_t = "-" if t["cold"] is None else f"{t['cold']:.2f}"
        ratio = r.get("ttft_ratio_to_cold", {}).get("cache")
        same = ("=" if r["same_answer_as_off"] else "≠") + ("" if r["same_answer_as_cold"] is None else ("=" if r["same_answer_as_cold"] else "≠"))
        print(f"{r['case']:44}{r['prompt_tokens']:>7}{e['cache']:>12} / {e['off']:>6} / {cold_e:>6}"
              f"{t['cache']:>12.2f} / {t['off']:>6.2f} / {cold_t:>6}{'' if ratio is None else f'{ratio:.3f}':>11}"
              f"{r['kept']['MiB']:>10.1f}{same:>6}")
        if "previous_prompt" in r:
            p = r["previous_prompt"]
            print(f"{'':4}cached {p['cached_share_of_previous']:.1%} of the session's previous prompt ({p['tokens']} tokens; "
                  f"{p['shared_with_this']} shared with this one: {p['cached_share_of_shared']:.1%} of that)")
    print(f"generation tok/s (median): {summary['generation_tok_s_median']}; answers equal: {summary['answers_equal']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="default: Qwen2.5-Coder-0.5B from scripts/qwen-model.sh")
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--turns", type=int, default=5, help="turns of each session in (b)")
    ap.add_argument("--system-chars", type=int, default=10**6,
                    help="cut OpenClaw's system prompt and the side call's conversation to this many characters (small models)")
    ap.add_argument("--skip-state-copies", action="store_true")
    args = ap.parse_args()
    if args.model is None:
        args.model = Path(subprocess.run(["bash", str(ROOT / "scripts/qwen-model.sh")], capture_output=True, text=True,
                                         check=True).stdout.strip().splitlines()[-1])
    from clawd.config import bundled_model_path

    results: dict = {"model": str(args.model), "ctx": args.ctx, "threads": args.threads, "turns": args.turns,
                     "max_tokens": MAX_TOKENS, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t_start = time.perf_counter()
    if not args.skip_state_copies:
        print("1. state copies, bundled model, 4,096-token prefix ...", flush=True)
        results["state_copies"] = state_copies(bundled_model_path(), args.threads)
        print(json.dumps(results["state_copies"], indent=1), flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="clawd-cache-bench-"))
    sides = [Side("cache", tmp, args, None), Side("off", tmp, args, 0)]
    print(f"2. scenarios on {args.model.name}, daemons in {tmp} ...", flush=True)
    try:
        for side in sides:
            side.start()
        cases = play(sides, args, cold=sides[1])
    finally:
        for side in sides:
            side.daemon.stop()
    results["cases"] = [{k: ({kk: vv for kk, vv in v.items() if kk not in ("prompt_ids", "completion_ids")} | {
        "completion_ids": v["completion_ids"]} if isinstance(v, dict) and "prompt_tokens" in v else v)
        for k, v in row.items() if not k.endswith("_body")} for row in cases]
    results["summary"] = summarize(cases)
    results["minutes"] = round((time.perf_counter() - t_start) / 60, 1)
    table(results["summary"])
    write_result("cache", results)
    out = ROOT / "bench" / "results" / "cache.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out} ({results['minutes']} minutes); daemon logs in {tmp}")


if __name__ == "__main__":
    main()
