"""Scoring one task's model calls: which tools ran, whether each call was well formed, whether the
task's tools ran in order; and the summary of a configuration.

A record is one chat completion as the backend answered it, from clawd's `turns` or from the wire
log of bench/tools/wire.py, in one shape: the tools offered (name -> required parameters), the
request's messages, the answer's text and its tool calls (name, arguments as sent: JSON text).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

from bench.tools.task_set import Task
from bench.tools.wire import text_of

# A call the model wrote but the backend passed on as text: Qwen's tag; a JSON call opening a line
# (seen after a chat-template token the model wrote out as text, `<|im_start|>\n{"name": ...`);
# llama-cpp-python's chatml-function-calling marker, which its "message" branch emits as the
# answer's content (that branch's grammar allows only `functions.NAME:` or the end).
_CALL_AS_TEXT = re.compile(r'<tool_call>|^\s*(```(json)?\s*)?\{\s*"name"\s*:|^functions\.[\w.-]+:', re.M)


def offered_tools(request: dict) -> dict[str, list[str]]:
    out = {}
    for t in request.get("tools") or []:
        fn = t.get("function") or {}
        out[fn.get("name", "")] = list((fn.get("parameters") or {}).get("required") or [])
    return out


# OpenClaw's first user message names the agent: "main" for the task's own session, another for a
# session a tool started (the `openclaw` tool delegates to an agent of that name).
_AGENT = re.compile(r"Runtime: agent=(\S+)")


def record(request: dict, content: str, tool_calls: list[dict], seconds: float | None, status: str) -> dict:
    msgs = request.get("messages") or []
    found = next((m for m in (_AGENT.search(text_of(x.get("content"))) for x in msgs if x.get("role") == "user") if m), None)
    return {"offered": offered_tools(request), "messages": msgs, "content": content or "", "tool_calls": tool_calls,
            "seconds": seconds, "status": status, "agent": found.group(1) if found else None}


def records_from_store(db: Path, after: int) -> tuple[list[dict], int]:
    """clawd's turns after id `after`, and the last id (where the next task starts reading)."""
    from clawd.store.store import Store  # only here: the wire configurations need no clawd import

    store = Store(db)
    try:
        turns = [t for t in store.turns() if (t.id or 0) > after]
    finally:
        store.close()
    recs = [record(t.request, t.text or "", [{"name": c.name, "arguments": c.arguments} for c in t.tool_calls],
                   t.timings.get("total_s"), t.status) for t in turns]
    return recs, max([after] + [t.id or 0 for t in turns])


def records_from_wire(log: Path, after: int) -> tuple[list[dict], int]:
    """The wire log's lines after line `after`, and the line count."""
    lines = log.read_text().splitlines() if log.exists() else []
    recs = []
    for line in lines[after:]:
        e = json.loads(line)
        a = e["answer"]
        recs.append(record(e["request"], a.get("content", ""), a.get("tool_calls", []), e.get("seconds"),
                           "ok" if e.get("status") == 200 else f"http {e.get('status')}"))
    return recs, len(lines)


def judge_call(call: dict, offered: dict[str, list[str]]) -> dict:
    """offered: the name was among the request's tools; json: the arguments are a JSON object;
    valid: both, and every required parameter is there."""
    name, args = call.get("name") or "", call.get("arguments")
    parsed = None
    if isinstance(args, dict):
        parsed = args
    elif isinstance(args, str):
        try:
            parsed = json.loads(args) if args.strip() else {}
        except ValueError:
            parsed = None
    is_json = isinstance(parsed, dict)
    missing = [p for p in offered.get(name, []) if not (is_json and p in parsed)]  # type: ignore[operator]
    return {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args),
            "offered": name in offered, "json": is_json, "valid": name in offered and is_json and not missing,
            "missing": missing}


def missing_step(task: Task, calls: list[dict]) -> frozenset[str] | None:
    """The first of the task's steps that did not run, reading the valid calls in order (other calls
    may come between); None when every step ran."""
    names = iter(c["name"] for c in calls if c["valid"])
    return next((step for step in task.steps if not any(n in step for n in names)), None)


def steps_done(task: Task, calls: list[dict]) -> bool:
    """The task's steps ran in order, each as a valid call (other calls may come between)."""
    return missing_step(task, calls) is None


def tool_outputs(records: list[dict]) -> list[str]:
    """Every tool result OpenClaw sent back, once each, in order (later requests repeat history)."""
    out, seen = [], set()
    for r in records:
        for m in r["messages"]:
            if m.get("role") == "tool":
                key = (m.get("tool_call_id"), text_of(m.get("content")))
                if key not in seen:
                    seen.add(key)
                    out.append(key[1])
    return out


def score(task: Task, records: list[dict]) -> dict:
    calls = [judge_call(c, r["offered"]) | {"agent": r.get("agent")} for r in records for c in r["tool_calls"]]
    return {"calls": calls, "malformed": sum(not (c["offered"] and c["json"]) for c in calls),
            "missing_required": sum(bool(c["missing"]) for c in calls if c["offered"] and c["json"]),
            "calls_as_text": sum(bool(_CALL_AS_TEXT.search(r["content"])) for r in records),
            "tools_ok": steps_done(task, calls), "model_calls": len(records),
            "model_seconds": round(sum(r["seconds"] or 0 for r in records), 2),
            "errors": [r["status"] for r in records if r["status"] != "ok"]}


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """The 95% Wilson score interval of a success rate k/n: unlike p ± z·se it stays inside [0, 1]
    and is not zero-width at 0 or n successes, which 24 tasks often give."""
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, center - half), 3), round(min(1.0, center + half), 3)]


def summarize(details: list[dict]) -> dict:
    n = len(details)
    if not n:
        return {"tasks": 0}
    secs = [d["seconds"] for d in details]
    by_kind: dict[str, list[bool]] = {}
    for d in details:
        by_kind.setdefault(d["kind"], []).append(d["success"])
    return {"tasks": n,
            "success": round(sum(d["success"] for d in details) / n, 3),
            "success_95": wilson(sum(d["success"] for d in details), n),
            "capped": sum(bool(d.get("capped")) for d in details),
            "tools_ok": round(sum(d["tools_ok"] for d in details) / n, 3),
            "check_ok": round(sum(d["check"] is None for d in details) / n, 3),
            "calls": sum(len(d["calls"]) for d in details),
            "malformed": sum(d["malformed"] for d in details),
            "missing_required": sum(d["missing_required"] for d in details),
            "calls_as_text": sum(d["calls_as_text"] for d in details),
            "tools_called": sorted({c["name"] for d in details for c in d["calls"]}),
            "calls_outside_main": sum(c.get("agent") not in ("main", None) for d in details for c in d["calls"]),
            "seconds_per_task": round(statistics.mean(secs), 1),
            "seconds_median": round(statistics.median(secs), 1),
            "by_kind": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by_kind.items())}}
