"""The typed records the stages pass on through SQLite. Ground floor: imports nothing of clawd."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

TurnKind = Literal["main", "side"]
TurnStatus = Literal["running", "ok", "aborted", "error"]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Turn:
    """One request and the answer the model gave to it."""

    session_id: int
    index: int  # position within the session
    kind: TurnKind
    completion_id: str  # the `id` the client saw (chatcmpl-...)
    request: dict[str, Any]  # messages, tools and sampling parameters as received
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # log p(sampled token), one per completion id
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    adapter_version: int | None = None
    timings: dict[str, Any] = field(default_factory=dict)  # seconds and token counts; cached_from names where the prefix came from
    status: TurnStatus = "running"
    id: int | None = None

    @property
    def output_key(self) -> str:
        return output_key(self.text, [(c.name, c.arguments) for c in self.tool_calls])


@dataclass
class NextState:
    """What came after a turn: tool results and/or the user's next message."""

    turn_id: int
    role: Literal["user", "tool"]  # role of the first message after the turn
    content: str  # those messages' text, joined
    messages: list[dict[str, Any]]


def output_key(text: str, calls: list[tuple[str, str]]) -> str:
    """A digest of an assistant output that survives a client's round trip.

    Clients re-send our answer in later requests, but not byte for byte: whitespace may be
    trimmed, tool-call ids rewritten (OpenClaw drops their underscores) and arguments
    re-serialized. So the key is the stripped text plus each call's name and canonical arguments.
    """
    canon = []
    for name, args in calls:
        try:
            args = json.dumps(json.loads(args), sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            args = str(args).strip()
        canon.append([name, args])
    blob = json.dumps([text.strip(), canon], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class Vote:
    kind: Literal["eval", "hint"]
    raw: str  # the judge's whole answer
    value: int | None  # parsed \boxed{} value; None = a failed vote
    hint: str | None = None


@dataclass
class Judgment:
    """The judge's verdict on one main turn, from its next state."""

    turn_id: int
    method: Literal["vote", "score", "ask"]  # 'vote' only in databases from before issue 12
    score: int  # -1, 0 or +1
    judge_model: str
    votes: list[Vote] = field(default_factory=list)
    probs: dict[str, float] | None = None  # P(verdict) for "1", "-1", "0", and the raw features "x_i"
    hint: str | None = None  # for OPD, from the evidence (hints.py); None for a verdict other than -1
    judge_adapter: int | None = None
    timings: dict[str, Any] = field(default_factory=dict)  # seconds per stage; 'error' when it gave up


@dataclass
class Feedback:
    """Explicit feedback from the user on a turn; overrides the judge's score for training."""

    turn_id: int
    score: int  # -1 or +1
    comment: str | None = None
    hint: str | None = None  # the comment as an OPD hint; None when absent or refused (hints.feedback_hint)
