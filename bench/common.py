"""What every bench shares: a free port, a server subprocess, one streamed chat with its timings."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import time
from pathlib import Path

import httpx

from clawd.client import sse_events


def free_port() -> int:
    for port in random.sample(range(18000, 19000), 1000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 18000-18999")


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


def start_server(cmd: list[str], port: int, log: Path, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[2]} exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code < 500:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop(proc)
    raise RuntimeError(f"{cmd[2]} did not become healthy:\n{log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def write_result(name: str, data: dict) -> Path:
    """bench/out/<name>.json, for the numbers quoted in notes and the README."""
    path = Path(__file__).resolve().parent / "out" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    print(f"wrote {path}")
    return path
