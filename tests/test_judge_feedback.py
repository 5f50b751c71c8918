"""POST /v1/feedback against a live daemon: explicit ±1 on a completion by its id."""

from __future__ import annotations

import httpx
from conftest import Daemon


def completion(daemon: Daemon) -> str:
    r = httpx.post(daemon.url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}],
        "max_completion_tokens": 4})
    assert r.status_code == 200
    return r.json()["id"]


def feedback_rows(daemon: Daemon, cid: str):
    return daemon.rows("SELECT f.score, f.comment FROM feedback f JOIN turns t ON t.id = f.turn_id"
                       " WHERE t.completion_id = ?", (cid,))


def test_feedback_is_recorded_and_the_latest_wins(daemon: Daemon):
    cid = completion(daemon)
    r = httpx.post(daemon.url + "/v1/feedback", json={"id": cid, "score": -1, "comment": "too short"})
    assert r.status_code == 200
    body = r.json()
    assert body["ok"] is True and body["id"] == cid and body["score"] == -1
    assert [tuple(x) for x in feedback_rows(daemon, cid)] == [(-1, "too short")]
    r = httpx.post(daemon.url + "/v1/feedback", json={"id": cid, "score": 1})
    assert r.status_code == 200
    assert [tuple(x) for x in feedback_rows(daemon, cid)] == [(1, None)]


def test_feedback_errors(daemon: Daemon):
    r = httpx.post(daemon.url + "/v1/feedback", json={"id": "chatcmpl-doesnotexist", "score": 1})
    assert r.status_code == 404
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == "not_found" and err["param"] == "id"

    cid = completion(daemon)
    for bad in (2, 0, -2, "1", True, 1.0, None):
        r = httpx.post(daemon.url + "/v1/feedback", json={"id": cid, "score": bad})
        assert r.status_code == 400, bad
        assert r.json()["error"]["param"] == "score" and r.json()["error"]["type"] == "invalid_request_error"
    for body in ({"score": 1}, {"id": 7, "score": 1}, [cid, 1]):
        assert httpx.post(daemon.url + "/v1/feedback", json=body).status_code == 400
    assert httpx.post(daemon.url + "/v1/feedback", json={"id": cid, "score": 1, "comment": 5}).status_code == 400
    r = httpx.post(daemon.url + "/v1/feedback", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()
    assert feedback_rows(daemon, cid) == []  # nothing bad was written


def test_a_feedback_comment_becomes_the_turns_hint(daemon: Daemon):
    """The comment is the turn's OPD hint (quoted), what training reads; a comment that quotes a
    tool's result is kept as a comment but refused as a hint, and the answer says why."""
    from clawd.store.store import Store
    from clawd.train.samples import turn_signal

    cid = completion(daemon)
    r = httpx.post(daemon.url + "/v1/feedback", json={"id": cid, "score": -1, "comment": "Answer in French."})
    assert r.status_code == 200 and r.json()["hint"] is True and "hint_refused" not in r.json()
    turn_id = daemon.turn(cid)["id"]
    store = Store(daemon.db)
    try:
        reward, hint = turn_signal(store, turn_id)
        assert reward == -1 and hint is not None and "Answer in French." in hint

        # a turn whose next state is a tool's result: a forced call, its result, then the user
        # comments by pasting that result
        tools = [{"type": "function", "function": {"name": "read", "description": "Read a file.", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
        body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Read notes.txt."}],
                "tools": tools, "tool_choice": {"type": "function", "function": {"name": "read"}},
                # greedy, the same request every run: sampled at the default temperature with no
                # seed, the answer came back with no call once in a full-suite run (stop 62)
                "max_completion_tokens": 200, "temperature": 0}
        first = httpx.post(daemon.url + "/v1/chat/completions", json=body, timeout=120).json()
        calls = first["choices"][0]["message"]["tool_calls"]
        output = "meeting moved to thursday at nine in room four"
        body["messages"] += [{"role": "assistant", "content": None, "tool_calls": calls},
                             {"role": "tool", "tool_call_id": calls[0]["id"], "content": output},
                             {"role": "user", "content": "ok"}]
        body.pop("tool_choice")
        body["max_completion_tokens"] = 4
        assert httpx.post(daemon.url + "/v1/chat/completions", json=body, timeout=120).status_code == 200
        r = httpx.post(daemon.url + "/v1/feedback", json={"id": first["id"], "score": -1,
                                                           "comment": "it says meeting moved to thursday at nine"})
        assert r.status_code == 200 and r.json()["hint"] is False and "tool" in r.json()["hint_refused"]
        rows = daemon.rows("SELECT comment, hint FROM feedback f JOIN turns t ON t.id = f.turn_id"
                           " WHERE t.completion_id = ?", (first["id"],))
        assert rows[0]["comment"].startswith("it says") and rows[0]["hint"] is None
    finally:
        store.close()
