"""Learning from tool outcomes (issue 29): the daemon uses 16 of the tool tasks, learns from what it
would see in real use, and is measured on the other 8 and on the 48 chat probes, before and after.

    python3 -m bench.tools.learn --model "$(bash scripts/qwen-model.sh)" --threads 2 --seeds 0,1 [--passes 2]

Per seed, on a fresh daemon home with the loop on:
1. **before**: the 8 held-out tasks (greedy, side turns: never judged nor trained on) and the probes;
2. **use**: the 16 tasks, `--passes` times, as main turns at the daemon's sampling temperature. After
   each task the simulated user replies, and that reply is the final answer's next state, as every
   tool result is its call's;
3. the daemon judges and trains in its idle time as it would for a user; the bench waits for it;
4. **after**: the held-out tasks and the probes again, on the adapter it published.

Cost, measured on 2 cores (Qwen2.5-Coder-0.5B, 2026-12-04): one pass of the 16 tasks makes about 90
main turns (every tool call is one), about 75 of them judged; a round trains 8 of them in about 7
minutes, and the gate after it takes longer. So a pass is about 9 rounds, and a seed takes hours:
run it at the start of a sitting. A pass that outlasts --round-timeout is measured with what was
published by then, and the result says so (`loop_unfinished`).

The agent is this file, not OpenClaw: OpenClaw's 7.9k-token system prompt and its `openclaw` tool
make a task take minutes on 2 cores (scripts/openclaw-tools.sh measures that path). What the daemon
sees is what OpenClaw would send it: OpenClaw's own schemas of its five file and shell tools, the
task's message, the results the tools really returned in a workspace under /tmp (commands run in a
jail where only /tmp is writable), and the user's reply.

**Nothing reaches the daemon from the task's check.** The simulated user knows only what a user
sees: what they asked for (the task's tools), which tools ran, and what the tools answered
(`user_reply`). The check runs on the workspace after the task and is kept in this file's result.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.tools.score import missing_step, record, score, summarize
from bench.tools.task_set import TASKS, Outcome, Task
from bench.tools.tasks import CAP_S, FIXTURE, MAX_CALLS, fresh

ROOT = Path(__file__).resolve().parents[2]
# The split, fixed before any run: one or two of each kind held out, the rest used.
HELD_OUT = ("exec_grep", "exec_redirect", "read_third", "write_lines", "edit_todo", "ls_count",
            "chain_read_edit", "chain_exec_read")
USE = tuple(t.name for t in TASKS if t.name not in HELD_OUT)
BY_NAME = {t.name: t for t in TASKS}
TOOL_NAMES = ("exec", "read", "write", "edit", "ls")
TOOLS = [t for t in json.loads(FIXTURE.read_text())["body"]["tools"] if t["function"]["name"] in TOOL_NAMES]
SYSTEM = ("You are a personal assistant running on the user's computer. Use the tools to do what the user "
          "asks; file paths are relative to the current directory. When done, answer in one or two sentences.")
SIDE = {"X-Turn-Type": "side"}

# What the simulated user says. A complaint names what they asked for and did not see happen.
THANKS = "Thanks, that worked."
ASKED = {"exec": "That's not what I asked. Run it in the shell.",
         "read": "You didn't open the file. Read it, please.",
         "write": "Nothing was written. Create the file, please.",
         "edit": "The file wasn't changed. Edit it, please.",
         "ls": "You didn't look. List the directory, please."}
# Run as root, a mount namespace needs no user namespace (scripts/openclaw-lib.sh makes the same jail).
JAIL = 'mount --bind /tmp /tmp && mount -o remount,bind,ro / && cd "$0" && exec sh -c "$1"'


# -- the tools, run for real in the workspace ---------------------------------------------------
def run_tool(ws: Path, name: str, args: dict | None, jail: bool = True) -> str:
    """A tool call's result as OpenClaw's tools word theirs: the text the model reads next."""
    if args is None:
        return f"Error: the arguments of {name} are not a JSON object"
    if name == "exec":
        return run_command(ws, str(args.get("command", "")), jail)
    path = inside(ws, str(args.get("path") or "."))
    if path is None:
        return f"Error: {args.get('path')} is outside the workspace"
    rel = args.get("path") or "."
    if name == "read":
        return path.read_text(errors="replace") if path.is_file() else f"Error: ENOENT: no such file or directory, access '{rel}'"
    if name == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        text = str(args.get("content", ""))
        path.write_text(text)
        return f"Successfully wrote {len(text.encode())} bytes to {rel}"
    if name == "edit":
        if not path.is_file():
            return f"Error: ENOENT: no such file or directory, access '{rel}'"
        text = path.read_text()
        for e in args.get("edits") or []:
            old = str((e or {}).get("oldText", ""))
            if not old or text.count(old) != 1:
                return f"Error: oldText {'not found' if not old or not text.count(old) else 'not unique'} in {rel}"
            text = text.replace(old, str(e.get("newText", "")))
        path.write_text(text)
        return f"Successfully replaced text in {rel}."
    if name == "ls":
        if not path.is_dir():
            return f"Error: ENOENT: no such directory '{rel}'"
        return "\n".join(json.dumps(p.name) + ("/" if p.is_dir() else "") for p in sorted(path.iterdir()))
    return f"Error: tool {name} is not available"


def inside(ws: Path, rel: str) -> Path | None:
    p = (ws / rel).resolve()
    return p if p.is_relative_to(ws.resolve()) else None


def run_command(ws: Path, command: str, jail: bool) -> str:
    """The shell command in the workspace: in the jail (only /tmp writable) unless jail=False."""
    cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", JAIL, str(ws), command] if jail else \
        ["sh", "-c", command]
    try:
        r = subprocess.run(cmd, cwd=ws, capture_output=True, text=True, timeout=30,
                           env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(ws), "LANG": "C.UTF-8"})
    except subprocess.TimeoutExpired:
        return "Command timed out after 30 s"
    out = (r.stdout + r.stderr).strip()
    return out + (f"\n\n(Command exited with code {r.returncode})" if r.returncode else "") or "(no output)"


def jail_works(ws: Path) -> bool:
    return run_command(ws, "touch /usr/.clawd-jail-probe 2>/dev/null && echo writable || echo jailed", True) == "jailed"


# -- the simulated user -------------------------------------------------------------------------
def step_tool(step: frozenset[str]) -> str:
    return "ls" if "ls" in step else "edit" if "edit" in step else next(iter(step))


def user_reply(task: Task, calls: list[dict], outputs: list[str]) -> str:
    """What the user says after the answer, from what they asked and what they saw: a step they
    asked for that never ran, then a tool's error, else thanks."""
    step = missing_step(task, calls)
    if step is not None:
        return ASKED[step_tool(step)]
    failed = next((o for o in outputs if o.startswith("Error") or "(Command exited with code" in o), None)
    if failed:
        line = failed.splitlines()[0][:120].rstrip()
        return f"That failed: {line}{'' if line.endswith(('.', '!', '?')) else '.'} Please fix it."
    return THANKS


