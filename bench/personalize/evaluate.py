"""How bench/personalize/run.py runs a daemon and scores it: the bench's `clawd serve`, the greedy
answers to held-out prompts and probes, their grades and continuous measures, and the cache of the
base weights' answers (greedy on one model file is the same every time: scored once, reused).

Scoring requests are side turns (X-Turn-Type: side): never judged, never trained on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.common import Daemon as ClawdServe
from bench.personalize.checkers import non_answer, probe_right
from bench.personalize.measures import measures
from bench.personalize.probes import PROBES
from bench.personalize.scenarios import SYSTEM, Scenario, grade_heldout

# When the scheduler looks, not how it learns: start as soon as the simulated user pauses instead of
# after 30 s of quiet, or a run would spend most of its time waiting.
LOOP_FLAGS = ["--idle-seconds", "1", "--tick-seconds", "0.5"]
SIDE = {"X-Turn-Type": "side"}
SAMPLING_TEMPERATURE = 0.7  # what the simulated user's conversations (and the oracle's samples) are sampled at
TOP_LOGPROBS = 20  # alternatives read at each probe answer token, for its margin (OpenAI's maximum)


class Daemon(ClawdServe):
    """`clawd serve` on a fresh home with one training method and the bench's loop flags, in a
    session of its own, without the user's CLAWD_* variables (the daemon also reads them and
    $CLAWD_HOME/config.json: keep the user's out); its log is home/daemon.out."""

    def __init__(self, method: str, args: argparse.Namespace, home: Path):
        flags = ["--home", str(home), "--train-method", method, *LOOP_FLAGS,
                 *(["--model", args.model] if args.model else []),
                 *(["--threads", str(args.threads)] if args.threads else []), *shlex.split(args.daemon_args)]
        super().__init__(home, *flags, log=home / "daemon.out", keep_clawd_env=False, new_session=True)
        self.settings = learning_settings(flags)
        self.api = self.client(timeout=900)

    def status(self) -> dict[str, Any]:
        return httpx.get(self.url + "/v1/clawd/status", timeout=60).json()

    def chat(self, messages: list[dict], max_tokens: int, temperature: float, seed: int,
             headers: dict[str, str] | None = None) -> tuple[str, str]:
        r = self.api.chat.completions.create(model="clawd", messages=messages, max_tokens=max_tokens,
                                             temperature=temperature, seed=seed, extra_headers=headers)
        return r.id, r.choices[0].message.content or ""

    def greedy_logprobs(self, messages: list[dict], max_tokens: int) -> tuple[str, list[dict[str, Any]]]:
        """A greedy side answer with each token's logprob and its TOP_LOGPROBS likeliest alternatives."""
        r = self.api.chat.completions.create(model="clawd", messages=messages, max_tokens=max_tokens, temperature=0.0,
                                             seed=0, logprobs=True, top_logprobs=TOP_LOGPROBS, extra_headers=SIDE)
        entries = [{"token": e.token, "logprob": e.logprob,
                    "top": [[t.token, t.logprob] for t in e.top_logprobs]} for e in r.choices[0].logprobs.content]
        return r.choices[0].message.content or "", entries

    def model_key(self) -> str:
        """The served model file, as a cache key: name, size and mtime (a re-assembled file is new)."""
        path = Path(self.status()["model"]["path"])
        st = path.stat()
        return f"{path.name}-{st.st_size}-{int(st.st_mtime)}"


def is_learning(name: str) -> bool:
    """A setting that decides how a run learns (judge, trainer, gate), recorded with its results."""
    return name.startswith(("judge_", "train_", "lora_", "w_", "gate_", "grpo_", "opd_")) or name in ("lr", "max_train_tokens")


def learning_settings(serve_argv: list[str]) -> dict[str, Any]:
    """The daemon's learning settings for these `clawd serve` flags (with --home), parsed as the daemon
    parses them, without the CLAWD_* variables the daemon is started without."""
    from clawd.cli import build_parser
    from clawd.config import Settings

    given = {k: v for k, v in vars(build_parser().parse_args(["serve", *serve_argv])).items() if k in Settings.model_fields}
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("CLAWD_")}
    try:
        settings = Settings(**given).public()
    finally:
        os.environ.update(saved)
    return {k: v for k, v in settings.items() if is_learning(k)}


QUIET_S = 15.0  # with LOOP_FLAGS a daemon that has work starts it within 1.5 s; 10x that is "nothing to do"
STILL_S = 4.0  # ... and idle that long, seen twice, is idle for good (a publish leaves it idle for one tick)


def pause_learning(d: Daemon, timeout: float = 1800) -> None:
    """The user's switch (POST /v1/clawd/learning/pause), then until nothing trains, publishes or
    samples any more: what a user's idle time had not finished is left unfinished, and no adapter
    goes live while the held-out prompts are scored."""
    httpx.post(d.url + "/v1/clawd/learning/pause", timeout=60).raise_for_status()
    wait_for_round(d, since=time.time(), timeout=timeout)


