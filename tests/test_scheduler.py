"""The scheduler's decisions with fake jobs behind its `Jobs` seam: no model, no trainer, no
clock but the real one (each tick is called by hand, so nothing here waits)."""

from __future__ import annotations

import threading
import time

import pytest

from clawd.config import Settings
from clawd.scheduler import Activity, Jobs, Scheduler
from clawd.store.records import TrainEvent
from clawd.store.store import Store

pytestmark = pytest.mark.fast


class FakeTrainer:
    def __init__(self, events: list[TrainEvent]):
        self._events, self.paused, self.alive = list(events), False, True

    def events(self) -> list[TrainEvent]:
        out, self._events = self._events, []
        if any(e.final for e in out):
            self.alive = False
        return out

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def stop(self, timeout: float = 0) -> int:
        self.alive = False
        return 0


class World:
    """What the daemon would hand the scheduler, as plain state the test sets."""

    def __init__(self, tmp_path, **settings):
        self.ready, self.backlog, self.staged, self.unpublished = 0, 0, False, None
        self.groups, self.to_sample, self.sampled = 0, 0, 0  # GRPO: groups ready, groups left to make, made
        self.in_flight, self.last_activity = 0, 0.0
        self.round_events: list[list[TrainEvent]] = []  # one list per round started
        self.started, self.published, self.judged = 0, [], 0
        self.settings = Settings(home=tmp_path, idle_seconds=settings.pop("idle_seconds", 0), **settings)
        self.store = Store(tmp_path / "clawd.db")
        self.s = Scheduler(self.settings, self.store, lambda: Activity(self.in_flight, self.last_activity), Jobs(
            judge_backlog=self._judge, backlog_size=lambda: self.backlog, ready_to_train=lambda: self.ready,
            ready_groups=lambda: self.groups, rollouts_pending=lambda: self.to_sample > 0, rollouts=self._rollouts,
            staged=lambda: self.staged, start_trainer=self._start, publish=self._publish,
            unpublished=lambda: self.unpublished))

    def _rollouts(self, stop: threading.Event, enough) -> int:
        """As Rollouts.run: one group at a time, each ready once made, until none is left or enough()."""
        n = 0
        while self.to_sample > 0:
            self.to_sample, self.sampled, self.groups, n = self.to_sample - 1, self.sampled + 1, self.groups + 1, n + 1
            if enough():
                break
        return n

    def _judge(self, stop: threading.Event) -> int:
        n, self.backlog, self.judged = self.backlog, 0, self.judged + self.backlog
        return n

    def _start(self) -> FakeTrainer:
        self.started += 1
        return FakeTrainer(self.round_events.pop(0) if self.round_events else [TrainEvent("done", version=1)])

    def _publish(self) -> dict:
        self.published.append(self.unpublished)
        self.unpublished = None
        return {"published": True}

    def ticks(self, n: int = 1) -> str:
        for _ in range(n):
            self.s.tick()
        return self.s.state.doing


def test_a_staged_round_resumes_before_anything_else(tmp_path):
    w = World(tmp_path, train_batch=4)
    w.staged, w.backlog, w.ready = True, 3, 0
    assert w.ticks() == "training" and w.started == 1 and w.judged == 0


def test_judges_first_then_trains_at_a_full_batch_then_publishes(tmp_path):
    w = World(tmp_path, train_batch=4)
    w.backlog, w.ready = 2, 3
    assert w.ticks() == "judging" and w.judged == 2
    assert w.ticks() == "idle" and w.started == 0  # 3 of 4 ready: no round
    w.ready = 4
    assert w.ticks() == "training" and w.started == 1
    w.unpublished = 1
    assert w.ticks() == "idle" and w.published == [1]  # the round said done: publish once


def test_a_request_pauses_the_round_and_idle_resumes_it(tmp_path):
    w = World(tmp_path, train_batch=1)
    w.ready, w.round_events = 1, [[]]  # a round that runs until told
    w.ticks()
    t = w.s.trainer
    w.in_flight = 1
    assert w.ticks() == "training (paused for a request)" and t.paused
    w.in_flight, w.last_activity = 0, time.time()
    w.ticks()
    assert not t.paused and w.s.state.doing == "training"


