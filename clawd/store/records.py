"""The typed records the stages pass on through SQLite. Ground floor: imports nothing of clawd."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

TurnKind = Literal["main", "side"]
GroupSource = Literal["sampled", "hindsight"]
# Sampling temperature of a request that sets none. The server samples at it and the trainer and
# the idle-time rollouts score or sample a recorded turn at it, so all read this one definition.
DEFAULT_TEMPERATURE = 0.8
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


def sampling_temperature(request: dict[str, Any]) -> float:
    """The temperature a recorded turn is scored and re-sampled at: the one it was sampled at (the
    serving default when the request set none). A greedy turn (T = 0) gets T = 1: argmax decoding
    has no distribution to match (every logprob would be 0 or −inf), and T = 1 is the model's own
    distribution, the one the engine records logprobs at. top_p is not modelled: OpenClaw sends none."""
    t = request.get("temperature")
    t = DEFAULT_TEMPERATURE if t is None else float(t)
    return t if t > 0 else 1.0


@dataclass
class Rollout:
    """One answer of a group: sampled in idle time for a recorded turn's prompt, or (hindsight) an
    answer the user gave a verdict on."""

    completion_ids: list[int]
    text: str
    logprobs: list[float] = field(default_factory=list)  # the engine's, at T = 1, one per id ([] for hindsight)
    reward: float | None = None  # the scorer's, in [0, 1]; None until scored
    # Refused by the scorer (judge/rollouts.refused: empty, looping, echoing, a call repeated):
    # reward 0 in its group's mean, so the answers beside it are pushed up as better than one that
    # says nothing, but its own tokens are not pushed down (batches.group_samples).
    refused: bool = False
    id: int | None = None


@dataclass
class RolloutGroup:
    """K answers to the prompt of one recorded main turn, compared with each other by GRPO
    (design §7). `sampled`: drawn in idle time with the adapter `adapter_version` (None: the base
    weights) at the turn's temperature, then scored against the user's own words. `hindsight`:
    the turn's own answer, which the user corrected (reward 0), and the retry they accepted
    (reward 1), both on the turn's prompt (without the correction)."""

    turn_id: int
    source: GroupSource
    adapter_version: int | None
    temperature: float
    rollouts: list[Rollout]
    scorer: str | None = None  # None until scored; then 'trusted', 'untrusted', 'undecided' (under the margin) or 'hindsight'
    evidence: list[str] = field(default_factory=list)  # the user's words the scorer read, quoted
    id: int | None = None

    @property
    def rewards(self) -> list[float]:
        return [r.reward if r.reward is not None else 0.0 for r in self.rollouts]


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
    gate: GateResult | None  # the gate's verdict; None until gated
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


# -- after the judge: training, the gate, the daemon's status (issue 16) --------------------------
TrainEventKind = Literal["load", "start", "step", "paused", "resumed", "done", "idle", "stopped", "waiting", "error"]
FINAL_EVENTS = ("done", "idle", "stopped", "waiting", "error")  # the round is over


@dataclass
class TrainEvent:
    """One progress report of a training round: trainer child → the daemon's scheduler (a
    multiprocessing queue) → status. load, start, step…, paused/resumed, then one final event."""

    event: TrainEventKind
    run_id: int | None = None
    step: int | None = None  # optimizer steps done
    steps: int | None = None  # of the round's plan
    loss: float | None = None  # the last step's
    version: int | None = None  # done: the adapter written
    error: str | None = None  # error, waiting: why
    # start: samples, tokenizer check, max_train_tokens, the backend's describe(); step: micro_step_s;
    # done: the round's metrics (path, losses, rewards, drift…); waiting: memory_plan
    detail: dict[str, Any] = field(default_factory=dict)
    at: float | None = None  # when the scheduler saw it end (the last round only)

    @property
    def final(self) -> bool:
        return self.event in FINAL_EVENTS

    def to_json(self) -> dict[str, Any]:
        """Flat, as status has always shown it: the set fields, then the details."""
        fixed = {k: v for k in _EVENT_FIELDS if (v := getattr(self, k)) is not None}
        return {**self.detail, **fixed}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrainEvent:
        return cls(**{k: v for k, v in d.items() if k in _EVENT_FIELDS},
                   detail={k: v for k, v in d.items() if k not in _EVENT_FIELDS})


_EVENT_FIELDS = tuple(k for k in TrainEvent.__dataclass_fields__ if k != "detail")  # flat in the JSON


@dataclass
class GateResult:
    """The gate's verdict on one candidate adapter, stored with it (adapters.gate, gate.json)."""

    passed: bool
    reasons: list[str]  # one per failed check, each naming its figure and threshold; empty = passed
    seconds: float = 0.0
    summary: str | None = None  # probes right, KL: a line for a person (only when every check ran)
    # per check (finite, replay, probes, tool_calls, echo, degenerate, stamp, kl, answers), the
    # gate's config and reference, and publish's conversion summary (convert)
    checks: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Flat: the layout adapters.gate has always had, so older rows read the same way."""
        return {**self.checks, "passed": self.passed, "reasons": self.reasons, "seconds": self.seconds,
                **({"summary": self.summary} if self.summary is not None else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GateResult:
        rest = {k: v for k, v in d.items() if k not in ("passed", "reasons", "seconds", "summary")}
        return cls(bool(d.get("passed")), list(d.get("reasons") or []), float(d.get("seconds") or 0.0),
                   d.get("summary"), rest)


@dataclass
class RoundState:
    """A training round as its checkpoint keeps it (adapters/.staging/state.pt), so that a kill
    resumes it: filled in as the round goes. Tensors are torch's, on the CPU; each per-sample list
    holds one (C,) tensor per sample (C: its completion tokens)."""

    turn_ids: list[int]
    parent: int | None  # the adapter the round continues from (None: the base weights)
    knobs: dict[str, Any]  # the training settings the round started with (train/loop.py KNOBS)
    run_id: int | None = None  # set once the round fits and is recorded (train_runs)
    step: int = 0  # optimizer steps done
    losses: list[float] = field(default_factory=list)  # one per step
    kl: list[float] = field(default_factory=list)  # mean k3 to the base per step, before its update
    version: int | None = None  # the adapter version, once chosen (a kill after it finishes that one)
    limit: int | None = None  # the planned longest training sequence (memory.py)
    # scored once (None until then): log π_old, log π_teacher, log π_base (None per sample when the
    # KL term is off), truncated importance weights; drift per sample (Σ|Δ|, tokens, capped) or None
    old: list[Any] | None = None
    teacher: list[Any] | None = None
    base: list[Any] | None = None
    tis: list[Any] | None = None
    drift: list[Any] | None = None
    teacher_topk: list[Any] | None = None  # per sample None, or the OPD teacher's top-K (ids, logprobs), each (C, K)
    plan: list[list[int]] | None = None  # minibatches of sample indices, every epoch
    lora: dict[str, Any] | None = None  # the LoRA weights and the optimizer's state after `step` steps
    optim: dict[str, Any] | None = None
    # GRPO (design §7): the rollout groups this round trains on besides its turns; their samples
    # follow the turns' in every per-sample list, and their steps follow the turns' in `plan`
    group_ids: list[int] = field(default_factory=list)

    @property
    def scored(self) -> bool:
        return self.tis is not None

    @classmethod
    def from_saved(cls, d: dict[str, Any]) -> RoundState:
        """A checkpoint's dict; keys of other versions are ignored."""
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})
