"""Real OpenClaw requests replayed: context overflow, sessions linked by content, next states."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import FIXTURES, Daemon, fixture, shorten

from clawd.client import sse_events


def post(daemon: Daemon, body: dict, stream: bool | None = None) -> httpx.Response:
    if stream is not None:
        body = {**body, "stream": stream}
    return httpx.post(daemon.url + "/v1/chat/completions", json=body, timeout=300)


def stream_answer(daemon: Daemon, body: dict) -> tuple[str, list[dict], dict]:
    """Send as OpenClaw does (stream + usage) and rebuild the answer from the SSE events."""
    text, calls, usage, cid = "", {}, None, None
    with httpx.stream("POST", daemon.url + "/v1/chat/completions", json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()
        events = list(sse_events(r.iter_lines()))  # raises if the stream ends before [DONE]
    for ev in events:
        cid = ev["id"]
        if not ev["choices"]:
            usage = ev["usage"]
            continue
        d = ev["choices"][0]["delta"]
        text += d.get("content") or ""
        for tc in d.get("tool_calls") or []:
            calls[tc["index"]] = tc
    assert usage is not None and usage["completion_tokens"] > 0
    return text, [calls[i] for i in sorted(calls)], {"id": cid, **usage}


def test_full_turn1_exceeds_context(daemon: Daemon):
    before = daemon.count()
    r = post(daemon, fixture("turn1_first_request"))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded"
    assert err["message"].startswith("This model's maximum context length is 8192 tokens. However, you requested")
    assert daemon.count() == before


def test_turn1_then_turn2_linked_with_next_state(daemon: Daemon):
    t1 = shorten(fixture("turn1_first_request"))
    text, calls, u1 = stream_answer(daemon, {**t1, "max_completion_tokens": 40})
    assert text and not calls
    row1 = daemon.turn(u1["id"])
    assert row1["kind"] == "main" and row1["status"] == "ok"

    t2 = shorten(fixture("turn2_same_session"))
    (assistant,) = [m for m in t2["messages"] if m["role"] == "assistant"]
    assistant["content"] = text.strip()  # as a client re-sends it: trimmed
    _, _, u2 = stream_answer(daemon, {**t2, "max_completion_tokens": 16})
    row2 = daemon.turn(u2["id"])
    assert row2["session_id"] == row1["session_id"] and row2["idx"] == row1["idx"] + 1
    (ns,) = daemon.rows("SELECT * FROM next_states WHERE turn_id = ?", (row1["id"],))
    assert ns["role"] == "user" and "second message" in ns["content"]
    # turn 2 re-sends the system prompt and first message: only the tail is evaluated again
    timings = json.loads(row2["timings"])
    assert timings["cached_tokens"] > 800 and timings["evaluated_prompt_tokens"] < timings["prompt_tokens"] / 2


def test_tool_call_then_followup_linked(daemon: Daemon):
    body = shorten(fixture("tool_call_request"))
    body.update(tool_choice={"type": "function", "function": {"name": "exec"}}, max_completion_tokens=60, temperature=0)
    text, calls, u1 = stream_answer(daemon, body)
    assert len(calls) == 1 and calls[0]["function"]["name"] == "exec"
    row1 = daemon.turn(u1["id"])
    assert row1["finish_reason"] == "tool_calls"

    follow = shorten(fixture("tool_followup_request"))
    (assistant,) = [m for m in follow["messages"] if m["role"] == "assistant"]
    (tool_msg,) = [m for m in follow["messages"] if m["role"] == "tool"]
    # OpenClaw strips the id's underscore and re-serializes the arguments compactly
    stripped = calls[0]["id"].replace("_", "")
    args = json.dumps(json.loads(calls[0]["function"]["arguments"]), separators=(",", ":"))
    assistant["tool_calls"] = [{"id": stripped, "type": "function", "function": {"name": "exec", "arguments": args}}]
    tool_msg["tool_call_id"] = stripped
    _, _, u2 = stream_answer(daemon, {**follow, "max_completion_tokens": 16})
    row2 = daemon.turn(u2["id"])
    assert row2["session_id"] == row1["session_id"]
    (ns,) = daemon.rows("SELECT * FROM next_states WHERE turn_id = ?", (row1["id"],))
    assert ns["role"] == "tool" and "hello-from-mock-tool" in ns["content"]


def test_compaction_is_a_side_turn(daemon: Daemon):
    body = fixture("compaction_request")
    body["messages"][1]["content"][0]["text"] = body["messages"][1]["content"][0]["text"][:3000]
    _, _, u = stream_answer(daemon, {**body, "max_completion_tokens": 16})
    assert daemon.turn(u["id"])["kind"] == "side"


# Every captured request and what it is (tests/fixtures/openclaw/README.md): OpenClaw's background
# turns are side turns, the user's turns main ones. A heartbeat carries tools and the agent's whole
# system prompt, like a user's turn; only its own user messages tell them apart.
KINDS = {"turn1_first_request": "main", "turn2_same_session": "main", "tool_call_request": "main",
         "tool_followup_request": "main", "compaction_request": "side", "compaction_summary_request": "side",
         "activity_recap_request": "side", "heartbeat_request": "side", "heartbeat_after_a_poll_request": "side"}


@pytest.mark.fast
@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_captured_request_is_classified(name):
    from clawd.serve import protocol, sessions

    req = protocol.parse_request(json.dumps(fixture(name)).encode())
    assert sessions.classify(protocol.normalize_messages(req), bool(protocol.tools_of(req, 128)), None) == KINDS[name]


@pytest.mark.fast
def test_a_title_request_is_a_side_turn():
    """Not captured (the fixtures' README says why): the request as OpenClaw 2026.9.6's source
    builds it, its system prompt and the user's first message, no tools."""
    from clawd.serve import sessions

    system = ("Generate a concise session title (3-6 words, max 60 characters) from the user's first message. "
              "Use the same language as the message, in sentence case. No emoji. Return only the title. "
              "You are labeling the supplied message, not participating in its conversation.")
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "How do I bake sourdough bread?"}]
    assert sessions.classify(msgs, False, None) == "side"


