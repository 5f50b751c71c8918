"""Load: N concurrent streaming clients for several minutes (issue 8).

    python -m bench.serving.load                        # 8 clients × 5 minutes, bundled model
    python -m bench.serving.load --clients 8 --minutes 1 --burst 40

Every request must end in one of two ways: a complete stream (its `[DONE]` received), or a
documented refusal — 503 with Retry-After when the bounded queue (setting max_queue) is full.
Anything else (a 5xx, a broken stream, a hang past the client timeout) is an error. Alongside:
the daemon's resident memory every 5 s (flat = no leak; first vs last minute), /health latency
while the engine is saturated (the event loop never blocks), and at the end a burst of
`--burst` simultaneous requests, more than max_queue, to show the refusals happen and are
clean. Writes bench/out/load.json; exits 1 on any error.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.common import Daemon, write_result
from clawd.client import IncompleteStream, sse_events

TOPICS = ["the sea", "a lighthouse", "tea", "rain", "a fox", "Mars", "bread", "a violin", "snow", "a bridge"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one(client: httpx.Client, url: str, rng: random.Random, max_tokens: int) -> dict:
    body = {"model": "clawd", "stream": True, "max_tokens": max_tokens, "temperature": 0.8,
            "messages": [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": f"Tell me something about {rng.choice(TOPICS)} "
                                                     f"(request {rng.getrandbits(32)})."}]}
    t0 = time.perf_counter()
    try:
        with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                documented = r.status_code in (429, 503) and "retry-after" in r.headers
                return {"outcome": "refused" if documented else f"http {r.status_code}", "s": time.perf_counter() - t0,
                        "body": r.text[:300]}
            first = None
            try:
                for ev in sse_events(r.iter_lines()):
                    if "error" in ev:
                        return {"outcome": "stream error", "body": json.dumps(ev)[:300], "s": time.perf_counter() - t0}
                    if first is None and any((c.get("delta") or {}).get("content") for c in ev.get("choices") or []):
                        first = time.perf_counter() - t0  # the first token, not the opening role chunk
            except IncompleteStream:
                return {"outcome": "broken stream", "s": time.perf_counter() - t0, "ttft": first}
            return {"outcome": "ok", "s": time.perf_counter() - t0, "ttft": first}
    except httpx.HTTPError as e:
        return {"outcome": f"{type(e).__name__}", "s": time.perf_counter() - t0}


def main() -> None:
    from clawd.config import bundled_model_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--burst", type=int, default=40, help="simultaneous requests at the end (0: none)")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    model = a.model or bundled_model_path()
    tmp = Path(tempfile.mkdtemp(prefix="clawd-load-"))
    d = Daemon(tmp / "home", "--home", str(tmp / "home"), "--model", str(model), "--threads", str(a.threads),
               log=tmp / "clawd.log", new_session=True).start()
    url = d.url
    print(f"{a.clients} streaming clients for {a.minutes} min on {Path(model).name}; daemon log {tmp / 'clawd.log'}",
          flush=True)
    results: list[dict] = []
    mem: list[tuple[float, float]] = []
    health: list[float] = []
    lock, end = threading.Lock(), time.time() + a.minutes * 60

    def client_loop(i: int) -> None:
        rng = random.Random(i)
        with httpx.Client(timeout=300) as c:
            while time.time() < end:
                r = one(c, url, rng, a.max_tokens)
                with lock:
                    results.append(r)
                if r["outcome"] == "refused":
                    time.sleep(1.0)

    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(a.clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    with httpx.Client(timeout=30) as hc:
        while any(t.is_alive() for t in threads):
            mem.append((time.time() - t0, rss_mb(d.proc.pid)))
            h0 = time.perf_counter()
            try:
                hc.get(url + "/health")
                health.append(time.perf_counter() - h0)
            except httpx.HTTPError:
                health.append(float("inf"))
            done = len(results)
            print(f"  {time.time() - t0:5.0f} s: {done} requests, RSS {mem[-1][1]:.0f} MB", flush=True)
            time.sleep(5)
    for t in threads:
        t.join()

    burst: list[dict] = []
    if a.burst:
        with httpx.Client(timeout=300, limits=httpx.Limits(max_connections=a.burst + 4)) as bc:
            rng = random.Random(99)
            ts = [threading.Thread(target=lambda: burst.append(one(bc, url, rng, 8))) for _ in range(a.burst)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
    with httpx.Client(timeout=120) as c:  # no deadlock: the daemon still answers at once
        after = one(c, url, random.Random(7), 8)
    d.stop()

    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    burst_outcomes: dict[str, int] = {}
    for r in burst:
        burst_outcomes[r["outcome"]] = burst_outcomes.get(r["outcome"], 0) + 1
    errors = [r for r in results + burst + [after] if r["outcome"] not in ("ok", "refused")]
    first_min = [m for s, m in mem if s < 60] or [mem[0][1]]
    last_min = [m for s, m in mem if s > mem[-1][0] - 60] or [mem[-1][1]]
    ok = [r for r in results if r["outcome"] == "ok"]
    out = {
        "clients": a.clients, "minutes": a.minutes, "model": str(model), "requests": len(results), "outcomes": outcomes,
        "burst": {"size": a.burst, "outcomes": burst_outcomes}, "after": after["outcome"], "errors": len(errors),
        "error_samples": errors[:5],
        "latency_s": {"median": statistics.median(r["s"] for r in ok), "max": max(r["s"] for r in ok)} if ok else None,
        "ttft_s": {"median": statistics.median(r["ttft"] for r in ok if r["ttft"] is not None)} if ok else None,
        "rss_mb": {"first_minute": statistics.mean(first_min), "last_minute": statistics.mean(last_min),
                   "max": max(m for _, m in mem)},
        "health_s": {"median": statistics.median(health), "max": max(health)},
    }
    print(json.dumps({k: v for k, v in out.items() if k != "error_samples"}, indent=1))
    for e in errors[:5]:
        print("  error:", e)
    write_result("load", out)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
