"""Idle-time jobs (design §9): judge the backlog, train when enough turns are ready, publish what
training produced, close stale sessions — one heavy job at a time, never in a user's way.

A tick runs every `tick_seconds` on APScheduler's thread (max one at a time). Idle means no
request in flight, none for `idle_seconds`, and on CUDA a GPU below `gpu_busy_percent`. The
judge yields to users between tokens by itself (the engine's priority lock); the trainer child
is paused between micro-steps while anyone is being served, and resumed when idle again. Every
job can be killed at any point: judgments are unique per turn, training resumes from its last
checkpoint, publishing is idempotent. While the user has paused learning, nothing trains or
publishes (a round under way is stopped at its checkpoint); judging goes on.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from .config import Settings
from .store.records import TrainEvent
from .store.store import StorageError, Store

log = logging.getLogger("clawd.scheduler")
WAIT_RETRY_S = 600.0  # after a round that did not fit beside serving (clawd.train.memory): memory frees slowly


@dataclass
class Activity:
    in_flight: int
    last_activity: float


@dataclass
class Jobs:
    """The stage entry points the daemon hands in; the scheduler imports no stage itself."""

    judge_backlog: Callable[[threading.Event], int]  # judges until done or the event is set
    backlog_size: Callable[[], int]
    ready_to_train: Callable[[], int]  # turns a round could use now
    ready_groups: Callable[[], int]  # scored GRPO groups a round could use now
    rollouts_pending: Callable[[], bool]  # GRPO groups to make or score (judge/rollouts.py)
    # makes them until done, its budget spent, the event set, or the predicate says a round's worth is ready
    rollouts: Callable[[threading.Event, Callable[[], bool]], int]
    staged: Callable[[], bool]  # an interrupted round waits to be resumed
    start_trainer: Callable[[], Any]  # -> a Trainer (start/pause/resume/alive/paused/events/stop)
    publish: Callable[[], dict[str, Any] | None]  # publish the newest trained adapter, if any
    unpublished: Callable[[], int | None]  # the newest trained adapter not yet gated (a kill came between)


@dataclass
class State:
    doing: str = "starting"
    since: float = field(default_factory=time.time)
    last_train: TrainEvent | None = None  # how the last round ended, with `at`
    last_publish: dict[str, Any] | None = None
    train_progress: TrainEvent | None = None
    judge_progress: dict[str, Any] | None = None


def gpu_busy_percent() -> float:
    """GPU utilization from NVML; 0 where there is no NVIDIA GPU or no pynvml."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except Exception:
        return 0.0


