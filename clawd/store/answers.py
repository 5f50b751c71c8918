"""What the daemon's HTTP API answers with (/v1/clawd/*): the routes declare these records, so
/openapi.json describes them, and the CLI's client (clawd/client.py) decodes them. Ground floor:
imports only records."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .records import AdapterStatus, RewardBucket, SessionView, TrainEvent, TurnView


@dataclass
class ModelStatus:
    id: str  # the model id clients send
    path: str
    context: int  # the serving context, tokens
    trained_context: int
    load_s: float


@dataclass
class LiveAdapter:
    version: int
    age_s: float | None  # since it was trained; None when its row is gone


@dataclass
class TrainingStatus:
    last: TrainEvent | None  # how the last round ended (with `at`)
    progress: TrainEvent | None  # the latest event of the round under way (or the last one)
    last_publish: dict[str, Any] | None  # publish's outcome: version, passed, gate; or published False, error
    batch: int  # judged turns a round waits for (0: the method trains none, only GRPO groups)
    ready: int  # judged turns a round could use now
    backend: str | None  # what trained the last round (None: nothing yet)
    backend_setting: str
    auto: bool  # auto_learn
    idle_seconds: float
    paused: bool  # the user paused learning

    @property
    def memory_plan(self) -> dict[str, Any] | None:
        """The last round's (memory.Plan.as_dict()), from its final event."""
        return self.last.detail.get("memory_plan") if self.last else None


@dataclass
class Status:
    """GET /v1/clawd/status: what the daemon is and is doing. `clawd status` decodes it."""

    version: str
    uptime_s: float
    model: ModelStatus
    device: str  # cuda | cpu
    adapter: LiveAdapter | None  # None: the base weights
    turns: dict[str, int]  # Store.counts()
    recent_scores: list[int]  # the latest rewards, oldest first
    judge: dict[str, Any]  # Judge.trust(): mode, figures, threshold (or calibration progress)
    doing: str
    doing_since_s: float
    in_flight: int
    training: TrainingStatus
    prompt_cache: dict[str, Any] | None  # PromptCache.status(); None when off
    memory_mb: float
    home: str
    up: bool = True
    grpo: dict[str, Any] = field(default_factory=dict)  # Daemon._grpo(): scorer trust, groups, last job and round

    def to_json(self) -> dict[str, Any]:
        tr = self.training
        return {"version": self.version, "up": self.up, "uptime_s": self.uptime_s, "model": asdict(self.model),
                "device": self.device, "adapter": asdict(self.adapter) if self.adapter else None,
                "turns": self.turns, "recent_scores": self.recent_scores, "judge": self.judge, "doing": self.doing,
                "doing_since_s": self.doing_since_s, "in_flight": self.in_flight,
                "training": {**{k: getattr(tr, k) for k in TrainingStatus.__dataclass_fields__},
                             "memory_plan": tr.memory_plan, "last": tr.last.to_json() if tr.last else None,
                             "progress": tr.progress.to_json() if tr.progress else None},
                "prompt_cache": self.prompt_cache, "memory_mb": self.memory_mb, "home": self.home, "grpo": self.grpo}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Status:
        tr = dict(d["training"])
        for k in ("last", "progress"):
            tr[k] = TrainEvent.from_json(tr[k]) if tr.get(k) else None
        return cls(**{**{k: d[k] for k in cls.__dataclass_fields__ if k in d},
                      "model": ModelStatus(**d["model"]),
                      "adapter": LiveAdapter(**d["adapter"]) if d.get("adapter") else None,
                      "training": TrainingStatus(**{k: tr[k] for k in TrainingStatus.__dataclass_fields__ if k in tr})})


# -- what /v1/clawd/* answers: the routes declare them (OpenAPI), the CLI's client decodes them ---
@dataclass
class AdapterRow:
    """One adapter as `clawd adapters list` shows it."""

    version: int
    status: AdapterStatus
    parent: int | None
    current: bool  # what adapters/current names
    created: float
    method: str | None  # the training method of its round
    turns: int  # turns its round trained on
    gate: dict[str, Any] | None  # the gate's verdict, its main checks (GateResult.to_json, cut)
    path: str


@dataclass
class AdaptersState:
    """GET /v1/clawd/adapters, and the answer to every change of the live adapter."""

    current: int | None  # what adapters/current names (None: the base weights)
    serving: int | None  # what the daemon's engine runs (None too when no daemon: see `daemon`)
    daemon: bool
    adapters: list[AdapterRow]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AdaptersState:
        return cls(d["current"], d["serving"], d["daemon"], [AdapterRow(**a) for a in d["adapters"]])


@dataclass
class Published:
    """POST /v1/clawd/adapters/publish: the adapter went live (a rejection is an error answer)."""

    version: int
    passed: bool
    gate: dict[str, Any]  # GateResult.to_json()


@dataclass
class Asked:
    """POST /v1/clawd/train and /v1/clawd/judge: the job is asked for; the scheduler runs it at its
    next tick with no request in flight."""

    asked: str  # "train" or "judge"
    doing: str
    ready: int  # judged turns a round could use now
    batch: int  # judged turns a round waits for (0: the method trains none, only GRPO groups)
    backlog: int  # turns waiting for the judge
    groups: int = 0  # scored GRPO groups a round could use now


@dataclass
class FeedbackAnswer:
    """POST /v1/feedback."""

    ok: bool
    id: str
    turn_id: int
    score: int
    hint: bool  # the comment became the turn's OPD hint
    hint_refused: str | None = None  # why it did not (it quotes a tool's result); absent when it did or there was none


# -- the dashboard's endpoints (clawd/serve/dashboard.py) -------------------------------------------
@dataclass
class TurnPage:
    """GET /v1/clawd/turns: a keyset page, newest first; pass `next_before` as `before` for the next."""

    object: str
    data: list[TurnView]
    next_before: int | None  # null at the end


@dataclass
class SessionPage:
    """GET /v1/clawd/sessions: as TurnPage."""

    object: str
    data: list[SessionView]
    next_before: int | None


@dataclass
class RewardTrend:
    """GET /v1/clawd/rewards: every scored turn, oldest first, in runs of equal size."""

    object: str
    scored: int
    mean: float | None
    buckets: list[RewardBucket]


@dataclass
class SessionExcluded:
    """POST /v1/clawd/sessions/{id}/exclude|include."""

    ok: bool
    session_id: int
    excluded: bool


@dataclass
class Learning:
    """GET /v1/clawd/learning and POST /v1/clawd/learning/pause|resume."""

    paused: bool
