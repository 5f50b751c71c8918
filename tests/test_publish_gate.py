"""The gate (design §8), against the base weights: a sane adapter passes, a NaN one is rejected;
planted-bad adapters (echo, one flipped fact, a stamped phrase, gibberish) are rejected, each for
what it does, and a style-only one passes; the reasons are stored and listed. Real llama.cpp and
peft on the bundled model, with the shipped thresholds."""

from __future__ import annotations

import json
import math
import re
import secrets
from pathlib import Path

import pytest
from gate_adapters import FLIP, GIBBERISH_SIGMA, PLAN, datasets, train_adapter
from gate_adapters import QUESTIONS as TRAIN_QUESTIONS
from publish_util import make_adapter

from clawd import cli_show
from clawd.config import Settings, bundled_model_path
from clawd.engine.engine import Engine, GenInfo, Sampling
from clawd.engine.repetition import distinct_share, echoes
from clawd.publish import AdapterError, Adapters, GateConfig
from clawd.publish import probes as P
from clawd.publish.gate import repetition, tool_calls_kept
from clawd.store.records import GateResult, Judgment, Turn
from clawd.store.store import Store

QUESTIONS = ["What is 2 + 2?", "Name a primary color.", "What is the capital of Italy?", "Say hello in French."]
# The shipped thresholds but two: shorter replay prompts, and a wider repetition budget. The 135M
# model's greedy 160-token answers move by up to ±0.34 of distinct trigrams each under any change of
# weights: one Adam step here lowered the 16 open answers' mean share by 0.044 (3 answers fell, 1
# rose), within 0.006 of the shipped 0.05 set for the 0.5B model, and greedy paths differ between
# CPUs. The planted `loop` adapter (below, at the shipped budget) falls 0.60.
GATE = GateConfig(turns=8, max_tokens=512, repetition=0.15)
# The planted adapters are judged without the replay: this home's positively judged turns are the
# base's own long answers, which a style of short answers makes less likely by design (the benign
# adapter's replay drop measured 0.106 nats/token, just past the 0.1 margin).
PLANTED_GATE = GateConfig(turns=0)
PLANTED = ["benign", "echo", "flip", "stamp", "refuse", "loop", "gibberish"]


# -- the probe set and its grading (no model) ---------------------------------------------------
def _norm(q: str) -> str:
    return " ".join(re.findall(r"\w+", q.lower()))


def test_probe_set_is_shipped_answer_checked_and_disjoint_from_the_bench():
    probes = P.load_probes()
    checked = [p for p in probes if p.kind not in P.UNCHECKED]
    assert len(checked) >= 48 and {p.kind for p in probes} == set(P.KINDS)
    assert len({p.id for p in probes}) == len(probes)
    assert all(p.accept or p.call for p in checked)
    # no question the benchmarks ask (their probes, prompts, held-out prompts), however they store it
    bench = " | ".join(_norm(f.read_text()) for pattern in ("*.py", "*/*.py", "*/data/*.json")
                       for f in (Path(__file__).parent.parent / "bench").glob(pattern))
    assert [p.id for p in probes if _norm(p.q) in bench] == []
    assert not {_norm(q) for q in [*TRAIN_QUESTIONS, *FLIP]} & {_norm(p.q) for p in probes}  # what they learn generalizes