def wait_for_round(d: Daemon, since: float, timeout: float, give_up: bool = False) -> tuple[dict[str, Any], float]:
    """Until the daemon has gone idle after `since`: judged everything, trained and published if
    enough turns were ready, sampled its GRPO groups. A daemon idle since before `since` that has
    started nothing for QUIET_S had nothing to do: that returns too (else a wait after the last
    round, with fewer than a round's turns ready, would last the whole timeout). At the timeout,
    raises, or with `give_up` returns the last status, marked `"gave_up": True`."""
    deadline = since + timeout
    st: dict[str, Any] = {}
    seen = None  # when the daemon went idle, as first seen; idle must last: a publish is idle for a tick
    while time.time() < deadline:
        st = d.status()
        idle_from = time.time() - st["doing_since_s"]
        if st["doing"].startswith("idle") and (idle_from > since or time.time() - since > QUIET_S):
            if seen is not None and abs(seen - idle_from) < 1 and time.time() - idle_from >= STILL_S:
                return st, time.time() - since
            seen = idle_from
        else:
            seen = None
        time.sleep(2)
    if give_up:
        return {**st, "gave_up": True}, time.time() - since
    raise TimeoutError(f"the daemon did not finish a round within {timeout:.0f}s; last status: {json.dumps(st)[:1500]}")


def since(event: dict | None, t: float) -> dict | None:
    """A status event if it happened after `t` (status keeps the last one, however old)."""
    return event if event is not None and event.get("at", 0) > t else None


# -- the told column ------------------------------------------------------------------------------
def told(sc: Scenario, question: str) -> str:
    """The question as the OPD teacher sees it: the user's message with the hint the judge builds
    from the scenario's first complaint appended (clawd.store.hints, clawd.train.samples)."""
    from clawd.store.hints import evidence_hint
    from clawd.store.records import NextState, Turn
    from clawd.train.samples import HINT_MARK

    turn = Turn(session_id=0, index=0, kind="main", completion_id="told", request={"messages": []}, prompt_ids=[])
    said = [{"role": "user", "content": sc.complaints[0]}]
    hint = evidence_hint(turn, NextState(turn_id=0, role="user", content=sc.complaints[0], messages=said), -1)
    assert hint is not None
    return question + HINT_MARK + hint


# -- scoring ----------------------------------------------------------------------------------------
def greedy_answers(d: Daemon, pools: list[tuple[str, list[str]]], max_tokens: int, told_sc: Scenario | None = None
            ) -> dict[str, Any]:
    """The live weights' greedy answers to each pool's held-out prompts and to the probes, ungraded.
    With `told_sc`, every question (probes too) carries that scenario's told hint."""
    t0 = time.time()

    def messages(question: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": told(told_sc, question) if told_sc else question}]

    held = [{"pool": pool, "prompt": q, "text": d.chat(messages(q), max_tokens, temperature=0.0, seed=0, headers=SIDE)[1]}
            for pool, qs in pools for q in qs]
    probes = []
    for q, acc in PROBES:
        text, entries = d.greedy_logprobs(messages(q), 48)
        probes.append({"question": q, "accepted": list(acc), "text": text, "margin": margin(entries, acc)})
    return {"seconds": round(time.time() - t0, 1), "heldout": held, "probes": probes}


def served_answers(d: Daemon, pools: list[tuple[str, list[str]]], max_tokens: int) -> dict[str, Any]:
    """The live weights' answers to each pool's held-out prompts as a client that sets no temperature
    gets them (OpenClaw sends none: the daemon samples at its default), each prompt with a seed of
    its own, the same for every weights scored; no probes. Greedy answers are the bench's measure,
    reproducible and worst for loops; these are what such a user reads."""
    t0 = time.time()
    held = []
    for i, (pool, q) in enumerate((pool, q) for pool, qs in pools for q in qs):
        r = d.api.chat.completions.create(model="clawd", messages=[{"role": "system", "content": SYSTEM},
                                                                   {"role": "user", "content": q}],
                                          max_tokens=max_tokens, seed=i, extra_headers=SIDE)
        held.append({"pool": pool, "prompt": q, "text": r.choices[0].message.content or ""})
    return {"seconds": round(time.time() - t0, 1), "heldout": held, "probes": []}


def cached_answers(d: Daemon, pools: list[tuple[str, list[str]]], max_tokens: int, cache: Path,
                   told_sc: Scenario | None = None, served: bool = False) -> dict[str, Any]:
    """`greedy_answers` of the base weights (no adapter live), or with `served` their
    `served_answers`, kept under `cache` by model file, prompts, answer length and told hint: the
    same answers every run would recompute."""
    key = json.dumps([d.model_key(), pools, max_tokens, SYSTEM, told_sc and told(told_sc, ""), PROBES]
                     + (["served"] if served else []))
    path = cache / f"base-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if path.is_file():
        return json.loads(path.read_text()) | {"cached": str(path.name)}
    ev = served_answers(d, pools, max_tokens) if served else greedy_answers(d, pools, max_tokens, told_sc)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ev, ensure_ascii=False))
    return ev


