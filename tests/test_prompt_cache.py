"""The prompt cache (clawd/engine/prompt_cache.py) on the bundled model, with real llama.cpp: a side call
or another session between two turns costs the second turn nothing, least recently used states
go first, states survive a daemon restart and are refused after the model file changes or when
corrupt, an adapter swap invalidates them, and no answer differs from a cold run's."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import Daemon, fixture, shorten

from clawd.config import Settings, bundled_model_path
from clawd.engine.engine import Engine, GenInfo, Sampling
from clawd.engine.prompt_cache import ALIGN, MB, carries, chunks, common_prefix, reusable
from clawd.judge.judge import Judge
from clawd.store.records import NextState, Turn


# -- the rules, no model ------------------------------------------------------------------------
@pytest.mark.fast
def test_chunks_start_aligned_and_none_is_a_lone_token():
    for start, end, batch in [(0, 700, 512), (64, 1089, 512), (96, 97 + 512, 512), (0, 1, 512), (32, 545, 100), (0, 513, 512)]:
        cs = chunks(start, end, batch)
        assert cs[0][0] == start and cs[-1][1] == end and all(b == c for (_, b), (c, _) in zip(cs, cs[1:]))
        assert all(a % ALIGN == 0 for a, _ in cs) and all(b - a <= max(batch, ALIGN + 1) for a, b in cs)
        assert end - start == 1 or all(b - a >= 2 for a, b in cs), cs


@pytest.mark.fast
def test_reuse_is_aligned_and_leaves_two_tokens():
    assert reusable(1000, 5000) == 1000 // ALIGN * ALIGN
    assert reusable(5000, 5000) == 4998 // ALIGN * ALIGN  # a repeated prompt still evaluates its end
    assert reusable(ALIGN - 1, 5000) == 0 and reusable(10, 11) == 0


@pytest.mark.fast
def test_a_request_carries_an_answer_sent_back():
    answer = np.arange(100, 120, dtype=np.int32)
    resent = np.concatenate([np.arange(50, dtype=np.int32), [7], answer[1:], [2, 3]]).astype(np.int32)
    assert carries(resent, 50, answer)
    assert not carries(np.arange(50, 90, dtype=np.int32), 10, answer)
    assert not carries(resent, 50, answer[:3])  # too short to tell


# -- the engine -----------------------------------------------------------------------------------
def chat(engine: Engine, system: str, *turns: str) -> list[int]:
    msgs = [{"role": "system", "content": system}]
    for i, text in enumerate(turns):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return engine.tokenize(engine.template.render(msgs))


def run(engine: Engine, prompt: list[int], max_tokens: int = 12) -> tuple[list[int], list[float], GenInfo]:
    info = GenInfo()
    with engine.lock.user():
        steps = list(engine.generate(prompt, Sampling(temperature=0, max_tokens=max_tokens, seed=1), info))
    return [s.token for s in steps], [s.logprob for s in steps], info


SYSTEM = "You are the assistant of a lighthouse keeper on a rocky island. Answer briefly and precisely. " * 20


@pytest.fixture(scope="module")
def cold() -> Engine:
    return Engine(bundled_model_path(), n_ctx=2048, threads=2)


def conversation(engine: Engine) -> tuple[list[int], list[int], list[int]]:
    """Session A's first turn, a side call (a summary, its own system prompt), A's second turn."""
    a1 = chat(engine, SYSTEM, "How do I clean the lens?")
    answer = engine.detokenize(run(engine, a1)[0]) if engine.cache is not None else "Use a soft cloth and alcohol."
    side = chat(engine, "You summarize conversations in one paragraph.",
                "Summarize: the keeper cleaned the lens, then fixed the lamp and logged the ships. " * 6)
    a2 = chat(engine, SYSTEM, "How do I clean the lens?", answer, "And how often?")
    return a1, side, a2


def test_a_side_call_between_two_turns_costs_the_second_nothing(cold):
    engine = Engine(bundled_model_path(), n_ctx=2048, threads=2, cache_mb=64)
    a1, side, a2 = conversation(engine)  # A's first turn runs here
    run(engine, side)
    tokens, logprobs, info = run(engine, a2)
    shared = common_prefix(np.array(a1), np.array(a2))
    assert shared > 300 and info.cache == "memory"
    assert info.n_cached == reusable(shared, len(a2)) and len(a2) - info.n_cached < len(a2) - shared + ALIGN

    # Without the cache (today's behaviour before issue 15) the side call costs all of it.
    run(cold, a1)
    run(cold, side)
    cold_tokens, cold_logprobs, cold_info = run(cold, a2)
    assert cold_info.n_cached == 0
    # ...and the answer is the cold one: same tokens, same logprobs (the reused prefix is computed as a cold run computes it)
    assert tokens == cold_tokens and logprobs == pytest.approx(cold_logprobs, abs=1e-5)


def test_answers_equal_a_cold_run(cold, tmp_path):
    """Greedy answers with a prefix from the live context, from memory and from disk are the cold
    run's token for token: compared with a fresh context evaluating the whole prompt."""
    engine = Engine(bundled_model_path(), n_ctx=2048, threads=2, cache_mb=64, cache_dir=tmp_path / "cache", cache_disk_mb=64)
    b1 = chat(engine, SYSTEM, "What oil does the lamp burn?")
    b2 = chat(engine, SYSTEM, "What oil does the lamp burn?", "Paraffin.", "How much a night?")
    c1 = chat(engine, SYSTEM, "Which ships pass at night?")  # another session: shares the system prompt
    got = {}
    run(engine, b1)
    got["live"] = run(engine, b2)  # continues B: the live context's prefix
    got["another session"] = run(engine, c1)  # shares the system prompt with the live context
    engine.close()  # to disk
    again = Engine(bundled_model_path(), n_ctx=2048, threads=2, cache_mb=64, cache_dir=tmp_path / "cache", cache_disk_mb=64)
    got["disk"] = run(again, b2)
    sources = {name: info.cache for name, (_, _, info) in got.items()}
    assert sources == {"live": "live", "another session": "live", "disk": "disk"}, sources
    for name, (tokens, logprobs, info) in got.items():
        prompt = c1 if name == "another session" else b2
        with cold.lock.user():
            cold.llm.reset()
        ref_tokens, ref_logprobs, ref_info = run(cold, prompt)
        assert ref_info.n_cached == 0 and info.n_cached > 300, name
        assert tokens == ref_tokens and logprobs == pytest.approx(ref_logprobs, abs=1e-5), name


