"""`clawd judge --once` on a prepared database, as a user would run it: each eligible turn is
judged exactly once, also when the run is killed mid-backlog and started again."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from conftest import seed_judge

from clawd.store.records import NextState, ToolCall, Turn
from clawd.store.store import Store

CASES = [json.loads(x) for x in (Path(__file__).parent / "data" / "judge_cases.jsonl").read_text().splitlines()]
FAST = ["--threads", "2", "--judge-budget-tokens", "1024"]


def record(store: Store, session: int, index: int, case: dict, kind: str = "main", status: str = "ok",
           next_state: bool = True) -> int:
    t = Turn(session_id=session, index=index, kind=kind, completion_id=f"chatcmpl-test{index}",
             request={"messages": case["messages"]}, prompt_ids=[1, 2, 3])
    store.insert_turn(t)
    t.text, t.status, t.completion_ids, t.logprobs = case["output"]["text"], status, [4], [-0.5]
    t.tool_calls = [ToolCall(id=f"call_{k}", name=c["name"], arguments=c["arguments"])
                    for k, c in enumerate(case["output"]["tool_calls"])]
    store.finish_turn(t)
    if next_state:
        ns = case["next_state"]
        store.add_next_state(NextState(turn_id=t.id, role=ns["role"], messages=ns["messages"],  # type: ignore[arg-type]
                                       content="\n\n".join(m["content"] for m in ns["messages"])))
    return t.id  # type: ignore[return-value]


def prepare(home: Path, n: int) -> tuple[list[int], list[int]]:
    """n judgeable turns (cases spread over the categories), and three that must not be judged."""
    seed_judge(home)
    store = Store(home / "clawd.db")
    session = store.open_session("auto:test")
    picks = [CASES[(k * 7) % len(CASES)] for k in range(n)]
    judgeable = [record(store, session, k, c) for k, c in enumerate(picks)]
    others = [record(store, session, n, CASES[0], kind="side"),  # side turns are never trained
              record(store, session, n + 1, CASES[1], next_state=False),  # no evidence yet
              record(store, session, n + 2, CASES[2], status="aborted")]  # never answered in full
    store.close()
    return judgeable, others


def judge_once(home: Path, *flags: str, wait: bool = True):
    cmd = [sys.executable, "-m", "clawd", "judge", "--once", "--offline", *FAST, *flags]
    env = {**os.environ, "CLAWD_HOME": str(home)}
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def rows(home: Path) -> dict[int, dict]:
    con = sqlite3.connect(f"file:{home / 'clawd.db'}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        return {r["turn_id"]: dict(r) for r in con.execute("SELECT * FROM judgments")}
    finally:
        con.close()


def test_judge_once_judges_each_turn_once(fresh_home):
    judgeable, others = prepare(fresh_home, 4)
    out = judge_once(fresh_home)
    assert "judged 4 turn(s)" in out and "0 left" in out
    first = rows(fresh_home)
    assert sorted(first) == sorted(judgeable) and not set(others) & set(first)
    for r in first.values():
        probs = json.loads(r["probs"])
        assert r["method"] == "ask" and r["score"] in (-1, 0, 1) and r["judge_adapter"] is None
        assert r["judge_model"].endswith(".gguf") and abs(probs["1"] + probs["-1"] + probs["0"] - 1) < 1e-3
        assert {"x_0", "x_1", "x_2"} <= set(probs)  # the raw features the calibration read
        assert json.loads(r["timings"])["prompt_tokens"] > 0
    assert "judged 0 turn(s)" in judge_once(fresh_home)  # nothing left
    assert rows(fresh_home) == first


def test_killed_mid_backlog_then_restarted_judges_the_rest_exactly_once(fresh_home):
    judgeable, _ = prepare(fresh_home, 4)
    proc = judge_once(fresh_home, wait=False)
    deadline = time.time() + 600
    while not rows(fresh_home) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = rows(fresh_home)
    assert 1 <= len(before) < 4, "killed after the first verdict, before the last"

    out = judge_once(fresh_home)
    assert f"judged {4 - len(before)} turn(s)" in out
    after = rows(fresh_home)
    assert sorted(after) == sorted(judgeable)
    assert all(after[t] == r for t, r in before.items())  # the first run's verdicts stand untouched
    r = after[judgeable[-1]]
    assert r["judge_adapter"] is None and r["judge_model"].endswith(".gguf")
    assert {"total_s", "prompt_tokens"} <= set(json.loads(r["timings"]))
