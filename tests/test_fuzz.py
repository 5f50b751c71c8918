"""Hostile input: generated request bodies never get a 5xx, and the daemon stays healthy."""

from __future__ import annotations

import json

import httpx
from conftest import Daemon
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSONVAL = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
ROLE = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "", "USER"])
PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "input_audio", "x"]),
                              "text": st.text(max_size=30) | JSONVAL})
MESSAGE = st.fixed_dictionaries(
    {"role": ROLE, "content": st.text(max_size=60) | st.none() | st.lists(PART, max_size=3) | JSONVAL},
    optional={"tool_calls": st.lists(st.fixed_dictionaries({"id": st.text(max_size=8), "type": st.just("function"),
                                                             "function": st.fixed_dictionaries({"name": st.text(max_size=8),
                                                                                                "arguments": st.text(max_size=20) | JSONVAL})}),
                                     max_size=2) | JSONVAL,
              "tool_call_id": st.text(max_size=8) | JSONVAL, "name": st.text(max_size=8)},
)
TOOL = st.fixed_dictionaries({"type": st.sampled_from(["function", "code"]),
                              "function": st.fixed_dictionaries({"name": st.text(max_size=10)},
                                                                optional={"parameters": JSONVAL | st.just({"type": "object"})})})
BODY = st.fixed_dictionaries(
    {"messages": st.lists(MESSAGE, max_size=4) | JSONVAL},
    optional={"tools": st.lists(TOOL, max_size=3) | JSONVAL,
              "tool_choice": st.sampled_from(["auto", "none", "required", "bogus"]) | JSONVAL,
              "max_tokens": st.integers(-5, 3) | JSONVAL, "max_completion_tokens": st.integers(-5, 3),
              "temperature": st.floats(-1, 3) | JSONVAL, "top_p": st.floats(-1, 2), "seed": st.integers() | JSONVAL,
              "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=6) | JSONVAL,
              "stream": st.booleans() | JSONVAL, "n": st.integers(-1, 3), "model": JSONVAL},
)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=BODY)
def test_generated_bodies_never_5xx(daemon: Daemon, body):
    if "max_tokens" not in body and "max_completion_tokens" not in body:
        body["max_tokens"] = 2  # keep valid requests short
    r = httpx.post(daemon.url + "/v1/chat/completions", content=json.dumps(body), timeout=120,
                   headers={"content-type": "application/json"})
    assert r.status_code < 500, (body, r.text)
    if r.status_code >= 400:
        assert r.json()["error"]["message"]


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=st.binary(max_size=200))
def test_random_bytes_never_5xx(daemon: Daemon, raw):
    r = httpx.post(daemon.url + "/v1/chat/completions", content=raw, timeout=60, headers={"content-type": "application/json"})
    assert r.status_code < 500, r.text


def test_healthy_after_fuzz(daemon: Daemon):
    assert httpx.get(daemon.url + "/health").json() == {"status": "ok"}
    assert daemon.rows("PRAGMA integrity_check")[0][0] == "ok"
    assert daemon.rows("SELECT COUNT(*) FROM turns WHERE status = 'running'")[0][0] == 0
