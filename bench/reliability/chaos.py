"""SIGKILL at random moments, many times: nothing answered is lost, nothing is corrupt (issue 8).

    python -m bench.reliability.chaos                   # 50 kills on the bundled model
    python -m bench.reliability.chaos --kills 10 --seed 3

One home directory, one daemon after another, each started on what the last one left. Two
scripted users hold short conversations whose follow-ups carry feedback (so the daemon has a
backlog to judge, train on and publish in the gaps between them). Each round picks a moment —
mid-stream, mid-judge, mid-training, mid-publish (conversion, gate, swap) or any time — and
kills the daemon with SIGKILL when status shows it there, after a random extra delay. With the
daemon down it checks:
  - every response a client received in full is in the database, status ok, same text;
  - `PRAGMA integrity_check` is ok and no turn is left 'running' after the next start;
  - `adapters/current`, when present, names a complete adapter whose GGUF parses, and the next
    daemon serves exactly that version;
  - the trainer child died with the daemon (no orphan keeps the CPU or the round's lock);
  - exactly once: a turn is judged at most once and used by at most one finished training run,
    and each finished run produced one adapter.
At the end a last daemon runs with no users until it has nothing left to do: nothing stays
half-done (no run 'running', no adapter 'trained' but never gated). Prints a table and writes
bench/out/chaos.json; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.common import free_port, start_server, stop, write_result
from clawd.client import IncompleteStream, sse_events

PHASES = ("stream", "judging", "training", "publishing", "any")
SYSTEM = "You are a helpful assistant. Answer briefly."
QUESTIONS = ["What is the capital of {x}?", "Give me a word that rhymes with {x}.", "Describe {x} in one sentence.",
             "Name an animal that lives in {x}."]
TOPICS = ["France", "Peru", "cat", "the sea", "Kenya", "moon", "Japan", "a forest"]
# each reaction with the thumb the user also gives the answer (POST /v1/feedback): the bundled
# model's judge is not trusted (`clawd status`), so explicit feedback is what trains
REACTIONS = [("Thanks, that's exactly right!", 1), ("No, that's wrong. Try again.", -1), ("Perfect.", 1),
             ("That ignores my question, redo it.", -1)]


class Users:
    """Two threads holding conversations until `stop`; each answer received in full is kept."""

    def __init__(self, url: str, seed: int, stream_p: float = 0.6, conversations: int = 1):
        # one conversation per user and daemon: the judge (seconds a turn on CPU) keeps up, so the
        # daemon gets through judging to training and publishing between kills
        self.url, self.rng, self.stream_p, self.conversations = url, random.Random(seed), stream_p, conversations
        self.received: list[dict] = []  # {"id", "text"} of every complete answer
        self.streaming = threading.Event()  # set while a stream is between its first and last chunk
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(2)]

    def __enter__(self) -> Users:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _run(self, i: int) -> None:
        rng = random.Random(self.rng.random())
        with httpx.Client(timeout=120) as c:
            for _ in range(self.conversations):
                if self.stop.is_set():
                    break
                try:
                    q = rng.choice(QUESTIONS).format(x=rng.choice(TOPICS))
                    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
                    got = self._ask(c, msgs, stream=rng.random() < self.stream_p)
                    if got is None:
                        continue
                    reaction, thumb = rng.choice(REACTIONS)
                    msgs += [{"role": "assistant", "content": got[1]}, {"role": "user", "content": reaction}]
                    self._ask(c, msgs, stream=rng.random() < self.stream_p)
                    c.post(self.url + "/v1/feedback", json={"id": got[0], "score": thumb, "comment": reaction})
                except (httpx.HTTPError, json.JSONDecodeError, KeyError):
                    pass  # the daemon died under us: the point of the exercise
                self.stop.wait(rng.uniform(0.5, 4.0))  # gaps: the daemon's idle time for judging and training

    def _ask(self, c: httpx.Client, msgs: list[dict], stream: bool) -> tuple[str, str] | None:
        """(completion id, text) of an answer received in full; None otherwise."""
        body = {"model": "clawd", "messages": msgs, "max_tokens": 32, "temperature": 0.7, "stream": stream}
        if not stream:
            r = c.post(self.url + "/v1/chat/completions", json=body)
            if r.status_code != 200:
                return None
            data = r.json()
            text = data["choices"][0]["message"]["content"] or ""
            self.received.append({"id": data["id"], "text": text})
            return data["id"], text
        parts, cid = [], None
        with c.stream("POST", self.url + "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                return None
            try:
                for chunk in sse_events(r.iter_lines()):
                    cid = chunk.get("id") or cid
                    for ch in chunk.get("choices") or []:
                        if (ch.get("delta") or {}).get("content"):
                            parts.append(ch["delta"]["content"])
                            self.streaming.set()
            except IncompleteStream:
                return None
            finally:
                self.streaming.clear()
        self.received.append({"id": cid, "text": "".join(parts)})
        return cid, "".join(parts)


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def check_home(home: Path, received: list[dict]) -> list[str]:
    """Every invariant the daemon must keep across a kill; returns the violations."""
    bad = []
    con = sqlite3.connect(home / "clawd.db", timeout=30)
    try:
        ok = con.execute("PRAGMA integrity_check").fetchone()[0]
        if ok != "ok":
            bad.append(f"integrity_check: {ok}")
        for r in received:
            row = con.execute("SELECT status, text FROM turns WHERE completion_id = ?", (r["id"],)).fetchone()
            if row is None:
                bad.append(f"answered turn {r['id']} missing")
            elif row[0] != "ok" or row[1] != r["text"]:
                bad.append(f"answered turn {r['id']} recorded as {row[0]!r} with different text" if row[1] != r["text"]
                           else f"answered turn {r['id']} recorded as {row[0]!r}")
        twice = con.execute("SELECT u.turn_id FROM train_uses u JOIN train_runs r ON r.id = u.run_id WHERE r.status = 'done'"
                            " GROUP BY u.turn_id HAVING COUNT(*) > 1").fetchall()
        if twice:
            bad.append(f"turns trained on by more than one finished run: {[t[0] for t in twice]}")
        dup = con.execute("SELECT adapter_version FROM train_runs WHERE status = 'done' GROUP BY adapter_version"
                          " HAVING COUNT(*) > 1 OR adapter_version IS NULL").fetchall()
        if dup:
            bad.append(f"finished runs sharing or lacking an adapter: {dup}")
        statuses = dict(con.execute("SELECT version, status FROM adapters").fetchall())
    finally:
        con.close()
    link = home / "adapters" / "current"
    if link.is_symlink() or link.exists():
        target = os.readlink(link)
        d = home / "adapters" / target
        if not target.isdigit() or not (d / "adapter.gguf").is_file():
            bad.append(f"adapters/current -> {target}: not a complete adapter")
        else:
            import gguf

            try:
                gguf.GGUFReader(str(d / "adapter.gguf"))
            except Exception as e:
                bad.append(f"adapters/current -> {target}: GGUF does not parse ({e})")
            if statuses.get(int(target)) not in ("published", None):
                bad.append(f"adapters/current -> {target}, whose status is {statuses.get(int(target))}")
    return bad


def wait_for(client: httpx.Client, url: str, phase: str, users: Users, timeout: float) -> str | None:
    """Block until the daemon is in `phase`; returns what it was doing then (None: timed out)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if phase == "stream":
            if users.streaming.wait(0.1):
                return "streaming"
            continue
        try:
            doing = client.get(url + "/v1/clawd/status", timeout=10).json()["doing"]
        except httpx.HTTPError:
            return None
        if phase == "any" or doing.startswith(phase):
            return doing
        time.sleep(0.1)
    return None


