"""What every bench (and the tests) share: a free port, a server subprocess, the `clawd serve` harness
(Daemon), one streamed chat with its timings."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

import httpx

from clawd.client import sse_events

ROOT = Path(__file__).resolve().parents[1]  # the checkout


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


def start_server(cmd: list[str], port: int, log: Path, env: dict | None = None, timeout: float = 120) -> subprocess.Popen:
    """Any HTTP server (a `clawd serve`, llama-cpp-python's own), in its own session, up once /health
    answers at all (llama_cpp.server has none: its 404 is an answer)."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    wait_until_up(proc, f"http://127.0.0.1:{port}/health", log, timeout, up=lambda status: status < 500, name=cmd[2])
    return proc


def wait_until_up(proc: subprocess.Popen, health: str, log: Path, timeout: float, up: Callable[[int], bool],
                  name: str) -> None:
    """Polls `health` until `up(status)`; at once, with the log's tail, if the process exits first; on
    timeout the process is stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} (log {log}):\n{_tail(log)}")
        try:
            if up(httpx.get(health, timeout=1).status_code):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop(proc)
    raise RuntimeError(f"{name} did not answer {health} within {timeout:.0f} s (log {log}):\n{_tail(log)}")


def _tail(log: Path, chars: int = 2000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    """`sig` (a graceful stop by default), then SIGKILL after `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Daemon:
    """A `clawd serve` subprocess on its own home and port: what the tests and the benches start.

    The environment is the caller's with CLAWD_HOME set to `home`, then `env`; without
    `keep_clawd_env` the caller's own CLAWD_* variables are left out (a bench measures the daemon's
    defaults, not the user's settings). This checkout goes first on PYTHONPATH: the daemon runs this
    checkout's clawd wherever the caller runs from. The log (default `home`/../daemon-PORT.log) is appended to, one
    file across restarts. `new_session`: the daemon in a session of its own, out of the terminal's
    process group, so that a Ctrl-C reaches only the caller, which stops the daemon itself (the
    benches); without it a Ctrl-C stops the daemon with the caller (the tests: an interrupted run
    leaves no daemon behind). start() is ready once /health says 200 and may be called again after
    stop() (same port and home: a restart). rows()/turn()/count() read its database read-only: the
    daemon owns it."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None, log: Path | None = None,
                 keep_clawd_env: bool = True, new_session: bool = False):
        self.home, self.args, self.extra_env = Path(home), args, env or {}
        self.keep_clawd_env, self.new_session = keep_clawd_env, new_session
        self.port = free_port()
        self.log = log or self.home.parent / f"daemon-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def db(self) -> Path:
        return self.home / "clawd.db"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if self.keep_clawd_env or not k.startswith("CLAWD_")}
        env = env | {"CLAWD_HOME": str(self.home)} | self.extra_env
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        return env

    def start(self, timeout: float = 120) -> Self:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"the daemon on port {self.port} is already running")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:  # the daemon has its own copy of the file
            self.proc = subprocess.Popen([sys.executable, "-m", "clawd", "serve", "--port", str(self.port), *self.args],
                                         env=self.environment(), stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=self.new_session)
        wait_until_up(self.proc, self.url + "/health", self.log, timeout, up=lambda status: status == 200,
                      name="clawd serve")
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        if self.proc is not None:
            stop(self.proc, sig, timeout)

    def rows(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
        con.row_factory = sqlite3.Row
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def turn(self, completion_id: str) -> sqlite3.Row:
        rows = self.rows("SELECT * FROM turns WHERE completion_id = ?", (completion_id,))
        assert rows, f"turn {completion_id} not recorded"
        return rows[0]

    def count(self, table: str = "turns") -> int:
        return self.rows(f"SELECT COUNT(*) FROM {table}")[0][0]

    def client(self, **kw):
        """An OpenAI client for the daemon (`api_key`, `timeout`, ... passed on)."""
        from openai import OpenAI

        return OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "sk-local"), max_retries=0, **kw)


def write_result(name: str, data: dict) -> Path:
    """bench/out/<name>.json, for the numbers quoted in notes and the README."""
    path = Path(__file__).resolve().parent / "out" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    print(f"wrote {path}")
    return path
