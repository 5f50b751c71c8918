"""What every bench shares: the tests' `clawd serve` harness (tests/harness.py: Daemon, a free port),
any server subprocess, one streamed chat with its timings."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from clawd.client import sse_events

ROOT = Path(__file__).resolve().parents[1]  # the checkout
sys.path.insert(0, str(ROOT / "tests"))
# The one `clawd serve` harness, owned by the tests (tests/harness.py); re-exported for the benches.
from harness import Daemon, free_port, stop, wait_until_up  # noqa: E402, F401


def summarize(t0: float, times: list[float], n: int, n_prompt: int | None, text: str) -> dict:
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return {"ttft_ms": (times[0] - t0) * 1000 if times else None, "tokens": n, "prompt_tokens": n_prompt,
            "tok_s": (n - 1) / span if span > 0 else None, "text": text}


def stream_chat(client: httpx.Client, url: str, body: dict) -> dict:
    """One streamed chat completion; timings taken at each SSE chunk that carries content."""
    t0 = time.perf_counter()
    times, text, usage, cid = [], [], None, None
    with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.read()[:500]!r}")
        for chunk in sse_events(r.iter_lines()):
            usage, cid = chunk.get("usage") or usage, chunk.get("id") or cid
            for c in chunk.get("choices") or []:
                if (c.get("delta") or {}).get("content"):
                    times.append(time.perf_counter())
                    text.append(c["delta"]["content"])
    n = usage["completion_tokens"] if usage else len(times)  # llama_cpp.server sends no usage: 1 chunk = 1 token
    return summarize(t0, times, n, usage and usage["prompt_tokens"], "".join(text)) | {"usage": usage, "id": cid}


def start_server(cmd: list[str], port: int, log: Path, env: dict | None = None, timeout: float = 120) -> subprocess.Popen:
    """Any HTTP server (a `clawd serve`, llama-cpp-python's own), in its own session, up once /health
    answers at all (llama_cpp.server has none: its 404 is an answer)."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    wait_until_up(proc, f"http://127.0.0.1:{port}/health", log, timeout, up=lambda status: status < 500, name=cmd[2])
    return proc


def write_result(name: str, data: dict) -> Path:
    """bench/out/<name>.json, for the numbers quoted in notes and the README."""
    path = Path(__file__).resolve().parent / "out" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    print(f"wrote {path}")
    return path