def test_least_recently_used_states_go_first_under_a_tiny_budget():
    """Four sessions with nothing in common, room for two kept states (each 2.8 MiB)."""
    engine = Engine(bundled_model_path(), n_ctx=1024, threads=2, cache_mb=6)
    prompts = [chat(engine, f"{name} " + "Answer in one short sentence about the weather today. " * 12, "Hi")
               for name in ("Alpha.", "Bravo team here.", "Charlie speaking.", "Delta rules.")]
    assert all(len(p) // ALIGN * ALIGN == 128 for p in prompts)  # 128 positions kept: 128 × 22.5 KiB = 2.8 MiB each
    assert all(reusable(common_prefix(np.array(p), np.array(q)), len(q)) == 0 for p in prompts for q in prompts if p is not q)
    for p in prompts:  # each request leaves the one before: 0, 1, 2 are kept, and 0 goes first
        run(engine, p, max_tokens=2)
    st = engine.cache.status()
    assert st["entries"] == 2 and st["bytes"] <= 6 * MB
    assert run(engine, prompts[0], max_tokens=2)[2].cache == "none"  # evicted (keeping 3 pushed out 1)
    assert run(engine, prompts[2], max_tokens=2)[2].cache == "memory"
    assert run(engine, prompts[1], max_tokens=2)[2].cache == "none"


def lora_gguf(out: Path, seed: int = 0) -> Path:
    """A random LoRA on the bundled model's v and o projections (strong: it changes greedy answers),
    written as peft would save it and converted by clawd's own converter."""
    from safetensors.numpy import save_file

    from clawd.publish.convert import BaseInfo, convert_adapter

    rng = np.random.default_rng(seed)
    d, kv, r = 576, 192, 8  # SmolLM2-135M: hidden size, k/v width (3 heads of 64)
    tensors = {}
    for layer in range(30):
        for module, (n_in, n_out) in {"self_attn.v_proj": (d, kv), "self_attn.o_proj": (d, d)}.items():
            name = f"base_model.model.model.layers.{layer}.{module}"
            tensors[f"{name}.lora_A.weight"] = rng.normal(0, 0.05, (r, n_in)).astype(np.float32)
            tensors[f"{name}.lora_B.weight"] = rng.normal(0, 0.2, (n_out, r)).astype(np.float32)
    peft = out.parent / "peft"
    peft.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(peft / "adapter_model.safetensors"))
    (peft / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": 2 * r, "target_modules": ["v_proj", "o_proj"]}))
    convert_adapter(peft, BaseInfo.of(bundled_model_path()), out)
    return out


def test_a_swap_or_a_reload_invalidates_the_states_of_the_old_weights(tmp_path, caplog):
    engine = Engine(bundled_model_path(), n_ctx=2048, threads=2, cache_mb=64, cache_dir=tmp_path / "cache", cache_disk_mb=64)
    a1, side, _ = conversation(engine)
    run(engine, side)  # A's state is kept
    assert run(engine, a1)[2].cache == "memory"
    base_answer = run(engine, a1)[0]
    run(engine, side)
    engine.close()  # A's and the live side call's states, to disk, as at a shutdown
    assert engine.cache.status()["disk_entries"] == 2

    adapter = lora_gguf(tmp_path / "adapter.gguf")
    engine.set_adapter(adapter, 1)
    with caplog.at_level(logging.INFO, logger="clawd.cache"):
        tokens, logprobs, info = run(engine, a1)
    assert info.cache == "none" and info.n_cached == 0  # nothing computed under the base weights was restored
    assert "computed under another adapter" in caplog.text
    assert list((tmp_path / "cache").glob("*.kv")) == []  # nor will it be after a restart
    fresh = Engine(bundled_model_path(), n_ctx=2048, threads=2)
    fresh.set_adapter(adapter, 1)
    ref_tokens, ref_logprobs, _ = run(fresh, a1)
    assert tokens == ref_tokens != base_answer and logprobs == pytest.approx(ref_logprobs, abs=1e-5)

    # A merge reloads another model file: the adapter's states go the same way.
    run(engine, side)
    assert run(engine, a1)[2].cache == "memory"  # kept under the adapter
    copy = tmp_path / "merged.gguf"
    shutil.copy(bundled_model_path(), copy)
    engine.reload(copy)
    assert run(engine, a1)[2].cache == "none"


def test_a_corrupt_state_file_is_dropped_never_loaded(tmp_path, caplog):
    cache = tmp_path / "cache"
    engine = Engine(bundled_model_path(), n_ctx=2048, threads=2, cache_mb=64, cache_dir=cache, cache_disk_mb=64)
    a1, _, a2 = conversation(engine)
    engine.close()
    (path,) = cache.glob("*.kv")
    data = bytearray(path.read_bytes())
    data[-1000] ^= 0xFF  # one flipped byte in the K/V data
    path.write_bytes(bytes(data))
    again = Engine(bundled_model_path(), n_ctx=2048, threads=2, cache_mb=64, cache_dir=cache, cache_disk_mb=64)
    with caplog.at_level(logging.WARNING, logger="clawd.cache"):
        info = run(again, a2)[2]
    assert info.cache == "none" and info.n_cached == 0
    assert "does not match its header" in caplog.text and not path.exists()


# -- the daemon, over HTTP ----------------------------------------------------------------------
def openclaw(name: str, **changes) -> dict:
    """A real OpenClaw request, cut to fit the bundled model and a test's minutes: the system prompt
    shortened, two of its twelve tools."""
    body = shorten(fixture(name), 2500)
    if body.get("tools"):
        body["tools"] = body["tools"][:2]
    for m in body["messages"]:
        if m["role"] == "user" and isinstance(m["content"], str) and len(m["content"]) > 3000:
            m["content"] = m["content"][:3000]
        if m["role"] == "user" and isinstance(m["content"], list):
            for part in m["content"]:
                part["text"] = part["text"][:3000]
    body.update(stream=False, temperature=0, max_completion_tokens=changes.pop("max_tokens", 8), **changes)
    body.pop("stream_options", None)
    return body


def ask(d: Daemon, body: dict) -> tuple[dict, dict]:
    r = httpx.post(d.url + "/v1/chat/completions", json=body, timeout=600)
    assert r.status_code == 200, r.text
    out = r.json()
    return out, json.loads(d.turn(out["id"])["timings"])


def prompt_ids(d: Daemon, completion_id: str) -> np.ndarray:
    return np.frombuffer(d.turn(completion_id)["prompt_ids"], dtype=np.int32)


def turn2_after(answer: dict) -> dict:
    body = openclaw("turn2_same_session")
    (assistant,) = [m for m in body["messages"] if m["role"] == "assistant"]
    assistant["content"] = answer["choices"][0]["message"]["content"] or ""
    return body


def test_openclaw_turn_side_call_turn_over_http(tmp_path):
    d = Daemon(tmp_path / "home", "--ctx", "4096", "--prompt-cache-mb", "256").start()
    try:
        r1, _ = ask(d, openclaw("turn1_first_request"))
        _, side = ask(d, openclaw("compaction_request"))
        assert json.loads(d.turn(r1["id"])["timings"])["cached_from"] == "none" and side["cached_tokens"] == 0
        r2, t2 = ask(d, turn2_after(r1))
        shared = common_prefix(prompt_ids(d, r1["id"]), prompt_ids(d, r2["id"]))
        assert shared > 1000 and t2["cached_from"] == "memory"
        assert t2["evaluated_prompt_tokens"] < t2["prompt_tokens"] - shared + ALIGN, t2  # only what turn 2 added
        assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == t2["cached_tokens"]
        st = httpx.get(d.url + "/v1/clawd/status").json()["prompt_cache"]
        assert st["hits"]["memory"] == 1 and st["entries"] >= 1 and st["budget_bytes"] == 256 * MB
    finally:
        d.stop()


def test_states_survive_a_restart_and_not_a_changed_model_file(tmp_path):
    model = tmp_path / "model.gguf"
    shutil.copy(bundled_model_path(), model)
    home = tmp_path / "home"
    d = Daemon(home, "--ctx", "4096", "--model", str(model), "--auto-learn", "false")
    d.start()
    try:
        ask(d, openclaw("turn1_first_request"))
    finally:
        d.stop()  # SIGTERM: the live state is written to home/cache
    assert len(list((home / "cache").glob("*.kv"))) == 1

    other_session = openclaw("turn1_first_request")  # a new session: its first message differs
    other_session["messages"][1]["content"] = other_session["messages"][1]["content"].replace("hello", "list my files")
    d.start()
    try:
        r, t = ask(d, other_session)
        assert t["cached_from"] == "disk" and t["cached_tokens"] > 1000, t
    finally:
        d.stop()

    os.utime(model, (model.stat().st_atime, model.stat().st_mtime + 60))  # the model file changed (say, re-downloaded)
    d.start()
    try:
        r, t = ask(d, other_session)
        assert t["cached_from"] == "none" and t["cached_tokens"] == 0, t
    finally:
        d.stop()
    log = (home / "clawd.log").read_text()
    assert "dropped 2 cached prompt state(s) computed under another model" in log, log[-2000:]  # both sessions'
    assert len(list((home / "cache").glob("*.kv"))) == 1  # and the files: only this run's state is left


# -- the judge's context ------------------------------------------------------------------------
def test_judging_a_turn_evaluates_only_that_turn(cold, tmp_path):
    """The judge's worked examples (~1.3k tokens) stay in its background context: the second turn
    judged evaluates only its own part of the prompt."""
    judge = Judge(cold, None, Settings(home=tmp_path))

    def turn(i: int, request: str, reply: str, after: str) -> tuple[Turn, NextState]:
        t = Turn(session_id=1, index=0, kind="main", completion_id=f"c{i}", id=i, prompt_ids=[], status="ok",
                 request={"messages": [{"role": "user", "content": request}]}, text=reply)
        return t, NextState(turn_id=i, role="user", content=after, messages=[{"role": "user", "content": after}])

    ctx = judge.context
    ctx._truncate(0)
    judge.features(*turn(1, "What is the capital of Peru?", "Lima.", "Thanks!"))
    first = ctx.evaluated
    prompt = cold.tokenize(judge.ask_prompt(*turn(2, "Write a limerick about a cat.", "There once was a cat...", "Shorter.")))
    judge.features(*turn(2, "Write a limerick about a cat.", "There once was a cat...", "Shorter."))
    second = ctx.evaluated - first
    fixed = len(cold.tokenize(judge.ask_prompt(*turn(3, "", "", "")).rsplit("Request:", 1)[0]))
    assert first > fixed > 1000
    assert second <= len(prompt) - fixed + 8, (second, len(prompt), fixed)  # the turn, and the verdict words
