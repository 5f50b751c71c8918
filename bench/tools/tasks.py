"""Tool calls through a stock OpenClaw: the share of small tasks whose right tool ran with valid
arguments and whose outcome checks out, per backend configuration.

    python3 -m bench.tools.tasks selftest                   # no model, no OpenClaw: every task's setup and check
    python3 -m bench.tools.tasks run --label clawd --openclaw WRAPPER --workspace DIR (--db clawd.db | --wire LOG) \
        [--tasks 3 | --tasks exec_echo,read_port] [--cap-s 300] [--max-calls 8] --out RESULT.json
    python3 -m bench.tools.tasks summary RESULT.json... [--out bench/results/tool_tasks.json]
    python3 -m bench.tools.tasks list [--tasks ...]         # the task names

scripts/openclaw-tools.sh drives them all: it installs OpenClaw, starts each backend, writes the
isolated config and the WRAPPER (OpenClaw in a jail where only its home and /tmp are writable),
calls `run` once per configuration, then `summary`. The tasks are in tool_task_set.py.

`run` empties the workspace before each task and fills it with the task's files (beside a
placeholder, see fresh()). The workspace's path stays the same across tasks and sessions because
OpenClaw puts it in the system prompt: one path keeps that long prompt in the backend's prefix
cache. Each task is a new OpenClaw session (`--session-id tt-<label>-<task>`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.tools.score import records_from_store, records_from_wire, score, summarize, tool_outputs
from bench.tools.task_set import TASKS, Outcome, Task

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "bench" / "results" / "tool_tasks.json"
FIXTURE = ROOT / "tests" / "fixtures" / "openclaw" / "tool_call_request.json"
# Each task's caps (issue 29): past them it fails, with the reason. A task needs 1 to 3 calls; a
# warm follow-up takes 3-6 s on 2 cores, a new session's first prompt about a minute.
MAX_CALLS, CAP_S = 8, 300


def pick(spec: str | None) -> list[Task]:
    """All tasks, the first N, or the ones named (comma-separated)."""
    if not spec:
        return list(TASKS)
    if spec.isdigit():
        return TASKS[: int(spec)]
    by_name = {t.name: t for t in TASKS}
    unknown = [n for n in spec.split(",") if n not in by_name]
    if unknown:
        sys.exit(f"unknown tasks {unknown}; known: {', '.join(by_name)}")
    return [by_name[n] for n in spec.split(",")]


def fresh(workspace: Path) -> None:
    """Empty the workspace but for one placeholder file. Refuses any directory outside the
    temporary directory: it deletes. OpenClaw refuses to run in an empty workspace it has seen
    with files in it before ("workspace appears to have disappeared"): hence the placeholder."""
    ws, tmp = workspace.resolve(), Path(tempfile.gettempdir()).resolve()
    if not ws.is_relative_to(tmp) or ws == tmp:
        sys.exit(f"refusing to empty {ws}: the workspace must be a directory under {tmp}")
    ws.mkdir(parents=True, exist_ok=True)
    for p in ws.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    (ws / ".keep").write_text("")


def answer_of(stdout: str) -> tuple[str, dict]:
    """OpenClaw's --json result: the answer's text and its meta (stop reason, provider, duration)."""
    try:
        out = json.loads(stdout)
    except ValueError:
        return "", {"error": "no JSON from openclaw", "stdout_tail": stdout[-1000:]}
    meta = out.get("meta") or {}
    trace = meta.get("executionTrace") or {}
    text = "\n".join(p.get("text") or "" for p in out.get("payloads") or [])
    return text, {"stop": meta.get("stopReason"), "provider": trace.get("winnerProvider"),
                  "agent_s": (meta.get("durationMs") or 0) / 1000}


def agent_run(cmd: list[str], calls_so_far: Callable[[], int], max_calls: int, cap_s: float,
              poll_s: float = 1.0, linger_s: float = 10.0) -> tuple[int | str, str, str, str | None]:
    """Run one task's OpenClaw command under the task's caps: (rc, stdout, stderr, why capped). Its
    whole process group is killed once the backend has answered more than `max_calls` model calls
    for it (`calls_so_far`, read from the backend's record every `poll_s`), or after `cap_s`
    seconds; rc is then "capped". OpenClaw sometimes prints its whole --json result and then does
    not exit (its session store's maintenance worker holds on: nogrammar's exec_python and ls_csv,
    2026-12-06, both ended their run in 7-14 s and were killed at the cap): once stdout holds a
    complete JSON result and `linger_s` more seconds pass, the command is killed and rc is
    "lingered", judged on that result like any other."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    out: list[str] = []
    err: list[str] = []
    readers = [threading.Thread(target=_drain, args=(f, buf), daemon=True) for f, buf in ((p.stdout, out), (p.stderr, err))]
    for r in readers:
        r.start()
    t0 = time.monotonic()
    answered = None  # when stdout first held a complete result
    while True:
        for r in readers:
            r.join(timeout=poll_s / 2)
        if not any(r.is_alive() for r in readers):  # both pipes at their end
            try:
                rc = p.wait(timeout=poll_s)
                late = time.monotonic() - t0 > cap_s  # OpenClaw's own --timeout ended it
                return rc, "".join(out), "".join(err), (f"time cap: over {cap_s:.0f} s" if late else None)
            except subprocess.TimeoutExpired:  # pipes closed, the process not yet gone
                pass
        if answered is None and _complete_json("".join(out)):
            answered = time.monotonic()
        n = calls_so_far()
        why = (f"call cap: {n} model calls, more than {max_calls}" if n > max_calls else
               f"time cap: over {cap_s:.0f} s" if time.monotonic() - t0 > cap_s else None)
        lingered = answered is not None and time.monotonic() - answered > linger_s
        if why or lingered:
            # OpenClaw's agent runs on in a session of its own, the command's process group gone,
            # and keeps the output pipes open: reading to their end then waits for ever
            # (nogrammar's exec_python, 2026-12-06: 688 s, ended by hand)
            for kill, pid in [(os.killpg, p.pid)] + [(os.kill, h) for h in pipe_holders(p.stdout, p.stderr)]:
                try:
                    kill(pid, signal.SIGKILL)
                except ProcessLookupError:  # gone meanwhile
                    pass
            for r in readers:
                r.join(timeout=30)
            p.wait(timeout=30)
            return ("capped" if why else "lingered"), "".join(out), "".join(err), why


def _drain(pipe, buf: list[str]) -> None:
    """Read a pipe to its end into `buf`, a line at a time (a thread per pipe: neither blocks the other)."""
    for line in iter(pipe.readline, ""):
        buf.append(line)


def _complete_json(text: str) -> bool:
    if not text.strip():
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def pipe_holders(*pipes) -> list[int]:
    """Other processes that hold any of these pipes open (Linux /proc), ourselves excepted."""
    names = {f"pipe:[{os.fstat(f.fileno()).st_ino}]" for f in pipes if f is not None and not f.closed}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in names for fd in os.listdir(f"/proc/{pid}/fd")):
                found.append(int(pid))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def run_task(task: Task, a: argparse.Namespace, mark: int) -> tuple[dict, int]:
    fresh(a.workspace)
    task.setup(a.workspace)
    cmd = [str(a.openclaw), "agent", "--local", "--agent", "main", "--session-id", f"tt-{a.label}-{task.name}",
           "--message", task.message, "--json", "--timeout", str(a.cap_s)]

    def read(after: int) -> tuple[list[dict], int]:
        return records_from_store(a.db, after) if a.db else records_from_wire(a.wire, after)

    t0 = time.perf_counter()
    rc, stdout, stderr, capped = agent_run(cmd, lambda: len(read(mark)[0]), a.max_calls, a.cap_s)
    seconds = time.perf_counter() - t0
    records, mark = read(mark)
    answer, meta = answer_of(stdout)
    outcome = Outcome(a.workspace, answer, tool_outputs(records))
    why = capped or task.check(outcome)
    s = score(task, records)
    detail = {"task": task.name, "kind": task.kind, "message": task.message, "success": s["tools_ok"] and why is None,
              "check": why, "capped": capped, **s, "seconds": round(seconds, 1), "openclaw_rc": rc, **meta,
              "answer": answer[:1000], "tool_outputs": [o[:500] for o in outcome.tool_outputs],
              "files_after": sorted(str(p.relative_to(a.workspace)) for p in a.workspace.rglob("*") if p.is_file())[:50]}
    if rc != 0:
        detail["stderr_tail"] = stderr[-1500:]
    return detail, mark


