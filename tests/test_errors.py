"""Every bad input: an OpenAI-style error with a 4xx status, and nothing written."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import httpx
import pytest
from conftest import MODEL, Daemon

from clawd.client import sse_events

OK = [{"role": "user", "content": "hi"}]
CASES = {
    "malformed json": (b'{"messages": [', 400),
    "not an object": (b"[1, 2]", 400),
    "invalid utf-8": (b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400),
    "messages wrong type": ({"messages": "hi"}, 400),
    "empty messages": ({"messages": []}, 400),
    "missing messages": ({"model": "clawd"}, 400),
    "unknown role": ({"messages": [{"role": "wizard", "content": "hi"}]}, 400),
    "content wrong type": ({"messages": [{"role": "user", "content": 42}]}, 400),
    "user without content": ({"messages": [{"role": "user"}]}, 400),  # OpenAI: 400, not an empty turn
    "system content null": ({"messages": [{"role": "system", "content": None}, *OK]}, 400),
    "image part": ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400),
    "tool without call": ({"messages": [*OK, {"role": "tool", "tool_call_id": "nope", "content": "x"}]}, 400),
    "tool without id": ({"messages": [*OK, {"role": "tool", "content": "x"}]}, 400),
    "negative max_tokens": ({"messages": OK, "max_tokens": -1}, 400),
    "zero max_completion_tokens": ({"messages": OK, "max_completion_tokens": 0}, 400),
    "absurd max_tokens": ({"messages": OK, "max_tokens": 10**12}, 400),
    "temperature too high": ({"messages": OK, "temperature": 5}, 400),
    "top_p zero": ({"messages": OK, "top_p": 0}, 400),
    "n=2": ({"messages": OK, "n": 2}, 400),
    "too many stops": ({"messages": OK, "stop": ["a", "b", "c", "d", "e"]}, 400),
    "tool_choice unknown": ({"messages": OK, "tools": [{"type": "function", "function": {"name": "f"}}],
                             "tool_choice": {"type": "function", "function": {"name": "g"}}}, 400),
    "required without tools": ({"messages": OK, "tool_choice": "required"}, 400),
    "duplicate tools": ({"messages": OK, "tools": [{"type": "function", "function": {"name": "f"}}] * 2}, 400),
    "bad tool type": ({"messages": OK, "tools": [{"type": "retrieval"}]}, 400),
    "deep nesting": (b'{"messages": ' + b"[" * 100000 + b"]" * 100000 + b"}", 400),
    # larger than the context (8k on the bundled model): refused before anything is recorded
    "10k messages": ({"messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": "hi"}
                                   for i in range(10_000)] + OK}, 400),
    "1k tools": ({"messages": OK, "tools": [{"type": "function", "function": {"name": f"tool_{i}",
                  "description": "Does a thing.", "parameters": {"type": "object"}}} for i in range(1000)]}, 400),
    "huge string": ({"messages": [{"role": "user", "content": "ab " * 400_000}]}, 400),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(daemon: Daemon, name):
    body, status = CASES[name]
    before = daemon.count()
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(daemon.url + "/v1/chat/completions", headers={"content-type": "application/json"}, timeout=60, **kw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["type"] == "invalid_request_error"
    assert daemon.count() == before


def test_wrong_content_type(daemon: Daemon):
    r = httpx.post(daemon.url + "/v1/chat/completions", content=b"messages=hi",
                   headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]


def test_body_too_large(daemon: Daemon):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 2_100_000}]})
    r = httpx.post(daemon.url + "/v1/chat/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_unknown_route_and_method(daemon: Daemon):
    r = httpx.get(daemon.url + "/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(daemon.url + "/v1/chat/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_client_disconnect_stops_generation(daemon: Daemon):
    body = {"messages": [{"role": "user", "content": "Write a very long story."}], "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", daemon.url + "/v1/chat/completions", json=body, timeout=60) as r:
        events = sse_events(r.iter_lines())
        cid = next(events)["id"]
        for _ in range(3):
            next(events)
    deadline = time.time() + 30
    while time.time() < deadline:
        row = daemon.turn(cid)
        if row["status"] != "running":
            break
        time.sleep(0.2)
    assert row["status"] == "aborted"
    assert 0 < len(row["completion_ids"]) // 4 < 2000
    # and the daemon goes on serving
    r = daemon.client().chat.completions.create(model="clawd", messages=OK, max_tokens=3)
    assert r.choices[0].message.content is not None


def test_restart_keeps_every_turn(fresh_home):
    d = Daemon(fresh_home).start()
    try:
        ids = [d.client().chat.completions.create(model="clawd", messages=OK, max_tokens=4).id for _ in range(3)]
    finally:
        d.stop(signal.SIGKILL)
    d2 = Daemon(fresh_home).start()
    try:
        assert [d2.turn(i)["status"] for i in ids] == ["ok"] * 3
        st = httpx.get(d2.url + "/v1/clawd/status").json()
        assert st["turns"]["turns"] == 3
        assert d2.rows("PRAGMA integrity_check")[0][0] == "ok"
    finally:
        d2.stop()


def test_api_key_required_when_set(fresh_home):
    d = Daemon(fresh_home, "--api-key", "s3cret").start()
    try:
        r = httpx.post(d.url + "/v1/chat/completions", json={"messages": OK, "max_tokens": 2})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(d.url + "/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert d.client(api_key="s3cret").chat.completions.create(model="clawd", messages=OK, max_tokens=2).id
        assert httpx.get(d.url + "/health").status_code == 200
    finally:
        d.stop()


def test_non_loopback_without_key_refused(fresh_home):
    p = subprocess.run([sys.executable, "-m", "clawd", "serve", "--host", "0.0.0.0", "--port", "1"],
                       env={"CLAWD_HOME": str(fresh_home), "PATH": "/usr/bin:/bin", "CLAWD_MODEL": MODEL}, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "without an API key" in p.stderr


def test_full_queue_gets_503_with_retry_after(fresh_home):
    import threading

    d = Daemon(fresh_home, "--max-queue", "0").start()
    try:
        body = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 400}
        first = threading.Thread(target=httpx.post, args=(d.url + "/v1/chat/completions",), kwargs={"json": body, "timeout": 120})
        first.start()
        deadline = time.time() + 30
        while time.time() < deadline and httpx.get(d.url + "/v1/clawd/status").json()["in_flight"] == 0:
            time.sleep(0.05)
        r = httpx.post(d.url + "/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 503 and r.headers["retry-after"] == "2" and r.json()["error"]["code"] == "queue_full"
        first.join()
        r = httpx.post(d.url + "/v1/chat/completions", json={**body, "max_tokens": 2}, timeout=60)
        assert r.status_code == 200
    finally:
        d.stop()


def test_disconnect_during_prefill_frees_engine(daemon: Daemon):
    """A client that leaves while a long prompt is still being evaluated stops that evaluation."""
    long = "The quick brown fox jumps over the lazy dog. " * 600  # ~6k tokens: many prefill batches
    body = {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": long}], "max_tokens": 50, "stream": True}
    with httpx.stream("POST", daemon.url + "/v1/chat/completions", json=body, timeout=60) as r:
        cid = next(sse_events(r.iter_lines()))["id"]  # the role chunk, sent before prefill
    deadline = time.time() + 120
    while time.time() < deadline and daemon.turn(cid)["status"] == "running":
        time.sleep(0.1)
    row = daemon.turn(cid)
    timings = json.loads(row["timings"])
    assert row["status"] == "aborted" and len(row["completion_ids"]) == 0
    assert timings["evaluated_prompt_tokens"] < timings["prompt_tokens"] - 1000, timings