def test_a_failed_round_backs_off_and_doubles(tmp_path):
    w = World(tmp_path, train_batch=1)
    w.ready = 1
    w.round_events = [[TrainEvent("error", error="boom")], [TrainEvent("error", error="boom")]]
    w.ticks(2)  # start, then see the error
    assert w.started == 1 and w.published == []
    first = w.s._train_backoff_until - time.time()
    assert 55 < first <= 60
    assert w.ticks(3) == "idle" and w.started == 1  # inside the backoff: no new round
    w.s._train_backoff_until = 0
    w.ticks(2)
    assert w.started == 2 and 115 < w.s._train_backoff_until - time.time() <= 120


def test_a_round_without_room_waits_without_counting_as_a_failure(tmp_path):
    """The trainer's memory plan found no room beside serving (clawd/train/memory.py): ask again
    in 10 minutes, and a failure after that still backs off from the first step."""
    w = World(tmp_path, train_batch=1)
    w.ready = 1
    plan = {"decision": "wait", "reason": "not even 1024 fit"}
    w.round_events = [[TrainEvent("waiting", error="not training now: not even 1024 fit", detail={"memory_plan": plan})],
                      [TrainEvent("error", error="boom")]]
    w.ticks(2)
    assert w.started == 1 and (last := w.s.state.last_train) is not None and last.event == "waiting" and last.detail["memory_plan"] == plan
    assert 595 < w.s._train_backoff_until - time.time() <= 600 and w.s._failures == 0
    assert w.ticks(3) == "idle" and w.started == 1
    w.s._train_backoff_until = 0
    w.ticks(2)
    assert w.started == 2 and 55 < w.s._train_backoff_until - time.time() <= 60


def test_an_adapter_trained_but_never_gated_is_published_once(tmp_path):
    w = World(tmp_path)
    w.unpublished = 3
    w._publish = lambda: (w.published.append(3), {"published": False, "error": "rejected"})[1]  # stays unpublished
    w.s.jobs.publish = w._publish
    w.ticks(4)
    assert w.published == [3]  # tried once; `clawd publish 3` retries by hand


def test_asked_for_a_round_trains_below_the_batch_without_waiting_idle(tmp_path):
    w = World(tmp_path, train_batch=16, idle_seconds=3600)
    w.ready, w.last_activity = 2, time.time()
    assert w.ticks() == "waiting for idle" and w.started == 0
    w.s.ask("train")
    assert w.ticks() == "training" and w.started == 1
    w.ticks()  # the round ends; the ask was used up
    assert w.ticks() == "waiting for idle" and w.started == 1
    w.in_flight = 1
    w.s.ask("train")
    assert w.ticks() == "serving" and w.started == 1  # never ahead of a request


def test_groups_are_made_when_nothing_else_is_to_do_and_start_a_round_when_enough(tmp_path):
    w = World(tmp_path, train_batch=8, grpo_groups=4)
    w.backlog, w.ready, w.to_sample = 2, 3, 6
    assert w.ticks() == "judging" and w.sampled == 0  # the judge goes first
    # then the groups (3 turns are not a round), until 3/8 + 3/4 make one: the other 3 would be
    # sampled under an adapter the round replaces
    assert w.ticks() == "sampling groups" and w.sampled == 3 and w.to_sample == 3
    assert w.ticks() == "training" and w.started == 1


def test_no_groups_are_made_while_learning_is_paused(tmp_path):
    w = World(tmp_path, grpo_groups=4)
    w.to_sample = 2
    w.store.set_learning_paused(True)
    assert w.ticks() == "idle, learning paused" and w.sampled == 0


def test_turns_and_groups_each_short_of_a_round_make_one_together(tmp_path):
    # 6 of 8 judged turns and 2 of 8 groups: neither is a round alone, together they are one
    w = World(tmp_path, train_batch=8, grpo_groups=8)
    w.ready, w.to_sample = 6, 1
    assert w.ticks() == "sampling groups" and w.groups == 1  # 6/8 + 0/8
    assert w.ticks() == "idle" and w.started == 0  # 6/8 + 1/8: still short
    w.to_sample = 1
    assert w.ticks() == "sampling groups" and w.groups == 2
    assert w.ticks() == "training" and w.started == 1  # 6/8 + 2/8