@pytest.mark.fast
def test_every_fixture_has_a_kind():
    assert {p.stem for p in FIXTURES.glob("*.json")} - {"session_affinity_headers"} == set(KINDS)


def test_a_heartbeat_is_recorded_as_a_side_turn(daemon: Daemon):
    _, _, u = stream_answer(daemon, {**shorten(fixture("heartbeat_after_a_poll_request")), "max_completion_tokens": 4})
    assert daemon.turn(u["id"])["kind"] == "side"


@pytest.mark.parametrize("headers,kind", [({"X-Turn-Type": "side"}, "side"), ({}, "main")])
def test_session_headers_honored(daemon: Daemon, headers, kind):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    h = {"X-Session-Id": "my-session-42", **headers}
    r1 = httpx.post(daemon.url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 4}, headers=h,
                    timeout=120).json()
    r2 = httpx.post(daemon.url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 4},
                    headers={**h, "X-Session-Done": "1"}, timeout=120).json()
    a, b = daemon.turn(r1["id"]), daemon.turn(r2["id"])
    assert a["session_id"] == b["session_id"] and a["kind"] == kind
    (s,) = daemon.rows("SELECT * FROM sessions WHERE id = ?", (a["session_id"],))
    assert s["key"] == "header:my-session-42" and s["closed"] == 1


def test_no_system_prompt_is_side(daemon: Daemon):
    r = httpx.post(daemon.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 4},
                   timeout=120).json()
    assert daemon.turn(r["id"])["kind"] == "side"


