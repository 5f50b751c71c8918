"""The `clawd serve` harness the tests own and the benches import (bench/common.py): a free port, a
subprocess up once it answers, and Daemon, a `clawd serve` on its own home and port."""

from __future__ import annotations

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
