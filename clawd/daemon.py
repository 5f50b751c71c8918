"""Wiring: settings → store → engine → app. The one module that knows every stage."""

from __future__ import annotations

import logging
import os
import resource
import sys
import time
from dataclasses import asdict
from typing import Any

from . import __version__
from .adapter_dir import AdapterDir
from .config import Settings, ensure_home
from .engine.engine import Engine
from .judge.judge import Judge
from .judge.rollouts import Rollouts
from .judge.scorer import Scorer
from .publish import AdapterError, Adapters
from .scheduler import Activity, Jobs, Scheduler
from .serve.app import create_app
from .serve.chat import ChatService
from .store.answers import LiveAdapter, ModelStatus, Status, TrainingStatus
from .store.store import StorageError, Store
from .train import Trainer, ready_turns, trains_turns
from .train.memory import llama_serving

log = logging.getLogger("clawd")


def setup_logging(settings: Settings) -> None:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(settings.log_level.upper())
    for h in list(root.handlers):
        root.removeHandler(h)
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(fmt)
    root.addHandler(err)
    log_path = settings.home / "clawd.log"
    fd = os.open(log_path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
    os.close(fd)
    fh = logging.FileHandler(log_path)
    fh.setFormatter(fmt)
    root.addHandler(fh)
    # a line per tick drowns the log, and a tick skipped while the last one still judges is by design
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    logging.getLogger("gguf").setLevel(logging.WARNING)  # its writer logs each file it writes


class Daemon:
    def __init__(self, settings: Settings):
        self.settings = settings
        ensure_home(settings.home)
        self.store = Store(settings.home / "clawd.db")
        interrupted = self.store.recover_interrupted()
        if interrupted:
            log.warning("%d turn(s) were cut off by a previous stop; marked aborted", interrupted)
        adapter_dir = AdapterDir(settings.home)
        if not adapter_dir.staged_round() and self.store.fail_unstaged_runs():
            log.warning("a training round was stopped before its first checkpoint; its turns wait for the next one")
        self.engine = Engine(settings.resolved_model(), n_ctx=settings.ctx, threads=settings.threads,
                             batch=settings.batch, gpu_layers=settings.gpu_layers, cache_mb=settings.prompt_cache_mb,
                             cache_dir=settings.home / "cache", cache_disk_mb=settings.prompt_cache_disk_mb)
        self.chat = ChatService(self.engine, self.store, settings)
        self.adapters = Adapters(settings, self.store, self.engine)
        self.adapters.apply_current()  # after a restart, serve what `adapters/current` names
        self.judge = Judge(self.engine, self.store, settings)
        self.scorer = Scorer(self.judge, settings.home / "judge", settings.judge_max_wrong_sign)
        self.rollouts = Rollouts(self.engine, self.store, settings, self.scorer)
        self.scheduler = Scheduler(settings, self.store, self._activity, Jobs(
            judge_backlog=lambda stop: self.judge.run_backlog(stop),
            backlog_size=self.judge.backlog_size,
            ready_to_train=self.ready_to_train,
            ready_groups=self.ready_groups,
            rollouts_pending=self.rollouts.pending,
            rollouts=self.rollouts.run,
            staged=adapter_dir.staged_round,
            start_trainer=lambda: Trainer(settings, serving=self._serving(), template=self.engine.template.spec()).start(),
            publish=self._publish,
            unpublished=self.adapters.newest_trained,
        ))
        self.chat.on_admit = self.scheduler.pause_training
        self.started = time.time()

    def round_batch(self) -> int:
        """Judged turns a round waits for; 0 when the method trains none (grpo: only groups do)."""
        k = self.settings
        return k.train_batch if trains_turns(k.train_method, k.w_rl, k.w_opd) else 0

    def ready_to_train(self) -> int:
        k = self.settings
        return len(ready_turns(self.store, k.train_method, k.train_batch, k.w_rl, k.w_opd))

    def ready_groups(self) -> int:
        if self.settings.grpo_k < 2:
            return 0
        return len(self.store.ready_groups(self.engine.adapter_version, self.settings.grpo_groups))

    def _grpo(self) -> dict[str, Any]:
        """For status: the scorer's trust, the groups so far, the last rollout job and the last
        round's advantage spread."""
        last = self.scheduler.state.last_train
        m = last.detail if last is not None else {}
        return {"k": self.settings.grpo_k, "scorer": self.scorer.summary(), "groups": self.store.group_counts(),
                "verdicts": self.rollouts.verdicts(),  # no group before the user has judged enough each way
                "ready": self.ready_groups(), "wanted": self.settings.grpo_groups, "last_job": self.rollouts.last,
                "last_round": {k: m.get(k) for k in ("groups", "group_answers", "advantage_mean_abs",
                                                     "advantage_max_abs")} if m.get("groups") else None}

    def _serving(self) -> dict[str, Any]:
        """What the engine holds, for the trainer's memory plan (clawd.train.memory)."""
        return asdict(llama_serving(**self.engine.footprint(self.judge.context_tokens)))

    def _trained_by(self) -> str | None:
        """The backend of the last round: this run's, else the newest adapter's record."""
        last = self.scheduler.state.last_train
        if last is not None and last.detail.get("backend"):
            return last.detail["backend"]
        adapters = self.store.adapters()
        return (adapters[-1].meta.get("backend") or {}).get("backend") if adapters else None

    def _activity(self) -> Activity:
        return Activity(in_flight=self.chat.in_flight, last_activity=self.chat.last_activity)

    def _publish(self) -> dict[str, Any] | None:
        try:
            return asdict(self.adapters.publish())  # status keeps it as the last publish's outcome
        except AdapterError as e:  # rejected by the gate, or nothing to publish: an outcome, not a crash
            log.warning("not published: %s", e)
            return {"published": False, "error": str(e)}
        except Exception as e:  # a failed publish leaves the live adapter as it was
            log.exception("publishing failed")
            return {"published": False, "error": str(e)}

    def status(self) -> Status:
        st = self.scheduler.state
        version = self.engine.adapter_version
        adapter = None
        if version is not None:
            row = next((a for a in self.store.adapters() if a.version == version), None)
            adapter = LiveAdapter(version, round(time.time() - row.created, 1) if row else None)
        e = self.engine
        return Status(
            version=__version__, uptime_s=round(time.time() - self.started, 1),
            model=ModelStatus(self.settings.model_id, str(e.model_path), e.n_ctx, e.n_ctx_train, round(e.load_seconds, 2)),
            device=_device(), adapter=adapter, turns=self.store.counts(), recent_scores=self.store.recent_scores(40),
            judge=self.judge.trust(), doing=st.doing, doing_since_s=round(time.time() - st.since, 1),
            in_flight=self.chat.in_flight,
            training=TrainingStatus(
                last=st.last_train, progress=st.train_progress, last_publish=st.last_publish,
                batch=self.round_batch(), ready=self.ready_to_train(),
                backend=self._trained_by(), backend_setting=self.settings.train_backend,
                auto=self.settings.auto_learn, idle_seconds=self.settings.idle_seconds,
                paused=self.store.learning_paused()),
            prompt_cache=e.cache.status() if e.cache else None, memory_mb=_rss_mb(), home=str(self.settings.home),
            grpo=self._grpo())

    def app(self):
        return create_app(self)

    def close(self) -> None:
        """At shutdown (the app's lifespan end): the prompt cache to disk first (seconds at most),
        then background work stops (a training child at the end of its micro-step)."""
        self.engine.close()
        self.scheduler.shutdown()


def serve(settings: Settings) -> None:
    settings.check_bind()
    ensure_home(settings.home)
    setup_logging(settings)
    log.info("clawd %s starting with settings %s", __version__, settings.public())
    try:
        daemon = Daemon(settings)
    except StorageError as e:  # it could not record a turn: say why rather than serve unrecorded
        log.error("not starting: %s", e)
        raise SystemExit(1) from None
    import uvicorn

    if settings.auto_learn:
        daemon.scheduler.start()
    log.info("listening on http://%s:%d/v1 (model id %r)", settings.host, settings.port, settings.model_id)
    uvicorn.run(daemon.app(), host=settings.host, port=settings.port, log_level="warning", access_log=False)


def _rss_mb() -> float:
    try:  # current resident memory (Linux); the peak elsewhere
        with open("/proc/self/statm") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _device() -> str:
    import llama_cpp

    return "cuda" if llama_cpp.llama_supports_gpu_offload() else "cpu"
