"""SIGKILL mid-stream, mid-judge and mid-training, then restart: every answer a client received
in full is recorded, the database is intact, the trainer dies with the daemon, and a last daemon
finishes what the kills interrupted (issue 8). `bench/chaos.py` runs the same with 50 kills."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import chaos  # noqa: E402


@pytest.mark.timeout(1500)
def test_sigkill_loses_nothing(tmp_path):
    res = chaos.run(kills=3, seed=5, model=None, workdir=tmp_path, phases=("stream", "judging", "training"))
    assert not res["violations"], res["violations"]
    assert res["received"] > 0
    assert [k["doing"] != "timed out" for k in res["kills"]] == [True] * 3, res["kills"]
    assert res["final"]["train_runs"].get("done", 0) >= 1  # the interrupted round was resumed and finished