def cmd_run(a: argparse.Namespace) -> None:
    if bool(a.db) == bool(a.wire):
        sys.exit("give one of --db (clawd's database) or --wire (tool_wire.py's log)")
    tasks = pick(a.tasks)
    mark = records_from_store(a.db, 0)[1] if a.db else records_from_wire(a.wire, 0)[1]
    details = []
    for i, task in enumerate(tasks, 1):
        d, mark = run_task(task, a, mark)
        details.append(d)
        calls = " ".join(c["name"] + ("" if c["valid"] else "(bad)") + ("" if c["agent"] in ("main", None) else
                                                                          f"@{c['agent']}") for c in d["calls"])
        print(f"[{a.label}] {i}/{len(tasks)} {task.name}: {'PASS' if d['success'] else 'FAIL'} {d['seconds']:.0f} s; "
              f"{calls or 'no calls'}; check: {d['check'] or 'ok'}", flush=True)
        a.out.write_text(json.dumps({"label": a.label, "details": details}, indent=1))
    print(f"[{a.label}] {json.dumps(summarize(details))}")


def cmd_summary(a: argparse.Namespace) -> None:
    details: dict[str, list[dict]] = {}
    for path in a.results:  # results of one label from several runs add up (a run resumed with other --tasks)
        r = json.loads(path.read_text())
        details.setdefault(r["label"], []).extend(r["details"])
    configs = {label: summarize(d) for label, d in details.items()}
    meta = json.loads(a.meta) if a.meta else {}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"meta": meta, "configs": configs, "details": details}, indent=1))
    for label, s in configs.items():
        print(f"{label:>10}: success {s.get('success')} {s.get('success_95')} (tools {s.get('tools_ok')}, checks {s.get('check_ok')}) over "
              f"{s['tasks']} tasks, {s.get('capped')} capped; malformed {s.get('malformed')}, calls as text {s.get('calls_as_text')}, "
              f"{s.get('seconds_per_task')} s/task")
    print(f"wrote {a.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the tasks through OpenClaw against one backend")
    r.add_argument("--label", required=True)
    r.add_argument("--openclaw", type=Path, required=True, help="the wrapper that runs the isolated OpenClaw")
    r.add_argument("--workspace", type=Path, required=True, help="OpenClaw's workspace (under the temporary directory)")
    r.add_argument("--db", type=Path, help="clawd's database (its CLAWD_HOME/clawd.db)")
    r.add_argument("--wire", type=Path, help="the log of bench/tools/wire.py in front of the backend")
    r.add_argument("--tasks", help="N (the first N) or names, comma-separated; default all")
    r.add_argument("--cap-s", type=int, default=CAP_S, help="seconds a task may take before it fails (time cap)")
    r.add_argument("--max-calls", type=int, default=MAX_CALLS, help="model calls a task may make before it fails")
    r.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("summary", help="merge run results into one JSON")
    s.add_argument("results", type=Path, nargs="+")
    s.add_argument("--meta", help="JSON object recorded as is (versions, model, machine)")
    s.add_argument("--out", type=Path, default=RESULTS)
    sub.add_parser("selftest", help="check every task's setup, check and oracle without a model")
    ls = sub.add_parser("list", help="the names --tasks picks (exits 1 on an unknown name)")
    ls.add_argument("--tasks")
    a = ap.parse_args()
    if a.cmd == "list":
        print(" ".join(t.name for t in pick(a.tasks)))
        return
    if a.cmd == "selftest":
        from bench.tools.selftest import selftest
        sys.exit(selftest(TASKS, FIXTURE))
    {"run": cmd_run, "summary": cmd_summary}[a.cmd](a)


if __name__ == "__main__":
    main()
