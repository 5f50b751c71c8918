"""The OpenClaw tool-task bench without a model: every task's setup, check and oracle; how a call
is judged; how a streamed answer is put back together (bench/tools/); each task's caps."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from bench.tools.score import judge_call, record, score, steps_done, summarize, wilson
from bench.tools.selftest import selftest
from bench.tools.task_set import TASKS
from bench.tools.tasks import agent_run
from bench.tools.wire import Log, assemble, handler, oracle_answer, sse

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.fast
FIXTURE = ROOT / "tests" / "fixtures" / "openclaw" / "tool_call_request.json"
OFFERED = {"exec": ["command"], "read": ["path"], "write": ["path", "content"], "ls": []}


def test_every_task_fails_untouched_and_passes_after_its_oracle(capsys):
    assert len(TASKS) >= 20
    assert {t.kind for t in TASKS} == {"exec", "read", "write", "edit", "ls", "chain"}
    assert selftest(TASKS, FIXTURE) == 0, capsys.readouterr().out


def test_a_call_is_judged_by_name_json_and_required_parameters():
    assert judge_call({"name": "read", "arguments": '{"path": "a"}'}, OFFERED)["valid"]
    assert judge_call({"name": "ls", "arguments": ""}, OFFERED)["valid"]  # no arguments: {}
    missing = judge_call({"name": "write", "arguments": '{"path": "a"}'}, OFFERED)
    assert missing["json"] and not missing["valid"] and missing["missing"] == ["content"]
    bad = judge_call({"name": "read", "arguments": '{"path": "a"'}, OFFERED)
    assert bad["offered"] and not bad["json"]
    assert not judge_call({"name": "cat", "arguments": "{}"}, OFFERED)["offered"]


def test_steps_run_in_order_and_calls_as_text_are_counted():
    task = next(t for t in TASKS if t.name == "chain_write_read")
    calls = [judge_call({"name": n, "arguments": json.dumps(a)}, OFFERED) for n, a in task.oracle]
    assert steps_done(task, calls) and not steps_done(task, calls[::-1])
    recs = [{"offered": OFFERED, "messages": [], "content": '<tool_call>{"name": "read"', "tool_calls": [],
             "seconds": 1.0, "status": "ok"}]
    recs.append(recs[0] | {"content": '<|im_start|>\n{"name": "openclaw", "arguments": {}}'})
    recs.append(recs[0] | {"content": "functions.exec:"})
    recs.append(recs[0] | {"content": 'Use {"name": "x"} like this.'})  # prose, not a call
    s = score(task, recs)
    assert s["calls_as_text"] == 3 and s["malformed"] == 0 and not s["tools_ok"]
    sub = record({"tools": [{"function": {"name": "read", "parameters": {"required": ["path"]}}}],
                  "messages": [{"role": "user", "content": "hi\n\nRuntime: agent=openclaw | session=x"}]},
                 "", [{"name": "read", "arguments": "{}"}], 1.0, "ok")
    assert sub["agent"] == "openclaw" and score(task, [sub])["calls"][0] | {"arguments": ""} == {
        "name": "read", "arguments": "", "offered": True, "json": True, "valid": False, "missing": ["path"],
        "agent": "openclaw"}


def test_the_oracle_streams_what_the_proxy_reassembles():
    task = next(t for t in TASKS if t.name == "chain_ls_read")
    request = {"tools": [{"function": {"name": "ls"}}], "messages": [{"role": "user", "content": task.message}]}
    answer = oracle_answer(request)
    assert answer["tool_calls"][0]["name"] == "ls"
    assert assemble(sse(answer, "m"), streamed=True) == answer
    request["messages"] += [{"role": "assistant", "tool_calls": [{"function": answer["tool_calls"][0]}]},
                            {"role": "tool", "content": "notes/minutes-0412.txt"}]
    assert oracle_answer(request)["tool_calls"][0]["name"] == "read"


def _serve(h) -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), h)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize("unstream", [False, True])
def test_the_proxy_relays_and_logs_what_the_upstream_answered(tmp_path, unstream):
    """The oracle as the upstream: a streamed request comes back streamed (passed through, or asked
    for whole and re-streamed), and the log holds the call as the client sees it."""
    oracle = _serve(handler(Log(tmp_path / "oracle.jsonl"), None))
    proxy = _serve(handler(Log(tmp_path / "proxy.jsonl"), oracle, unstream))
    task = next(t for t in TASKS if t.name == "read_port")
    body = {"model": "m", "stream": True, "tools": [{"type": "function", "function": {"name": "read"}}],
            "messages": [{"role": "user", "content": task.message}]}
    r = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 200 and "text/event-stream" in r.headers["content-type"]
    call = {"name": "read", "arguments": json.dumps({"path": "config.ini"})}
    assert assemble(r.content, streamed=True)["tool_calls"] == [call]
    logged = [json.loads(x) for x in (tmp_path / "proxy.jsonl").read_text().splitlines()]
    assert len(logged) == 1 and logged[0]["answer"]["tool_calls"] == [call] and logged[0]["status"] == 200
    upstream = json.loads((tmp_path / "oracle.jsonl").read_text().splitlines()[0])["request"]
    assert upstream.get("stream", False) is not unstream


def _fake_agent(tmp_path, calls: int, then_sleep: float) -> tuple[list[str], Path]:
    """A stand-in for the OpenClaw command (npm cannot install here): it records a model call a
    line at a time in a log, as bench/tools/wire.py does, then sleeps, then prints its answer."""
    log = tmp_path / "calls.log"
    script = (f"import time, pathlib\np = pathlib.Path({str(log)!r})\n"
              f"for i in range({calls}):\n    time.sleep(0.05)\n    p.open('a').write('call\\n')\n"
              f"time.sleep({then_sleep})\nprint('{{\"payloads\": []}}')\n")
    return [sys.executable, "-c", script], log


def _lines(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_task_past_its_call_cap_is_killed_and_fails_with_the_reason(tmp_path):
    cmd, log = _fake_agent(tmp_path, calls=40, then_sleep=0)
    rc, _, _, why = agent_run(cmd, lambda: _lines(log), max_calls=8, cap_s=60, poll_s=0.05)
    assert rc == "capped" and why is not None and why.startswith("call cap") and "more than 8" in why
    seen = _lines(log)
    assert 8 < seen < 40
    time.sleep(0.5)
    assert _lines(log) == seen  # the whole process group is gone: no call after the kill


def test_a_task_past_its_time_cap_is_killed_and_fails_with_the_reason(tmp_path):
    cmd, log = _fake_agent(tmp_path, calls=1, then_sleep=60)
    t0 = time.monotonic()
    rc, _, _, why = agent_run(cmd, lambda: _lines(log), max_calls=8, cap_s=1, poll_s=0.05)
    assert rc == "capped" and why == "time cap: over 1 s"
    assert time.monotonic() - t0 < 30


def test_a_task_whose_agent_left_its_process_group_is_still_capped(tmp_path):
    # OpenClaw's agent runs on in a session of its own and holds the output pipes: the cap must
    # still end the task in time, and the agent with it
    pidfile = tmp_path / "agent.pid"
    script = ("import os, subprocess, sys\n"
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
              f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n")  # the parent exits at once
    t0 = time.monotonic()
    rc, _, _, why = agent_run([sys.executable, "-c", script], lambda: 0, max_calls=8, cap_s=1, poll_s=0.05)
    assert rc == "capped" and why == "time cap: over 1 s"
    assert time.monotonic() - t0 < 30
    agent = int(pidfile.read_text())
    for _ in range(100):  # killed, then reaped by init (a zombie meanwhile)
        if not Path(f"/proc/{agent}").exists() or "Z" in Path(f"/proc/{agent}/stat").read_text().split()[2]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the detached agent still runs")


def test_a_task_within_its_caps_runs_to_its_end(tmp_path):
    cmd, log = _fake_agent(tmp_path, calls=8, then_sleep=0)  # exactly the cap: allowed
    rc, out, _, why = agent_run(cmd, lambda: _lines(log), max_calls=8, cap_s=60, poll_s=0.05)
    assert (rc, why, json.loads(out)) == (0, None, {"payloads": []})


def test_success_rates_carry_a_wilson_interval():
    # by hand: p = 18/24 = 0.75, z = 1.96: centre (0.75 + 3.8416/48) / (1 + 3.8416/24) = 0.7155,
    # half-width 1.96·sqrt(0.1875/24 + 3.8416/2304) / 1.16007 = 0.1645
    assert wilson(18, 24) == [0.551, 0.88]
    assert wilson(0, 24)[0] == 0.0 and 0.1 < wilson(0, 24)[1] < 0.15  # not zero-width at none
    assert wilson(24, 24)[1] == 1.0 and wilson(0, 0) == [0.0, 1.0]
    details = [{"success": i < 3, "capped": "call cap" if i == 3 else None, "seconds": 1.0, "kind": "exec",
                "tools_ok": True, "check": None, "calls": [], "malformed": 0, "missing_required": 0,
                "calls_as_text": 0} for i in range(4)]
    s = summarize(details)
    assert s["success"] == 0.75 and s["success_95"] == wilson(3, 4) and s["capped"] == 1


def test_an_agent_that_answered_and_does_not_exit_is_ended_and_judged_on_its_answer(tmp_path):
    # OpenClaw printed its whole --json result, then stayed (its session store's worker): the task
    # ends `linger_s` after the result, not at the cap, and the result is kept
    script = "import sys, time\nprint('{\"payloads\": [{\"text\": \"42\"}]}', flush=True)\ntime.sleep(120)\n"
    t0 = time.monotonic()
    rc, out, _, why = agent_run([sys.executable, "-c", script], lambda: 1, max_calls=8, cap_s=60, poll_s=0.05,
                                linger_s=0.5)
    assert (rc, why) == ("lingered", None) and time.monotonic() - t0 < 30
    assert json.loads(out) == {"payloads": [{"text": "42"}]}
    # a result written in pieces is not a result until it is whole
    script = ("import sys, time\nprint('{\"payloads\": [', flush=True); time.sleep(1.5)\n"
              "print(']}', flush=True)\n")  # a whole first line (the pipe is read a line at a time), not yet JSON
    rc, out, _, why = agent_run([sys.executable, "-c", script], lambda: 1, max_calls=8, cap_s=60, poll_s=0.05,
                                linger_s=0.5)
    assert (rc, why, json.loads(out)) == (0, None, {"payloads": []})
