"""The gate: a sane adapter passes, a NaN one and one with weights ×100 are rejected, say why,
and never become `current`. Real llama.cpp and peft on the bundled model."""

from __future__ import annotations

import json
import math
import secrets

import pytest
from publish_util import make_adapter

from clawd.config import Settings, bundled_model_path
from clawd.engine import Engine, GenInfo, Sampling
from clawd.publish import AdapterError, Adapters, GateConfig
from clawd.records import Judgment, Turn
from clawd.store import Store

QUESTIONS = ["What is 2 + 2?", "Name a primary color.", "What is the capital of Italy?", "Say hello in French."]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A home whose database holds positively judged turns answered by the base model."""
    home = tmp_path_factory.mktemp("gate") / "home"
    settings = Settings(home=home, threads=1)
    home.mkdir(parents=True)
    store = Store(home / "clawd.db")
    engine = Engine(bundled_model_path(), n_ctx=2048, threads=1, batch=128)  # 1 thread: the CI box has 2 busy cores
    sid = store.open_session("gate-test")
    for i, q in enumerate(QUESTIONS):
        prompt = engine.tokenize(engine.template.render([{"role": "user", "content": q}], None))
        with engine.lock.user():
            ids = [s.token for s in engine.generate(prompt, Sampling(temperature=0.0, seed=0, max_tokens=24), GenInfo())]
        t = Turn(session_id=sid, index=i, kind="main", completion_id="chatcmpl-" + secrets.token_hex(6),
                 request={"messages": [{"role": "user", "content": q}]}, prompt_ids=prompt, completion_ids=ids,
                 text=engine.detokenize(ids), status="ok", finish_reason="stop")
        store.insert_turn(t)
        store.finish_turn(t)
        store.add_judgment(Judgment(turn_id=t.id, method="score", score=1, judge_model="test"))
    yield settings, store, engine, [(t.prompt_ids + t.completion_ids) for t in store.turns()]
    store.close()


def _adapters_dir(settings, version):
    d = settings.home / "adapters" / f"{version:04d}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_gate_passes_sane_adapter_and_rejects_broken_ones(env):
    settings, store, engine, texts = env
    adapters = Adapters(settings, store)
    gate = GateConfig(turns=8, max_tokens=512, probe_tokens=24)
    # 1: one Adam step on the positively judged answers: it should make them likelier, not less
    make_adapter(_adapters_dir(settings, 1), train_ids=texts, steps=1, lr=1e-3, seed=1)
    # 2: the same kind of adapter with a NaN; 3: the trained one with B ×100
    make_adapter(_adapters_dir(settings, 2), train_ids=texts, steps=1, lr=1e-3, seed=1, nan=True)
    make_adapter(_adapters_dir(settings, 3), train_ids=texts, steps=1, lr=1e-3, seed=1, scale_b=100.0)

    ok = adapters.prepare(1, gate, gate_engine=engine)
    assert ok["passed"], ok["gate"]["reasons"]
    replay = ok["gate"]["replay"]
    assert replay["tokens"] > 20 and replay["drop"] < 0.1, replay  # answers it learned from got likelier
    adapters.use(1)
    assert adapters.registry.current() == 1

    nan = adapters.prepare(2, gate, gate_engine=engine)
    assert not nan["passed"] and "non-finite" in nan["gate"]["reasons"][0]

    big = adapters.prepare(3, gate, gate_engine=engine)
    assert not big["passed"]
    assert any(r.startswith("replay") for r in big["gate"]["reasons"]), big["gate"]["reasons"]
    assert big["gate"]["replay"]["drop"] > 1.0
    assert big["gate"]["reference"] == 1  # compared with what is live, not with the base

    # stored with the adapter, and a rejected adapter never goes live
    rows = {r["version"]: r for r in store.adapters()}
    assert rows[1]["status"] == "published" and rows[2]["status"] == rows[3]["status"] == "rejected"
    assert json.loads((settings.home / "adapters/0003/gate.json").read_text())["passed"] is False
    for v in (2, 3):
        with pytest.raises(AdapterError, match="rejected by the gate"):
            adapters.use(v)
    assert adapters.registry.current() == 1
    assert all(math.isfinite(x) for x in (replay["reference_mean"], replay["candidate_mean"]))
