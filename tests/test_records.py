"""The typed records after the judge (issue 16) survive their JSON round trips, and read the
layouts that older databases and daemons wrote."""

from __future__ import annotations

import json

import pytest

from clawd.store.answers import LiveAdapter, ModelStatus, Status, TrainingStatus
from clawd.store.records import GateResult, RoundState, TrainEvent

pytestmark = pytest.mark.fast


def test_train_event_is_flat_in_json_and_reads_back():
    e = TrainEvent("done", run_id=3, version=2, step=8, steps=8, loss=-0.25,
                   detail={"path": "/h/adapters/0002", "losses": [0.1, -0.25]}, at=5.0)
    d = json.loads(json.dumps(e.to_json()))
    assert d["event"] == "done" and d["version"] == 2 and d["path"] == "/h/adapters/0002" and d["at"] == 5.0
    assert "detail" not in d and "error" not in d  # unset fields are left out, as status always showed them
    assert TrainEvent.from_json(d) == e and e.final and not TrainEvent("step").final


def test_gate_result_reads_the_flat_layout_older_rows_have():
    old = {"passed": False, "reasons": ["probes: 2 more wrong"], "config": {"margin": 1.0}, "reference": "base",
           "probes": {"lost": ["fact-01"]}, "seconds": 12.5}  # a row written before GateResult
    g = GateResult.from_json(old)
    assert not g.passed and g.reasons == ["probes: 2 more wrong"] and g.seconds == 12.5 and g.summary is None
    assert g.checks["probes"]["lost"] == ["fact-01"] and "passed" not in g.checks
    assert g.to_json() == old and GateResult.from_json(g.to_json()) == g


def test_status_round_trips_through_json():
    st = Status(version="0.1", uptime_s=3.0, model=ModelStatus("clawd", "/m.gguf", 8192, 8192, 0.5), device="cpu",
                adapter=LiveAdapter(2, 60.0), turns={"turns": 4}, recent_scores=[1, -1], judge={"mode": "trusted"},
                doing="idle", doing_since_s=1.0, in_flight=0,
                training=TrainingStatus(last=TrainEvent("waiting", error="no room", detail={"memory_plan": {"decision": "wait"}}, at=1.0),
                                        progress=TrainEvent("step", run_id=1, step=2, steps=4, loss=0.5),
                                        last_publish=None, batch=16, ready=3, backend="lora", backend_setting="auto",
                                        auto=True, idle_seconds=60.0, paused=False),
                prompt_cache=None, memory_mb=100.0, home="/h")
    d = json.loads(json.dumps(st.to_json()))
    assert d["training"]["last"]["memory_plan"] == {"decision": "wait"} == d["training"]["memory_plan"]
    assert d["adapter"] == {"version": 2, "age_s": 60.0}
    assert Status.from_json(d) == st


def test_round_state_reads_a_checkpoint_of_another_version():
    saved = {"turn_ids": [1, 2], "parent": None, "knobs": {"lr": 1e-4}, "run_id": 7, "step": 3, "losses": [0.1] * 3,
             "from_a_later_version": True}
    st = RoundState.from_saved(saved)
    assert st.run_id == 7 and st.step == 3 and not st.scored and st.kl == [] and st.version is None