def run(kills: int, seed: int, model: Path | None, workdir: Path, phases=PHASES, log=print) -> dict:
    rng = random.Random(seed)
    home = workdir / "home"
    args = ["--idle-seconds", "1", "--tick-seconds", "0.25", "--train-batch", "2",
            "--max-train-tokens", "256", "--threads", "1"] + (["--model", str(model)] if model else [])
    env = os.environ | {"CLAWD_HOME": str(home)}
    results: dict = {"kills": [], "violations": [], "received": 0, "orphans": 0}
    client = httpx.Client(timeout=30)
    expect_version: int | None = None
    received: list[dict] = []
    try:
        for k in range(kills):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            proc = start_server([sys.executable, "-m", "clawd", "serve", "--port", str(port), *args], port,
                                workdir / f"daemon-{k}.log", env)
            st = client.get(url + "/v1/clawd/status").json()
            serving = (st.get("adapter") or {}).get("version")
            if serving != expect_version:
                results["violations"].append(f"round {k}: adapters/current is {expect_version}, daemon serves {serving}")
            phase = phases[k % len(phases)] if k < len(phases) else rng.choice(phases)
            with Users(url, seed * 1000 + k, stream_p=1.0 if phase == "stream" else 0.6) as users:
                doing = wait_for(client, url, phase, users, timeout=240)
                time.sleep(rng.uniform(0, 0.5 if phase == "stream" else 3.0))
                kids = children(proc.pid)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            time.sleep(1.0)
            orphans = [p for p in kids if alive(p)]
            for p in orphans:
                os.kill(p, signal.SIGKILL)
            results["orphans"] += len(orphans)
            received += users.received
            bad = [f"round {k}: {b}" for b in check_home(home, received)]  # every earlier answer too
            bad += [f"round {k}: trainer/child {p} outlived the daemon" for p in orphans]
            results["violations"] += bad
            link = home / "adapters" / "current"
            expect_version = int(os.readlink(link)) if link.is_symlink() else None
            results["kills"].append({"round": k, "phase": phase, "doing": doing or "timed out", "answers": len(users.received),
                                     "violations": len(bad)})
            log(f"  kill {k + 1}/{kills}: aimed at {phase}, daemon was {doing or 'not there in time'}; "
                f"{len(users.received)} answers checked, {len(bad)} violation(s)")
        results["received"] = len(received)
        results["final"] = settle(home, workdir, args, env, client, log)
        results["violations"] += results["final"].pop("violations")
    finally:
        client.close()
    return results