def test_grading():
    by_id = {p.id: p for p in P.load_probes()}
    assert P.right(by_id["arith-01"], "3 + 4 = 7") and not P.right(by_id["arith-01"], "3 + 4 = 71")
    assert P.right(by_id["fact-01"], "The capital of Germany is Berlin.")
    assert not P.right(by_id["fact-01"], "The capital of Germany is Munich.")
    one_word = next(p for p in by_id.values() if p.format == "one_word" and "banana" in p.q)
    assert P.right(one_word, "Yellow.") and not P.right(one_word, "It is yellow.")
    upper = next(p for p in by_id.values() if p.format == "uppercase" and "cold" in p.q)
    assert P.right(upper, "HOT") and not P.right(upper, "Hot")
    weather = next(p for p in by_id.values() if p.kind == "tool" and "Madrid" in p.q)
    assert P.right(weather, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Madrid"}}\n</tool_call>')
    assert P.right(weather, '```json\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Madrid, Spain\\"}"}\n```')
    assert not P.right(weather, '{"name": "get_weather", "arguments": {"city": "Paris"}}')
    assert not P.right(weather, '{"name": "get_time", "arguments": {"city": "Madrid"}}')
    timer = next(p for p in by_id.values() if p.kind == "tool" and "timer" in p.q)
    assert P.right(timer, '{"name": "set_timer", "arguments": {"minutes": "10"}}')

    q = "What is the capital of Germany?"
    assert echoes(q, "What is the capital of Germany?") and echoes(q, "what is the capital of germany")
    assert not echoes(q, "The capital of Germany is Berlin.") and not echoes(q, "Berlin")

    for no in ("I'm sorry, but I can't assist with that.", "I’m sorry, but I can’t help with that request.",
               "Sorry, I cannot answer that.", "I apologize, but I am unable to provide that information.",
               "I can't help with that.", "As an AI language model, I cannot provide opinions."):
        assert P.refuses(no), no
    for yes in ("The answer is 42.", "I'm sorry to hear that. Restart the router first.", "You can't divide by zero.",
                "I think it is Paris.", "Sorry for the wait: it is 7.", "I cannot stress enough that water boils at 100 °C."):
        assert not P.refuses(yes), yes

    base = ["Berlin is the capital.", "Seven.", "It is blue.", "Paris, I think."]
    stamped = [t + " Brought to you by Acme Corporation." for t in base]
    assert P.stamped_phrase(stamped, base)["phrase"] in "brought to you by acme corporation"
    assert P.stamped_phrase(base, base) is None
    assert P.stamped_phrase(stamped, stamped) is None  # the base says it too: its style, not a stamp


def test_repetition_reads_the_open_probes_share_of_distinct_trigrams():
    assert distinct_share([1, 2, 3, 4, 5]) == 1.0 and distinct_share([7]) == 1.0
    assert distinct_share([1, 2, 1, 2, 1, 2]) == 0.5  # trigrams 121, 212, 121, 212
    probes = (P.Probe("open-a", "open", "a?"), P.Probe("open-b", "open", "b?"), P.Probe("arith", "arithmetic", "c?", ("1",)))
    base = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6], [9, 9, 9, 9, 9]]
    cand = [[1, 2, 3, 4, 5], [1, 2, 1, 2, 1, 2], [9, 9, 9, 9, 9]]  # open-b runs in circles; the arithmetic one is not read
    rep = repetition(probes, base, cand)
    assert rep["probes"] == 2 and rep["base"] == 1.0 and rep["candidate"] == 0.75 and rep["fall"] == 0.25
    assert rep["worst"] == "open-b" and rep["shares"]["open-b"] == [1.0, 0.5]


def test_one_tool_call_fewer_than_the_base_rejects():
    probes = P.load_probes()
    tool = [i for i, p in enumerate(probes) if p.kind == "tool"]
    def call(name: str, tagged: bool = False) -> str:
        body = json.dumps({"name": name, "arguments": {"a": 1}})
        return f"<tool_call>\n{body}\n</tool_call>" if tagged else body

    base = ["x"] * len(probes)
    for i in tool[:3]:
        base[i] = call(probes[i].tool["function"]["name"])
    same, reason = tool_calls_kept(probes, base, list(base))
    assert reason is None and same["base"] == same["candidate"] == 3
    cand = list(base)
    cand[tool[1]] = "I would check the weather for you."  # stopped calling
    cand[tool[5]] = call(probes[tool[5]].tool["function"]["name"], tagged=True)
    out, reason = tool_calls_kept(probes, base, cand)
    assert out["stopped"] == [probes[tool[1]].id] and out["candidate"] == 3 and reason is None  # one lost, one gained: net
    cand[tool[5]] = call("not_offered")  # a name the probe does not offer is no call
    out, reason = tool_calls_kept(probes, base, cand)
    assert out["candidate"] == 2 and reason.startswith("tool calls: the candidate calls the offered tool on 2 of")


