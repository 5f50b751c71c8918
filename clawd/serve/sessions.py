"""Sessions rebuilt from the stream of requests (design §5).

Stock OpenClaw sends no session header, but every request re-sends the conversation so far. A
request whose last assistant message equals a recorded answer continues that answer's session,
and the messages after it (tool results, the user's reply) are that answer's next state: the
evidence the judge scores it by. X-Session-Id / X-Turn-Type / X-Session-Done override. OpenClaw
configured with `compat.sendSessionAffinityHeaders` (what `clawd openclaw-config` writes) sends
its own session id as `x-session-affinity` (and `session_id`): the session key when present.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from ..engine.chat_template import normalize
from ..store.records import NextState, Turn, TurnKind, output_key
from ..store.store import Store

SIDE_BUCKET = "side"  # unlinked side turns share one session: they are never trained


@dataclass
class Link:
    session_id: int
    kind: TurnKind
    next_state: NextState | None  # for the previous turn, when this request reveals it


# What OpenClaw writes into the turn's own user messages for its background turns (2026.9.6, captured
# in tests/fixtures/openclaw/): the heartbeat prompt, a past heartbeat as its transcript keeps it, the
# older HEARTBEAT.md prompt, and the memory flush before a compaction.
SIDE_MARKERS = ("heartbeat monitor scratch context", "[openclaw heartbeat poll]", "heartbeat.md", "heartbeat_ok",
                "memory flush")
# ... and in the system prompt of a tool-less side call: compaction, the activity recap (both
# captured), a session title or topic label (from OpenClaw's source: the gateway asks for one
# only from its dashboard, which the capture could not reach)
SIDE_SYSTEM = ("summariz", "compact", "you are labeling the supplied message", "session title", "topic label")


def classify(messages: list[dict[str, Any]], has_tools: bool, header: str | None) -> TurnKind:
    """Main turns are trained; side turns (compaction, activity recaps, heartbeats, memory flushes,
    one-shot calls without a system prompt) are recorded but kept out of training. A heartbeat is an
    agent turn with tools in the main session: only the messages since the last answer say what it is."""
    if header in ("main", "side"):
        return header  # type: ignore[return-value]
    system = " ".join(m["content"] for m in messages if m["role"] == "system").lower()
    if not system:
        return "side"
    if not has_tools and any(k in system for k in SIDE_SYSTEM):
        return "side"
    last = _previous_answer(messages)
    new = " ".join(m["content"] for m in messages[0 if last is None else last + 1:] if m["role"] == "user").lower()
    if any(k in new for k in SIDE_MARKERS) or "memory flush" in system:
        return "side"
    return "main"


def session_key(headers: Any) -> str | None:
    """The client's session id: X-Session-Id, else OpenClaw's affinity header ("<sessionId>:0")."""
    for name in ("x-session-id", "x-session-affinity", "session_id"):
        value = (headers.get(name) or "").strip()
        if value:
            return value[:200]
    return None


def _previous_answer(messages: list[dict[str, Any]]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            return i
    return None


def _last_user(messages: list[dict[str, Any]]) -> str:
    return next(((m.get("content") or "").strip() for m in reversed(messages) if m["role"] == "user"), "")


def _answered(candidates: list[Turn], before: list[dict[str, Any]], session_id: int | None) -> Turn | None:
    """Of the recorded turns that gave this answer, the one of the client's own session, else the
    one that answered the same last user message: two sessions can both have answered "ok", and
    only one of them asked this."""
    own = [t for t in candidates if t.session_id == session_id]
    candidates = own or candidates
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    asked = _last_user(before)
    return next((t for t in candidates if _last_user(normalize(t.request.get("messages") or [])) == asked), candidates[0])


def _turn_at(store: Store, messages: list[dict[str, Any]], i: int, session_id: int | None) -> Turn | None:
    """The recorded turn whose answer is messages[i] (an assistant message), if any."""
    m = messages[i]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []]
    return _answered(store.turns_by_output(output_key(m.get("content") or "", calls)), messages[:i], session_id)


def link(store: Store, messages: list[dict[str, Any]], kind: TurnKind, session_header: str | None) -> Link:
    """The session of this request, and the next state it reveals for the turn it follows.

    A next state is what came after a turn of the same kind. OpenClaw runs heartbeats inside the
    main session, so the user's next message can follow a heartbeat's answer, with the main turn
    before it: the reaction is then that main turn's next state, and the heartbeat's own request is
    nobody's (its prompt is OpenClaw's, not the user's reaction). A request that only brings a side
    turn's tool results is side work too, whatever `kind` said."""
    next_state = None
    linked_session = None
    header_session = store.open_session(f"header:{session_header}") if session_header else None
    end = _previous_answer(messages)
    prev = _turn_at(store, messages, end, header_session) if end is not None else None
    if prev is not None and end is not None:
        after = messages[end + 1:]
        if kind == "main" and prev.kind == "side" and not any(m["role"] == "user" for m in after):
            kind = "side"  # the tool results of a side turn's call (a heartbeat's exec): the same side work goes on
        i: int | None = end
        while kind == "main" and prev.kind == "side" and (i := _previous_answer(messages[:i])) is not None:
            earlier = _turn_at(store, messages, i, header_session)
            if earlier is None:
                break
            prev = earlier
        linked_session = prev.session_id
        if after and prev.kind == kind:
            next_state = NextState(
                turn_id=prev.id,  # type: ignore[arg-type]
                role="tool" if after[0]["role"] == "tool" else "user",
                content="\n\n".join(x["content"] for x in after if x["content"]),
                messages=after,
            )
    if header_session is not None:
        session_id = header_session
    elif linked_session is not None:
        session_id = linked_session
    elif kind == "side":
        session_id = store.open_session(SIDE_BUCKET)
    else:
        session_id = store.open_session(f"auto:{uuid.uuid4().hex}")
    return Link(session_id=session_id, kind=kind, next_state=next_state)