def unfinished(home: Path) -> tuple[list[int], list[int]]:
    """Training runs still 'running' and adapters trained but not gated."""
    con = sqlite3.connect(f"file:{home / 'clawd.db'}?mode=ro", uri=True, timeout=30)
    try:
        runs = [r for (r,) in con.execute("SELECT id FROM train_runs WHERE status = 'running'")]
        pending = [v for (v,) in con.execute("SELECT version FROM adapters WHERE status = 'trained'")]
    finally:
        con.close()
    return runs, pending


def settle(home: Path, workdir: Path, args: list[str], env: dict, client: httpx.Client, log, timeout: float = 600) -> dict:
    """A last daemon with no users: whatever the kills interrupted must finish or be retired."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server([sys.executable, "-m", "clawd", "serve", "--port", str(port), *args], port,
                        workdir / "daemon-final.log", env)
    try:
        # Stop at the first moment nothing is half-done: no round running or staged, no adapter
        # waiting for the gate, the daemon neither training nor publishing. New rounds may follow
        # (the kills left a backlog); they are not this check's business.
        deadline = time.time() + timeout
        while time.time() < deadline:
            doing = client.get(url + "/v1/clawd/status").json()["doing"]
            runs, pending = unfinished(home)
            if not runs and not pending and not (home / "adapters/.staging").exists() \
                    and not doing.startswith(("training", "publishing", "starting")):
                break
            time.sleep(0.5)
        st = client.get(url + "/v1/clawd/status").json()
    finally:
        stop(proc)
    bad = check_home(home, [])
    runs, pending = unfinished(home)
    con = sqlite3.connect(home / "clawd.db")
    try:
        running = con.execute("SELECT COUNT(*) FROM turns WHERE status = 'running'").fetchone()[0]
        counts = dict(con.execute("SELECT status, COUNT(*) FROM train_runs GROUP BY status").fetchall())
        adapters = dict(con.execute("SELECT status, COUNT(*) FROM adapters GROUP BY status").fetchall())
    finally:
        con.close()
    bad += [f"final: {running} turn(s) still 'running'"] * bool(running)
    bad += [f"final: training runs {runs} still 'running'"] * bool(runs)
    bad += [f"final: adapters {pending} trained but never gated"] * bool(pending)
    log(f"  settled: doing {st['doing']!r}, turns {st['turns']}, runs {counts}, adapters {adapters}")
    return {"turns": st["turns"], "train_runs": counts, "adapters": adapters, "serving": st["adapter"], "violations": bad}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", type=Path, default=None)
    a = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="clawd-chaos-"))
    print(f"{a.kills} kills, seed {a.seed}; daemon logs in {workdir}", flush=True)
    t0 = time.time()
    res = run(a.kills, a.seed, a.model, workdir, log=lambda s: print(s, flush=True))
    res["seconds"] = round(time.time() - t0)
    by_phase: dict[str, int] = {}
    for k in res["kills"]:
        key = f"{k['phase']} ({'hit' if k['doing'] != 'timed out' else 'missed'})"
        by_phase[key] = by_phase.get(key, 0) + 1
    print(f"\nkills {len(res['kills'])} in {res['seconds']} s: {by_phase}")
    print(f"answers checked {res['received']}, orphaned children {res['orphans']}, violations {len(res['violations'])}")
    for v in res["violations"][:20]:
        print("  " + v)
    write_result("chaos", res)
    sys.exit(1 if res["violations"] else 0)


if __name__ == "__main__":
    main()