def margin(entries: list[dict[str, Any]], accepted: Sequence[str]) -> float | None:
    """How far a greedy probe answer is from flipping, in nats, at the token that decides it.

    Right answer (an accepted one appears, as probe_right finds it): the token where it starts,
    its logprob minus the likeliest alternative there that does not begin an accepted answer
    (≥ 0: greedy took the likeliest). Wrong answer: the closest any alternative beginning an
    accepted answer came to being chosen, its logprob minus the chosen token's, over every
    position (≤ 0); None when none was among the TOP_LOGPROBS alternatives anywhere (far).
    An alternative "begins" an accepted answer when its stripped, lower-case text is a prefix of
    one, and the whole of it when the answer is one character (a lone "1" does not begin "10")."""
    acc = [a.lower() for a in accepted]

    def begins(token: str) -> bool:
        t = token.strip().lower()
        return bool(t) and any(a.startswith(t) and (len(t) > 1 or a == t) for a in acc)

    text = "".join(e["token"] for e in entries).lower()
    hits = [m.start() for a in acc for m in re.finditer(rf"(?<![\w]){re.escape(a)}(?![\w])", text)]
    if hits:
        first, at = min(hits), 0
        for e in entries:
            if at + len(e["token"]) > first:
                others = [lp for tok, lp in e["top"] if tok != e["token"] and not begins(tok)]
                return e["logprob"] - max(others) if others else None
            at += len(e["token"])
    near = [lp - e["logprob"] for e in entries for tok, lp in e["top"] if tok != e["token"] and begins(tok)]
    return max(near) if near else None


def grade(sc: Scenario, ev: dict[str, Any]) -> dict[str, Any]:
    """One scenario's grades of recorded answers (its pool's held-out answers; the probes), and their
    sums: adherence, and beside it the share of held-out replies that were no answer at all or ran
    in circles (degenerate; loops count since stop 54, `measures`) and of those that answered
    without the known content (wrong); the mean continuous measures; probe accuracy and degenerate
    share. Also how --rescore re-grades an old run."""
    held = [dict(h) | grade_heldout(sc, h["prompt"], h["text"]) | {"measures": measures(h["text"])}
            for h in ev["heldout"] if h.get("pool", sc.pool) == sc.pool and h["prompt"] in sc.heldout]
    probes = []
    for p in ev["probes"]:
        p = dict(p)
        # Runs recorded before the probes kept their accepted answers were graded by an older list,
        # whose "144 divided by 12?" contains its own answer: their verdict stands, and a right
        # answer is an answer.
        if "accepted" in p:
            p["ok"] = probe_right(p["question"], p["text"], tuple(p["accepted"]))
        p["non_answer"] = None if p["ok"] else non_answer(p["question"], p["text"])
        probes.append(p)
    keys = held[0]["measures"] if held else {}
    return {**{k: v for k, v in ev.items() if k not in ("heldout", "probes")}, "heldout": held, "probes": probes,
            "adherence": _share(held, lambda h: h["ok"]), "form": _share(held, lambda h: h["form"]),
            "degenerate": _share(held, lambda h: h["non_answer"] is not None or h["measures"]["loops"] > 0),
            "non_answers": {why: sum(h["non_answer"] == why for h in held) for why in ("echo", "empty", "off-topic")},
            "wrong": _share(held, lambda h: h["non_answer"] is None and not h["known"]),
            "measures": {k: sum(h["measures"][k] for h in held) / len(held) for k in keys},
            "probe_accuracy": _share(probes, lambda p: p["ok"]),
            "probe_degenerate": _share(probes, lambda p: p["non_answer"] is not None)}


def _share(items: list[dict], pred) -> float:
    return sum(map(pred, items)) / len(items) if items else 0.0


# The daemon's own log lines for the idle work a round costs (clawd/judge/rollouts.py,
# clawd/train/loop.py, clawd/publish/gate.py): GRPO's sampling and scoring, training, the gate.
_IDLE = {"rollouts_s": re.compile(r"GRPO rollouts: (\d+) group\(s\) in (\d+)s"),
         "train_s": re.compile(r"run \d+: adapter \d+ from \d+ turns, loss \S+ → \S+, (\d+)s"),
         "gate_s": re.compile(r"gate (?:passed|REJECTED) in ([\d.]+)s")}


def idle_cost(log: str) -> dict[str, float]:
    """Seconds of idle work a run's daemon spent, from its log: sampling and scoring groups,
    training rounds, gating adapters; and the groups made."""
    out = {"groups": 0.0, "rollouts_s": 0.0, "train_s": 0.0, "gate_s": 0.0, "rounds": 0.0}
    for line in log.splitlines():
        for key, rx in _IDLE.items():
            m = rx.search(line)
            if m is None:
                continue
            out[key] += float(m.groups()[-1])
            if key == "rollouts_s":
                out["groups"] += int(m.group(1))
            elif key == "train_s":
                out["rounds"] += 1
    return out
