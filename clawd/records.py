"""The typed records the stages pass on through SQLite. Ground floor: imports nothing of clawd."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

TurnKind = Literal["main", "side"]
TurnStatus = Literal["running", "ok", "aborted", "error"]
AdapterStatus = Literal["trained", "published", "rejected", "retired"]


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


@dataclass
class Adapter:
    """One row of the `adapters` table: a trained adapter and what became of it (publish).
    trained: not gated yet; published: passed the gate (may be live); rejected: failed it, never
    goes live; retired: rolled back from."""

    version: int
    path: str
    parent: int | None
    status: AdapterStatus
    meta: dict[str, Any]  # the trainer's meta.json: run, turns, settings, metrics
    gate: dict[str, Any] | None  # the gate's result (passed, reasons, summary, replay, seconds, checks)
    created: float


# -- what the dashboard reads (issue 17): summaries of the rows above, cut to what a page shows --
@dataclass
class TurnView:
    """One turn as the dashboard lists it: texts cut to a readable length, no token arrays."""

    id: int
    completion_id: str
    session_id: int
    index: int
    kind: TurnKind
    status: TurnStatus
    created: float
    adapter_version: int | None
    user: str  # the request's last user message ('' when it has none)
    answer: str
    tool_calls: list[dict[str, str]]  # [{"name", "arguments"}]
    next_role: str | None  # what came after the turn: 'user' or 'tool'; None = nothing yet
    next_state: str | None
    judge_score: int | None
    judge_hint: str | None
    feedback_score: int | None
    feedback_comment: str | None
    feedback_hint: bool  # the comment was kept as the turn's OPD hint
    trained: bool  # a finished training run used this turn
    session_excluded: bool
    truncated: list[str] = field(default_factory=list)  # which of user/answer/next_state were cut


@dataclass
class SessionView:
    """A session with the rewards of its turns (explicit feedback over the judge's score)."""

    id: int
    key: str
    first_seen: float
    last_seen: float
    closed: bool
    excluded: bool  # kept out of training by the user
    turns: int
    scored: int
    trained: int
    mean: float | None  # mean reward of the scored turns; None when none is scored
    positive: int
    negative: int


@dataclass
class RewardBucket:
    """A run of consecutive scored turns (by id) and their mean reward: one point of the trend."""

    first_turn: int
    last_turn: int
    start: float  # when its first and last turn were recorded
    end: float
    n: int
    mean: float
    positive: int
    negative: int
