"""The dashboard's reads and controls below HTTP: keyset pages, the reward trend, sessions kept
out of training, and the scheduler obeying the user's pause. Real Store on a temporary file."""

from __future__ import annotations

import pytest

from bench.serving.dashboard_data import seed
from clawd.config import Settings  # noqa: E402
from clawd.scheduler import Activity, Jobs, Scheduler  # noqa: E402
from clawd.store.records import Feedback, Judgment, NextState, RoundState, TrainEvent, Turn  # noqa: E402
from clawd.store.store import Store  # noqa: E402
from clawd.train.samples import ready_turns  # noqa: E402


@pytest.fixture
def store(tmp_path) -> Store:
    s = Store(tmp_path / "clawd.db")
    yield s
    s.close()


def judged_turn(store: Store, session: int, score: int, hint: str | None = None) -> int:
    n = store.counts()["turns"]
    t = Turn(session_id=session, index=store.next_index(session), kind="main", completion_id=f"chatcmpl-{n}",
             request={"messages": [{"role": "user", "content": "hi"}]}, prompt_ids=[1, 2, 3])
    store.insert_turn(t)
    t.completion_ids, t.logprobs, t.text, t.status = [4, 5], [-0.5, -0.5], "hello", "ok"
    store.finish_turn(t)
    store.add_next_state(NextState(turn_id=t.id, role="user", content="thanks", messages=[]))
    store.add_judgment(Judgment(turn_id=t.id, method="ask", score=score, judge_model="m", hint=hint))
    return t.id


def test_excluded_session_is_never_selected_for_training(store):
    kept, private = store.open_session("kept"), store.open_session("private")
    mine = [judged_turn(store, kept, s, "be brief" if s < 0 else None) for s in (1, -1, 1)]
    secret = [judged_turn(store, private, s, "shorter" if s < 0 else None) for s in (1, -1, 1)]
    store.set_feedback(Feedback(turn_id=secret[0], score=-1, comment="no", hint="no"))  # feedback does not let it in
    assert {m: ready_turns(store, m, 100) for m in ("rl", "opd", "combined")} == \
        {"rl": mine + secret, "opd": [mine[1], secret[0], secret[1]], "combined": mine + secret}

    assert store.set_session_excluded(private, True)
    for method in ("rl", "opd", "combined"):
        assert not set(ready_turns(store, method, 100)) & set(secret), method
    assert {t.id for t in store.positive_turns(100)} == {mine[0], mine[2]}  # nor replayed by the gate
    assert store.excluded_turns(mine + secret) == secret
    assert all(v.session_excluded for v in store.turn_views(session_id=private))
    # new turns of an excluded session stay out too (the client keeps talking in it)
    later = judged_turn(store, private, 1)
    assert later not in ready_turns(store, "combined", 100)

    assert store.set_session_excluded(private, False)
    assert set(ready_turns(store, "combined", 100)) == set(mine + secret + [later])
    assert not store.set_session_excluded(999, True)


def test_a_round_whose_session_was_excluded_is_discarded(store):
    from clawd.train.loop import TrainError, _check_not_excluded

    s = store.open_session("s")
    ids = [judged_turn(store, s, 1), judged_turn(store, s, -1, "x")]
    other = store.open_session("other")
    grouped = judged_turn(store, other, -1, "y")  # a turn only a group answers
    _check_not_excluded(store, RoundState(ids, None, {}, run_id=1), [grouped])  # nothing excluded: it goes on
    store.set_session_excluded(other, True)
    with pytest.raises(TrainError, match="excluded from training"):  # a group's prompt alone is enough
        _check_not_excluded(store, RoundState(ids, None, {}, run_id=1), [grouped])
    store.set_session_excluded(other, False)
    store.set_session_excluded(s, True)
    with pytest.raises(TrainError, match="excluded from training"):
        _check_not_excluded(store, RoundState(ids, None, {}, run_id=1), [])