class Scheduler:
    def __init__(self, settings: Settings, store: Store, activity: Callable[[], Activity], jobs: Jobs):
        self.settings, self.store, self.activity, self.jobs = settings, store, activity, jobs
        self.state = State()
        self.trainer: Any = None
        self._train_backoff_until = 0.0  # after a failed round: do not start another at every tick
        self._failures = 0
        self._storage_wait_until = 0.0
        self._publish_tried: set[int] = set()
        self._stop_judge = threading.Event()
        self._asked: set[str] = set()  # "train", "judge": asked for by hand, done at the next free tick
        self._sched = BackgroundScheduler(daemon=True)
        self._sched.add_job(self.tick, "interval", seconds=settings.tick_seconds, max_instances=1, coalesce=True,
                            id="tick", next_run_time=None)

    def start(self) -> None:
        self._sched.start()
        self._sched.modify_job("tick", next_run_time=_now())
        log.info("scheduler started: idle after %.0fs, train at %d ready turns", self.settings.idle_seconds,
                 self.settings.train_batch)

    def shutdown(self) -> None:
        self._stop_judge.set()
        if self._sched.running:  # not started when auto_learn is off
            self._sched.shutdown(wait=False)
        if self.trainer is not None and self.trainer.alive:
            self.trainer.stop(timeout=30)

    def pause_training(self) -> None:
        """Someone is being served. Called as each request is admitted, so training pauses now
        rather than at the next tick (the child stops at the end of its micro-step); the next idle
        tick resumes it."""
        t = self.trainer
        if t is not None and not t.paused:
            t.pause()
            self._set("training (paused for a request)")

    def ask(self, job: str) -> None:
        """`clawd train --once` / `clawd judge --once` with the daemon running: do it at the next
        tick with no request in flight, without waiting idle_seconds; a round trains on what is
        ready even below train_batch."""
        self._asked.add(job)
        if self._sched.running:
            self._sched.modify_job("tick", next_run_time=_now())

    def _start_training(self, why: str) -> None:
        log.info("%s: starting a training round", why)
        self._set("training")
        self.trainer = self.jobs.start_trainer()

    def _set(self, doing: str) -> None:
        if doing != self.state.doing:
            self.state.doing, self.state.since = doing, time.time()

    def idle(self) -> bool:
        a = self.activity()
        wait = 0.0 if self._asked else self.settings.idle_seconds
        if a.in_flight > 0 or time.time() - a.last_activity < wait:
            return False
        return gpu_busy_percent() < self.settings.gpu_busy_percent

    def tick(self) -> None:
        if time.time() < self._storage_wait_until:
            return
        try:
            self._tick()
        except StorageError as e:  # disk full or read-only: every job would fail the same way for now
            self._storage_wait_until = time.time() + 60
            self._set("waiting for storage")
            log.error("background work paused for a minute: %s", e)
        except Exception:  # a failing job must not kill the scheduler; it is retried next tick
            log.exception("scheduler tick failed")

    def _tick(self) -> None:
        closed = self.store.close_stale_sessions(self.settings.session_timeout)
        if closed:
            log.info("closed %d idle session(s)", closed)
        idle = self.idle()
        # The user's switch (dashboard, POST /v1/clawd/learning/pause), read from the database every
        # tick so that it holds across restarts: no training, no publishing; judging goes on.
        paused = self.store.learning_paused()
        if self.trainer is not None:
            if paused and self.trainer.alive:
                # stopped, not paused: a pause may last days, and a stopped child gives its memory
                # back; the staged round resumes from its last checkpoint once learning resumes
                log.info("learning paused: stopping the training round at its next micro-step")
                self.trainer.stop()
            self._watch_trainer(idle, paused)
            return
        if not idle:
            self._set("serving" if self.activity().in_flight else "waiting for idle")
            return
        may_train = not paused and time.time() >= self._train_backoff_until
        if may_train and self.jobs.staged():
            self._start_training("a stop interrupted the last round")  # it resumes from its checkpoint
            return
        if self.jobs.backlog_size() > 0:
            self._asked.discard("judge")
            self._set("judging")
            self._stop_judge.clear()
            n = self.jobs.judge_backlog(self._stop_judge)
            self.state.judge_progress = {"judged": n, "at": time.time()}
            return
        pending = self.jobs.unpublished()
        if not paused and pending is not None and pending not in self._publish_tried:
            # trained, then the daemon stopped before the gate: finish the job once (a failure is kept
            # in the log and status; `clawd publish N` retries by hand)
            self._publish_tried.add(pending)
            log.info("adapter %d was trained but never gated: publishing it now", pending)
            self._publish()
            return
        self._asked.discard("judge")  # nothing (left) to judge
        ready, groups = self.jobs.ready_to_train(), self.jobs.ready_groups()
        enough = self._round_ready(ready, groups)
        if may_train and (enough or ("train" in self._asked and ready + groups > 0)):
            self._asked.discard("train")
            self._start_training(f"{ready} turns and {groups} GRPO groups ready" + ("" if enough else ", asked for"))
            return
        if may_train and self.jobs.rollouts_pending():
            # the lowest-priority idle work: sampling and scoring groups for the next round
            self._set("sampling groups")
            self._stop_judge.clear()
            self.jobs.rollouts(self._stop_judge, lambda: self._round_ready(self.jobs.ready_to_train(), self.jobs.ready_groups()))
            return
        if "train" in self._asked:
            self._asked.discard("train")
            log.info("a round was asked for, but %s", "no judged turn is ready" if may_train else
                     "the last round failed and its backoff has not passed")
        self._set("idle, learning paused" if paused else "idle")

    def _round_ready(self, ready: int, groups: int) -> bool:
        """A round's worth from either source or from both: 6 of 8 turns and 2 of 8 groups make one.
        Each alone would leave the other's evidence waiting for more turns that may be days away."""
        b, g = self.settings.train_batch, self.settings.grpo_groups
        return ready * g + groups * b >= b * g  # ready/b + groups/g >= 1, in integers

    def _watch_trainer(self, idle: bool, paused: bool = False) -> None:
        t = self.trainer
        for ev in t.events():
            self.state.train_progress = ev
            if ev.final:
                self.state.last_train = dataclasses.replace(ev, at=time.time())
                log.info("training round ended: %s", ev.event)
                if ev.event == "error":
                    # the same turns would fail the same way: wait 1, 2, 4 … 60 minutes
                    self._failures += 1
                    wait = 60.0 * min(2 ** (self._failures - 1), 60)
                    self._train_backoff_until = time.time() + wait
                    log.warning("training failed (%s); next try in %.0f min", ev.error, wait / 60)
                elif ev.event == "waiting":  # no room beside serving: not a failure, ask again later
                    self._train_backoff_until = time.time() + WAIT_RETRY_S
                    log.info("training waits %.0f min for memory: %s", WAIT_RETRY_S / 60, ev.error)
                elif ev.event == "done":
                    self._failures = 0
        if t.alive:
            if not idle:
                self.pause_training()
            elif t.paused:
                t.resume()
                self._set("training")
            return
        self.trainer = None
        if self.state.last_train is not None and self.state.last_train.event == "done" and not paused:  # else once learning resumes
            self._publish()
        self._set("idle")

    def _publish(self) -> None:
        self._set("publishing")
        result = self.jobs.publish()
        self.state.last_publish = {**(result or {}), "at": time.time()}
        self._set("idle")


def _now():
    from datetime import datetime

    return datetime.now()
