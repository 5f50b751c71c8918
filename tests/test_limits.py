"""What one request may ask for (issue 31): every bound is checked before work grows with the
input, a refused request never takes the engine, and the next request is not held up by it."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from conftest import MODEL, Daemon

from clawd.config import Settings
from clawd.engine.engine import Engine
from clawd.engine.tool_calls import MAX_GRAMMAR_BYTES, MAX_REPEAT, CallTrigger
from clawd.serve import protocol
from clawd.serve.chat import ChatService
from clawd.store.store import Store

OK = [{"role": "user", "content": "hi"}]


def tools(n: int, **params) -> list[dict]:
    """n tools in the issue's shape: a name and an object schema, nothing else."""
    return [{"type": "function", "function": {"name": f"t{i}", "parameters": {"type": "object", **params}}}
            for i in range(n)]


def nested(depth: int) -> dict:
    schema: dict = {"type": "object"}
    for _ in range(depth - 1):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


# 40 string arguments of up to 4,000 characters: a prompt of a few hundred tokens, but llama.cpp's
# converter writes each bound out (about 30 KB of grammar apiece), over MAX_GRAMMAR_BYTES in all
WIDE = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": MAX_REPEAT - 96} for i in range(40)}}
CASES = {  # name: (body, the error code)
    "129 tools": ({"messages": OK, "tools": tools(129), "max_tokens": 1}, "too_many_tools"),
    "1,000 tools": ({"messages": OK, "tools": tools(1000), "max_tokens": 1}, "too_many_tools"),
    "a schema nested 65 deep": ({"messages": OK, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": nested(protocol.MAX_SCHEMA_DEPTH + 1)}}]}, "schema_too_deep"),
    "a grammar over the bound": ({"messages": OK, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": WIDE}}], "max_tokens": 1}, "tool_grammar_too_large"),
    "a stop of 257 characters": ({"messages": OK, "stop": "x" * (protocol.MAX_STOP_CHARS + 1)}, None),
    "a 1.5 MB prompt": ({"messages": [{"role": "user", "content": "word " * 300_000}]}, "context_length_exceeded"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_request_past_a_bound_gets_a_400_naming_it(daemon: Daemon, name):
    body, code = CASES[name]
    before = daemon.count()
    r = httpx.post(daemon.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == code, err
    assert daemon.count() == before


def test_the_grammar_bounds():
    assert len(CallTrigger(tools(128))._rules) < MAX_GRAMMAR_BYTES // 4  # the tool bound comes first
    # a bound over MAX_REPEAT is dropped rather than written out: the grammar stays small
    big = CallTrigger(tools(1, properties={"s": {"type": "string", "maxLength": 10**9}}))._rules
    small = CallTrigger(tools(1, properties={"s": {"type": "string", "maxLength": 16}}))._rules
    assert len(big) < len(small)


def test_1000_tools_are_refused_at_once_and_the_next_request_waits_for_nothing(daemon: Daemon):
    r = httpx.post(daemon.url + "/v1/chat/completions", json={"messages": OK, "tools": tools(1000), "max_tokens": 1},
                   timeout=30)  # the case held the engine 600 s
    assert r.status_code == 400 and "1000 tools were offered; at most 128" in r.json()["error"]["message"]
    plain = daemon.client().chat.completions.create(model="clawd", messages=OK, max_tokens=2, timeout=120)
    # queued_s is how long the request waited for the engine lock: at most one batch of a judge's
    # prefill (a few seconds on 2 busy cores) when background work holds it, never minutes
    assert json.loads(daemon.turn(plain.id)["timings"])["queued_s"] < 10


def test_128_small_tools_are_served(daemon: Daemon):
    r = httpx.post(daemon.url + "/v1/chat/completions", json={"messages": OK, "tools": tools(128), "max_tokens": 1},
                   timeout=300)
    assert r.status_code == 200, r.text
    assert daemon.turn(r.json()["id"])["status"] == "ok"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    home = tmp_path_factory.mktemp("limits")
    engine = Engine(MODEL, n_ctx=256, threads=2)
    store = Store(home / "clawd.db")
    yield ChatService(engine, store, Settings(home=home))
    store.close()


def _request(service: ChatService, n_prompt: int) -> protocol.ChatRequest:
    """A request whose rendered prompt is exactly `n_prompt` tokens."""
    words = 1
    while True:
        msgs = [{"role": "user", "content": "hello " * words}]
        n = len(service.engine.tokenize(service.engine.template.render(msgs)))
        if n >= n_prompt:
            assert n == n_prompt, f"cannot make exactly {n_prompt} tokens (got {n})"
            return protocol.parse_request(json.dumps({"messages": msgs, "max_tokens": 4}).encode())
        words += n_prompt - n


def test_a_prompt_just_over_the_context_never_takes_the_engine_lock(service: ChatService):
    engine, store = service.engine, service.store
    taken = dict(engine.lock.taken)
    with pytest.raises(protocol.ApiError) as refused:
        service.prepare(_request(service, engine.n_ctx), {})
    assert refused.value.status == 400 and refused.value.code == "context_length_exceeded"
    assert engine.lock.taken == taken  # neither a user nor background work took the engine
    assert store._read("SELECT COUNT(*) FROM turns")[0][0] == 0
    # the counters do count: one token less fits, is recorded, and generating takes the lock once
    p = service.prepare(_request(service, engine.n_ctx - 1), {})
    assert engine.lock.taken == taken
    service.in_flight += 1  # as admit() would have
    service.run(p, lambda ev: None, threading.Event())
    assert engine.lock.taken == {**taken, "user": taken["user"] + 1}


def test_a_prompt_too_long_to_tokenize_is_refused_from_its_size(service: ChatService):
    engine = service.engine
    text = "x" * (engine.n_ctx * engine.max_token_bytes + 1)  # fits no way, whatever it tokenizes to
    req = protocol.parse_request(json.dumps({"messages": [{"role": "user", "content": text}]}).encode())
    with pytest.raises(protocol.ApiError, match="you requested at least") as refused:
        service.prepare(req, {})
    assert refused.value.code == "context_length_exceeded"