def test_openclaw_session_affinity_headers_key_the_session(daemon: Daemon):
    """The headers stock OpenClaw sends with `compat.sendSessionAffinityHeaders` (captured:
    session capA twice, then capB) key the session; two sessions that got the same answer link
    their next messages each to its own turn."""
    captured = json.loads((FIXTURES / "session_affinity_headers.json").read_text())["requests"]
    names = ("session_id", "x-client-request-id", "x-session-affinity", "user-agent")
    hs = [{k: v for k, v in r["headers"].items() if k in names} for r in captured]
    assert [h["x-session-affinity"] for h in hs] == ["capA:0", "capA:0", "capB:0"]
    base = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say the word ok."}]
    first = [httpx.post(daemon.url + "/v1/chat/completions", json={"messages": base, "max_tokens": 4, "temperature": 0},
                        headers=h, timeout=120).json() for h in (hs[0], hs[2])]
    text = first[0]["choices"][0]["message"]["content"]
    assert first[1]["choices"][0]["message"]["content"] == text  # the same answer in both sessions
    follow = [{"role": "assistant", "content": text}, {"role": "user", "content": "thanks"}]
    nxt = httpx.post(daemon.url + "/v1/chat/completions", json={"messages": base + follow, "max_tokens": 4},
                     headers=hs[2], timeout=120).json()
    a, b, c = (daemon.turn(r["id"]) for r in (first[0], first[1], nxt))
    key = {r["id"]: r["key"] for r in daemon.rows("SELECT id, key FROM sessions")}
    assert key[a["session_id"]] == "header:capA:0" and key[b["session_id"]] == key[c["session_id"]] == "header:capB:0"
    assert daemon.rows("SELECT turn_id FROM next_states WHERE turn_id IN (?, ?)", (a["id"], b["id"]))[0][0] == b["id"]


def test_a_multi_call_task_links_each_result_and_the_users_reply(daemon: Daemon):
    """An agent task as OpenClaw runs it: write, read, answer, then the user's reply. Each call's
    tool result is its turn's next state, and the user's reply is the final answer's, so the judge
    (and the GRPO scorer's evidence) sees the outcome of every step and nothing from a checker."""
    body = shorten(fixture("tool_call_request"), system_chars=2000)
    body["messages"][1]["content"] = "Write hello to a.txt, then read it back to me."
    msgs = body["messages"][:2]
    results = ["Successfully wrote 5 bytes to a.txt", "hello"]
    turns = []
    for name, result in zip(("write", "read"), results):
        _, calls, u = stream_answer(daemon, {**body, "messages": msgs, "max_completion_tokens": 60, "temperature": 0,
                                             "tool_choice": {"type": "function", "function": {"name": name}}})
        assert [c["function"]["name"] for c in calls] == [name]
        turns.append(daemon.turn(u["id"]))
        cid = calls[0]["id"]
        msgs = [*msgs, {"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": calls[0]["function"]["arguments"]}}]},
            {"role": "tool", "tool_call_id": cid, "content": result}]
    text, calls, u = stream_answer(daemon, {**body, "messages": msgs, "max_completion_tokens": 24, "tool_choice": "none"})
    assert text and not calls
    turns.append(daemon.turn(u["id"]))
    msgs = [*msgs, {"role": "assistant", "content": text.strip()}, {"role": "user", "content": "Thanks, that worked."}]
    _, _, u = stream_answer(daemon, {**body, "messages": msgs, "max_completion_tokens": 8})
    turns.append(daemon.turn(u["id"]))

    assert len({t["session_id"] for t in turns}) == 1 and all(t["kind"] == "main" for t in turns)
    assert [t["idx"] for t in turns] == list(range(turns[0]["idx"], turns[0]["idx"] + 4))
    states = [daemon.rows("SELECT role, content FROM next_states WHERE turn_id = ?", (t["id"],)) for t in turns[:3]]
    assert [(s[0]["role"], s[0]["content"]) for s in states] == [
        ("tool", results[0]), ("tool", results[1]), ("user", "Thanks, that worked.")]