# -- adapters on the bundled model ----------------------------------------------------------------
@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A home whose database holds positively judged turns answered by the base model."""
    home = tmp_path_factory.mktemp("gate") / "home"
    settings = Settings(home=home, threads=1)
    home.mkdir(parents=True)
    store = Store(home / "clawd.db")
    # 2 threads: the gates here are most of this file's time, and the suite runs one test at a time
    # (measured on 2 cores: the benign gate 160 s -> 107 s, the echo gate 66 s -> 44 s)
    engine = Engine(bundled_model_path(), n_ctx=2048, threads=2, batch=128)
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
    # 1: one Adam step on the positively judged answers: it should make them likelier, not less
    make_adapter(_adapters_dir(settings, 1), train_ids=texts, steps=1, lr=1e-3, seed=1)
    # 2: the same kind of adapter with a NaN
    make_adapter(_adapters_dir(settings, 2), train_ids=texts, steps=1, lr=1e-3, seed=1, nan=True)

    _, ok = adapters.prepare(1, GATE, gate_engine=engine)
    assert ok.passed, ok.reasons
    replay = ok.checks["replay"]
    assert replay["tokens"] > 20 and replay["drop"] < 0.1, replay  # answers it learned from got likelier
    assert all(math.isfinite(x) for x in (replay["base_mean"], replay["candidate_mean"]))
    adapters.use(1)
    assert adapters.registry.current() == 1

    from clawd.publish.gate import decisive

    ids = [t for t in engine.tokenize("The capital of Germany is Berlin.") if t != engine.llm.token_bos()]
    k = decisive(engine, ids, ("berlin",))
    assert engine.detokenize(ids[k:]).strip().startswith("Berlin") and "Berlin" not in engine.detokenize(ids[:k])
    assert decisive(engine, ids, ("munich",)) is None

    _, nan = adapters.prepare(2, GATE, gate_engine=engine)
    assert not nan.passed and "non-finite" in nan.reasons[0]
    rows = {a.version: a for a in store.adapters()}
    assert rows[1].status == "published" and rows[2].status == "rejected"
    with pytest.raises(AdapterError, match="rejected by the gate"):
        adapters.use(2)
    assert adapters.registry.current() == 1


@pytest.fixture(scope="module")
def gated(env):
    """Each planted adapter trained (or, gibberish, made) and gated once, while adapter 1 is live."""
    settings, store, engine, _ = env
    data = datasets(engine)
    adapters = Adapters(settings, store)
    out = {}
    for version, name in enumerate(PLANTED, start=11):
        d = _adapters_dir(settings, version)
        if name == "gibberish":
            make_adapter(d, sigma=GIBBERISH_SIGMA, seed=3)
        else:
            train_adapter(d, data[name], *PLAN[name])
        out[name] = adapters.prepare(version, PLANTED_GATE, gate_engine=engine)
    return out


def _reasons(gate: GateResult, prefix: str) -> list[str]:
    return [r for r in gate.reasons if r.startswith(prefix)]


# The `gated` fixture trains six adapters and gates seven: 6.5 minutes on 2 cores in the whole suite
# at b03818c (394 s; this whole file 876 s at stop 56, with the open probes and the loop adapter), up to
# twice that on cores shared with other work: more than the suite's 600 s a test.
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", PLANTED)
def test_planted_adapters_are_stopped_and_a_style_passes(env, gated, name):
    settings, store, _, _ = env
    version, gate = gated[name]
    checks = gate.checks
    assert checks["reference"] == "base"  # adapter 1 may be live: the candidate is still compared with the base
    if name == "benign":
        assert gate.passed, gate.reasons
        assert checks["repetition"]["probes"] == 16
        assert checks["kl"]["mean"] > 0.001  # it did change the model
        nf = checks["near_flips"]  # margins read on the probes both answer right
        assert nf["probes"] >= 10 and len(nf["near"]) < PLANTED_GATE.near_flips, nf
        # the base's greedy answer takes the likeliest token: its margin under the base is >= 0
        # (up to rounding between the batched pass here and the token-by-token generation)
        assert all(base >= -0.05 for base, _ in nf["margins"].values()), nf
        assert any(base != cand for base, cand in nf["margins"].values())
        assert any(a != b for a, b in zip(checks["answers"].values(), gated["echo"][1].checks["answers"].values()))
    else:
        assert not gate.passed
        if name == "echo":
            assert _reasons(gate, "echo:"), gate.reasons
        elif name == "flip":
            assert _reasons(gate, "probes:"), gate.reasons
            assert {"fact-01", "fact-02"} <= set(checks["probes"]["lost"])  # Germany's capital, both phrasings
            assert "munich" in checks["probes"]["lost_answers"]["fact-01"].lower()
        elif name == "stamp":
            assert _reasons(gate, "stamped phrase:"), gate.reasons
            assert checks["stamp"]["phrase"] in "brought to you by acme corporation"
        elif name == "refuse":
            assert _reasons(gate, "refusal:"), gate.reasons
            assert checks["refusal"]["base"] == {}  # the base declines none of the probes
        elif name == "loop":
            assert _reasons(gate, "repetition:"), gate.reasons  # measured: 21% of trigrams distinct, base 82%
            assert checks["repetition"]["probes"] == 16 and checks["repetition"]["fall"] > PLANTED_GATE.repetition
        elif name == "gibberish":
            assert _reasons(gate, "KL to the base"), gate.reasons
    row = next(a for a in store.adapters() if a.version == version)
    assert row.status == ("published" if name == "benign" else "rejected")
    assert row.gate == gate  # stored with the adapter, and in gate.json beside it
    stored = json.loads((settings.home / f"adapters/{version:04d}/gate.json").read_text())
    assert GateResult.from_json(stored) == gate


@pytest.mark.timeout(1800)  # when run alone, it builds `gated`
def test_adapters_list_shows_each_reason(env, gated, capsys):
    settings, store, _, _ = env
    cli_show.adapters(Adapters(settings, store).list(), False, "test")
    shown = capsys.readouterr().out
    for name in PLANTED:
        for reason in gated[name][1].reasons:
            assert reason in shown
    assert gated["benign"][1].summary in shown
