"""Linking around OpenClaw's heartbeats (clawd/serve/sessions.py) on a real SQLite store: a heartbeat
runs inside the main session, between a user's turn and the user's reaction to it."""

from __future__ import annotations

import json

import pytest
from conftest import fixture

from clawd.serve import protocol, sessions
from clawd.store.records import ToolCall, Turn
from clawd.store.store import Store

pytestmark = pytest.mark.fast

SYSTEM = {"role": "system", "content": "You are a personal assistant running inside OpenClaw."}
ASK = {"role": "user", "content": "Name a primary colour."}


def heartbeat_prompt() -> str:
    """OpenClaw 2026.9.6's heartbeat prompt, as it sent it (the captured request's first user message)."""
    req = protocol.parse_request(json.dumps(fixture("heartbeat_request")).encode())
    return protocol.normalize_messages(req)[1]["content"]


def served(store: Store, messages: list[dict], text: str, calls: list[ToolCall] | None = None) -> Turn:
    """What the chat service does with a request: classify, link, record the answer."""
    kind = sessions.classify(messages, True, None)
    link = sessions.link(store, messages, kind, None)
    if link.next_state is not None:
        store.add_next_state(link.next_state)
    t = Turn(session_id=link.session_id, index=store.next_index(link.session_id), kind=link.kind,
             completion_id=f"chatcmpl-{store.counts()['turns']}", request={"messages": messages}, prompt_ids=[1])
    store.insert_turn(t)
    t.completion_ids, t.logprobs, t.text, t.tool_calls, t.status = [2], [-0.1], text, calls or [], "ok"
    store.finish_turn(t)
    return t


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "clawd.db")
    yield s
    s.close()


def test_the_users_reaction_after_a_heartbeat_is_the_main_turns_next_state(store):
    main = served(store, [SYSTEM, ASK], "Red.")
    answer = {"role": "assistant", "content": "Red."}
    beat = served(store, [SYSTEM, ASK, answer, {"role": "user", "content": heartbeat_prompt()}], "NO_REPLY")
    assert beat.kind == "side" and beat.session_id == main.session_id
    assert store.next_state(main.id) is None  # OpenClaw's heartbeat prompt is no reaction of the user's

    react = {"role": "user", "content": "Another one, please."}
    after = served(store, [SYSTEM, ASK, answer, {"role": "user", "content": "[OpenClaw heartbeat poll]"},
                           {"role": "assistant", "content": "NO_REPLY"}, react], "Blue.")
    assert after.kind == "main" and after.session_id == main.session_id
    ns = store.next_state(main.id)
    assert ns is not None and ns.role == "user" and ns.content == "Another one, please."
    assert store.next_state(beat.id) is None


def test_a_heartbeats_tool_results_are_side_work(store):
    served(store, [SYSTEM, ASK], "Red.")
    answer = {"role": "assistant", "content": "Red."}
    call = ToolCall("call_1", "exec", '{"command": "date"}')
    beat_msgs = [SYSTEM, ASK, answer, {"role": "user", "content": heartbeat_prompt()}]
    beat = served(store, beat_msgs, "", [call])
    result = [{"role": "assistant", "content": "", "tool_calls": [call.to_openai()]},
              {"role": "tool", "tool_call_id": "call_1", "content": "Tue Dec  1 21:55:23 UTC 2026"}]
    follow = served(store, [*beat_msgs, *result], "NO_REPLY")
    assert follow.kind == "side"  # only tool results came: the heartbeat goes on
    ns = store.next_state(beat.id)
    assert ns is not None and ns.role == "tool"  # the heartbeat's call got its result, as any turn's does
