"""SIGKILL mid-stream, mid-judge and mid-training, then restart: every answer a client received
in full is recorded, the database is intact, the trainer dies with the daemon, and a last daemon
leaves nothing half-done (issue 8). `bench/reliability/chaos.py` runs the same with 50 kills."""

from __future__ import annotations

import pytest
from conftest import seed_judge

from bench.reliability import chaos


@pytest.mark.timeout(1500)
def test_sigkill_loses_nothing(tmp_path):
    seed_judge(tmp_path / "home")  # calibrated once per test session, not under fire
    res = chaos.run(kills=3, seed=5, model=None, workdir=tmp_path, phases=("stream", "judging", "training"))
    assert not res["violations"], res["violations"]
    assert res["received"] > 0
    # each kill landed where it was aimed: mid-stream, mid-judge, mid-training
    assert [k["doing"].split(" ")[0] for k in res["kills"]] == ["streaming", "judging", "training"], res["kills"]
    assert "running" not in res["final"]["train_runs"]  # the killed round was resumed and finished, or retired