def test_keyset_pages_cover_every_turn_once(store):
    info = seed(store, 60, per_session=7)
    pages, before = [], None
    while True:
        page = store.turn_views(before=before, limit=7)
        pages.append([t.id for t in page])
        if len(page) < 7:
            break
        before = page[-1].id
    flat = [i for p in pages for i in p]
    assert flat == sorted(info["turns"], reverse=True)
    one = info["sessions"][2]
    assert [t.session_id for t in store.turn_views(session_id=one, limit=100)] == [one] * 8  # 60 turns in 8 sessions
    assert {t.id for t in store.turn_views(limit=100) if t.trained} == set(info["trained"])
    sessions = store.session_views(limit=5) + store.session_views(before=store.session_views(limit=5)[-1].id, limit=50)
    assert [s.id for s in sessions] == sorted(info["sessions"], reverse=True)
    assert sum(s.turns for s in sessions) == 60 and sum(s.trained for s in sessions) == len(info["trained"])


def test_reward_trend_counts_feedback_over_the_judge(store):
    s = store.open_session("s")
    ids = [judged_turn(store, s, score) for score in (1, 1, -1, 0, -1, 1)]
    store.set_feedback(Feedback(turn_id=ids[2], score=1))  # the user overrides a −1
    trend = store.reward_trend(buckets=3)
    assert sum(b.n for b in trend) == 6 and [b.first_turn for b in trend] == [ids[0], ids[2], ids[4]]
    assert [b.mean for b in trend] == [1.0, 0.5, 0.0]
    assert all(b.start <= b.end for b in trend)
    assert store.reward_trend() and Store(store.path).reward_trend(1)[0].n == 6


def test_user_text_and_cut(store):
    s = store.open_session("s")
    t = Turn(session_id=s, index=0, kind="main", completion_id="c-long", prompt_ids=[1],
             request={"messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "a"},
                                   {"role": "user", "content": [{"type": "text", "text": "x" * 50}]},
                                   {"role": "tool", "content": "out"}]})
    store.insert_turn(t)
    (v,) = store.turn_views(cut=20)
    assert v.user == "x" * 20 and v.truncated == ["user"] and v.status == "running" and v.next_role is None


class Child:
    """Stands in for the trainer child process (the Jobs seam is how the daemon hands it in)."""

    def __init__(self):
        self.alive, self.paused, self.stopped, self._events = True, False, False, []

    def pause(self):
        self.paused = True

    def resume(self):
        self.paused = False

    def stop(self, timeout: float = 60):
        self.stopped, self.alive = True, False
        self._events.append(TrainEvent("stopped"))

    def events(self):
        out, self._events = self._events, []
        return out


def test_scheduler_does_not_train_or_publish_while_learning_is_paused(tmp_path, store):
    calls, state = [], {"backlog": 0, "unpublished": None, "child": None}

    def start():
        calls.append("train")
        state["child"] = Child()
        return state["child"]

    jobs = Jobs(judge_backlog=lambda stop: calls.append("judge") or 1, backlog_size=lambda: state["backlog"],
                ready_to_train=lambda: 99, ready_groups=lambda: 99, rollouts_pending=lambda: True,
                rollouts=lambda stop, enough: calls.append("rollouts") or 1, staged=lambda: False, start_trainer=start,
                publish=lambda: calls.append("publish") or {}, unpublished=lambda: state["unpublished"])
    sched = Scheduler(Settings(home=tmp_path), store, lambda: Activity(in_flight=0, last_activity=0.0), jobs)

    store.set_learning_paused(True)
    state["unpublished"] = 3  # trained before a restart, not yet gated
    sched.tick()
    assert calls == [] and sched.state.doing == "idle, learning paused"
    state["backlog"] = 1
    sched.tick()
    assert calls == ["judge"]  # judging goes on
    state["backlog"] = 0

    store.set_learning_paused(False)
    sched.tick()
    sched.tick()
    assert calls == ["judge", "publish", "train"]

    store.set_learning_paused(True)  # a round under way is stopped at its checkpoint, and not published
    sched.tick()
    assert state["child"].stopped and sched.trainer is None and calls[-1] == "train"
    assert sched.state.last_train is not None and sched.state.last_train.event == "stopped"
    sched.tick()
    assert calls.count("train") == 1
