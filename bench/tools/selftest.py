"""The task set checked without a model or OpenClaw: for every task, the untouched workspace fails
its check, and the oracle's calls, applied here by hand the way OpenClaw's tools would apply them,
are valid calls of OpenClaw's real tools (the captured request's schemas), do the task's steps and
make the check pass. What this cannot see, a run against the oracle backend through the real
OpenClaw does (scripts/openclaw-tools.sh --configs oracle)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from bench.tools.score import judge_call, offered_tools, steps_done
from bench.tools.task_set import Outcome, Task


def apply(name: str, args: dict, ws: Path) -> str:
    """One tool call as OpenClaw's tool of that name does it, relative paths against the workspace."""
    if name == "exec":
        p = subprocess.run(args["command"], shell=True, cwd=ws, capture_output=True, text=True, timeout=30)
        return p.stdout + p.stderr
    path = ws / args.get("path", ".")
    if name == "read":
        return path.read_text()
    if name == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(args["content"])
        return f"wrote {len(args['content'])} bytes to {args['path']}"
    if name == "edit":
        text = path.read_text()
        for e in args["edits"]:
            if text.count(e["oldText"]) != 1:
                raise ValueError(f"oldText {e['oldText']!r} is not unique in {args['path']}")
            text = text.replace(e["oldText"], e["newText"])
        path.write_text(text)
        return f"edited {args['path']}"
    if name == "ls":
        return "\n".join(json.dumps(p.name + ("/" if p.is_dir() else "")) for p in sorted(path.iterdir()))
    raise ValueError(f"no stand-in for tool {name}")


def check_task(task: Task, offered: dict[str, list[str]]) -> list[str]:
    problems = []
    with tempfile.TemporaryDirectory() as d:
        ws = Path(d)
        task.setup(ws)
        if task.check(Outcome(ws)) is None:
            problems.append("passes with nothing done")
        calls = [judge_call({"name": n, "arguments": json.dumps(a)}, offered) for n, a in task.oracle]
        problems += [f"oracle call {c['name']} is not valid: {c}" for c in calls if not c["valid"]]
        if not steps_done(task, calls):
            problems.append(f"oracle calls {[n for n, _ in task.oracle]} do not do the steps")
        outputs = [apply(n, a, ws) for n, a in task.oracle]
        why = task.check(Outcome(ws, f"Done. {task.reply} {outputs[-1]}", outputs))
        if why:
            problems.append(f"fails after the oracle's calls: {why}")
    return problems


def selftest(tasks: list[Task], fixture: Path) -> int:
    offered = offered_tools(json.loads(fixture.read_text())["body"])
    bad = 0
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        print("task names repeat")
        bad += 1
    for t in tasks:
        problems = check_task(t, offered)
        bad += bool(problems)
        print(f"{t.name:18} {'ok' if not problems else 'BAD: ' + '; '.join(problems)}")
    kinds = sorted({t.kind for t in tasks})
    print(f"{len(tasks)} tasks ({', '.join(kinds)}), {bad} with problems")
    return 1 if bad else 0