def replied(msgs: list[dict[str, Any]], answer: str, capped: str | None, reply: str) -> list[dict[str, Any]]:
    """The conversation that carries the user's reply, which becomes a next state once it is sent
    after what the user saw: the answer, even an empty one (this model often ends a task with
    nothing), or the last tool results when a cap ended the task before any answer. (Until
    2026-12-06 an empty answer got no reply, so on seed 0's 16 tasks the daemon never heard the user.)"""
    said = [] if capped else [{"role": "assistant", "content": answer}]
    return [*msgs, *said, {"role": "user", "content": reply}]


# -- one task -----------------------------------------------------------------------------------
def run_task(api: Any, task: Task, ws: Path, *, seed: int, heldout: bool, jail: bool = True,
             max_calls: int = MAX_CALLS, cap_s: float = CAP_S, max_tokens: int = 256) -> dict[str, Any]:
    """The task through the daemon (`api`: an openai client). Held out: greedy side turns, no reply.
    In use: the daemon's temperature, main turns, and the user's reply sent as the next message."""
    fresh(ws)
    task.setup(ws)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.message}]
    sampling = {"temperature": 0.0, "extra_headers": SIDE} if heldout else {}
    records: list[dict] = []  # one per model call, in score.py's shape, scored as the OpenClaw bench scores its own
    outputs: list[str] = []
    answer, capped, t0 = "", None, time.monotonic()
    while True:
        if len(records) >= max_calls or time.monotonic() - t0 > cap_s:
            capped = f"call cap: {len(records)} model calls" if len(records) >= max_calls else f"time cap: over {cap_s:.0f} s"
            break
        t = time.monotonic()
        m = api.chat.completions.create(model="clawd", messages=msgs, tools=TOOLS, max_tokens=max_tokens,
                                        seed=seed + len(records), **sampling).choices[0].message
        sent = [{"name": c.function.name, "arguments": c.function.arguments} for c in m.tool_calls or []]
        records.append(record({"tools": TOOLS, "messages": msgs}, m.content or "", sent, time.monotonic() - t, "ok"))
        if not m.tool_calls:
            answer = m.content or ""
            break
        msgs = [*msgs, {"role": "assistant", "content": m.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": f} for c, f in zip(m.tool_calls, sent)]}]
        for c, f in zip(m.tool_calls, sent):
            try:
                args = json.loads(f["arguments"] or "{}")
            except ValueError:
                args = None
            outputs.append(run_tool(ws, f["name"], args if isinstance(args, dict) else None, jail))
            msgs.append({"role": "tool", "tool_call_id": c.id, "content": outputs[-1]})
    s = score(task, records)
    reply = None
    if not heldout:
        reply = user_reply(task, s["calls"], outputs)
        api.chat.completions.create(model="clawd", max_tokens=16, seed=seed + len(records), tools=TOOLS,
                                    messages=replied(msgs, answer, capped, reply))
    why = capped or task.check(Outcome(ws, answer, outputs))  # after everything was sent; never sent
    return {"task": task.name, "kind": task.kind, "success": s["tools_ok"] and why is None, "check": why,
            "capped": capped, **s, "reply": reply, "answer": answer[:500], "seconds": round(time.monotonic() - t0, 1)}


# -- a seed -------------------------------------------------------------------------------------
def measure(d: Any, ws: Path, seed: int, jail: bool) -> dict[str, Any]:
    from bench.personalize.checkers import probe_right
    from bench.personalize.evaluate import greedy_answers

    details = [run_task(d.api, BY_NAME[n], ws, seed=seed, heldout=True, jail=jail) for n in HELD_OUT]
    probes = greedy_answers(d, [], 160)["probes"]
    right = {p["question"]: probe_right(p["question"], p["text"], tuple(p["accepted"])) for p in probes}
    return {"tasks": summarize(details), "details": details, "probes_right": right,
            "probe_accuracy": round(sum(right.values()) / len(right), 3), "adapter": (d.status()["adapter"] or {}).get("version")}


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    from bench.personalize.evaluate import Daemon, wait_for_round

    home = Path(tempfile.mkdtemp(prefix=f"clawd-bench-tool-learning-{seed}-"))
    ws = Path(tempfile.mkdtemp(prefix="clawd-tool-ws-"))
    d = Daemon(args.method, args, home)
    d.start()
    try:
        t0 = time.time()
        before = measure(d, ws, seed, args.jail)
        print(f"seed {seed} before: {before['tasks']['success']} of held-out tasks, probes {before['probe_accuracy']}", flush=True)
        used, unfinished = [], []  # unfinished: passes after which the loop had not finished within --round-timeout
        for p in range(args.passes):
            for name in USE:
                used.append(run_task(d.api, BY_NAME[name], ws, seed=seed * 1000 + p * 100, heldout=False, jail=args.jail))
                print(f"  use {p + 1}.{len(used)} {name}: {'PASS' if used[-1]['success'] else 'FAIL'}; "
                      f"reply {used[-1]['reply']!r}", flush=True)
            try:
                status, waited = wait_for_round(d, time.time(), args.round_timeout)
            except TimeoutError:  # the loop is slower than the wait: measure what it has published, and say so
                status, waited = d.status(), args.round_timeout
                unfinished.append({"pass": p + 1, "turns": status["turns"], "doing": status["doing"]})
            print(f"  pass {p + 1}: {'daemon idle' if len(unfinished) <= p else 'still ' + status['doing']} after "
                  f"{waited:.0f} s, adapter {(status['adapter'] or {}).get('version')}", flush=True)
        after = measure(d, ws, seed, args.jail)
        lost = sorted(q for q, ok in before["probes_right"].items() if ok and not after["probes_right"][q])
        print(f"seed {seed} after: {after['tasks']['success']} of held-out tasks, probes {after['probe_accuracy']}, "
              f"{len(lost)} lost", flush=True)
        return {"seed": seed, "settings": d.settings, "before": before, "after": after, "probes_lost": lost,
                "gain": round(after["tasks"]["success"] - before["tasks"]["success"], 3), "loop_unfinished": unfinished,
                "use": {"summary": summarize(used), "replies": {r: sum(u["reply"] == r for u in used) for r in
                                                                {u["reply"] for u in used}}, "details": used},
                "status": d.status(), "seconds": round(time.time() - t0)}
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(ws, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="GGUF to serve (default: the daemon's)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--passes", type=int, default=2, help="times the 16 tasks are used, each followed by a wait for the loop")
    p.add_argument("--method", default="grpo", choices=("grpo", "rl", "opd", "combined"),
                   help="the daemon's train_method (default: the daemon's own default)")
    p.add_argument("--daemon-args", default="", help="more `clawd serve` flags, quoted as one string")
    p.add_argument("--round-timeout", type=float, default=4 * 3600,
                   help="seconds a pass waits for the loop; past it the seed is measured with what was published")
    p.add_argument("--no-jail", dest="jail", action="store_false", help="run the model's commands without the jail")
    args = p.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="clawd-tool-ws-"))
    if args.jail and not jail_works(ws):
        raise SystemExit("cannot make the read-only jail here (unshare --mount needs root); --no-jail runs commands without it")
    shutil.rmtree(ws)
    out = ROOT / "bench" / "results"
    for seed in (int(s) for s in args.seeds.split(",")):
        r = run_seed(args, seed)
        name = Path(args.model).stem if args.model else "default"
        path = out / f"tool_learning-{name}-seed{seed}.json"
        path.write_text(json.dumps({"model": name, "split": {"use": USE, "heldout": HELD_OUT}, **r}, indent=1) + "\n")
        print(f"wrote {path.relative_to(ROOT)}: held-out success {r['before']['tasks']['success']} -> "
              f"{r['after']['tasks']['success']}, {len(r['probes_lost'])} probes lost")


if __name__ == "__main__":
    main()
