"""Does it learn? Simulated users with a hidden preference talk to a real daemon; held-out prompts
show whether what the daemon learned from them carries over.

    python bench/personalize.py                                   # every scenario and method, bundled SmolLM2
    clawd bench personalize --scenarios brevity --methods base,combined --turns 8
    python bench/personalize.py --model "$(bash scripts/qwen-model.sh)" --threads 1 \\
        --scenarios brevity,no_lists --methods base,combined --turns 16 --batch 8

For each scenario and each training method, a fresh daemon (its own temp home and port) is started
with that method and a small training batch. The simulated user asks a question, checks the answer
against its hidden rule and replies like a person: a complaint that names what it wants ("too long
— keep it to two sentences"), then one more try, or thanks. No label reaches the daemon; it judges
each answer from that reply, trains when `--batch` turns are ready, gates and hot-swaps the adapter.
After each round the bench scores the live weights on held-out prompts never used in conversation
(greedy decoding, checker pass rate) and on a general probe set (short questions with one right
answer). `base` is the untrained model: greedy scoring of the same weights is deterministic, so it
is scored once per scenario and is also every method's point at 0 feedback turns. At the end, the
judge's verdicts are read from the daemon's database and compared with the simulator's truth.

Results: bench/out/personalize.json, and bench/out/personalize.png (adherence against feedback turns).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import free_port, start_server, stop
from openai import OpenAI
from personalize_scenarios import (
    GIVE_UP,
    PROBES,
    SCENARIOS,
    SYSTEM,
    THANKS,
    Scenario,
    probe_right,
)

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("base", "rl", "opd", "combined")
# What makes a round happen within a bench run rather than after a day of use: start as soon as
# the user pauses, one hint vote (OPD needs one; three cost 3x the judge time), short sequences.
# The learning rate is 20x the daemon's default (the usual LoRA fine-tuning rate) because a bench
# run makes a handful of optimizer steps, not thousands.
LOOP_FLAGS = ["--idle-seconds", "1", "--tick-seconds", "0.5", "--judge-hint-votes", "1",
              "--max-train-tokens", "512", "--train-minibatch", "2", "--lr", "2e-4"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="GGUF to serve and train (default: the bundled SmolLM2-135M)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    p.add_argument("--turns", type=int, default=16, help="feedback turns (answers the user reacted to) per method")
    p.add_argument("--batch", type=int, default=8, help="judged turns per training round (the daemon's --train-batch)")
    p.add_argument("--max-tokens", type=int, default=160, help="longest answer, in conversation and on held-out prompts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="CPU threads for the daemon (llama.cpp and training)")
    p.add_argument("--daemon-args", default="", help='more `clawd serve` flags, after the bench\'s own (e.g. "--lr 5e-5")')
    p.add_argument("--round-timeout", type=float, default=3600, help="seconds to wait for a round to judge, train and publish")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = p.parse_args()
    scenarios = [SCENARIOS[n] for n in args.scenarios.split(",")]
    methods = args.methods.split(",")
    if unknown := set(methods) - set(METHODS):
        sys.exit(f"unknown method(s) {', '.join(unknown)}: choose from {', '.join(METHODS)}")

    t0 = time.time()
    result: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "loop_flags": LOOP_FLAGS, "system": SYSTEM, "scenarios": {}}
    for sc in scenarios:
        runs: dict[str, Any] = {}
        result["scenarios"][sc.name] = {"preference": sc.preference, "heldout": len(sc.heldout),
                                        "probes": len(PROBES), "methods": runs}
        untrained = None  # the held-out and probe scores of the base weights, shared by every method
        for method in methods:
            print(f"\n== {sc.name} / {method}", flush=True)
            runs[method] = run_method(sc, method, args, untrained)
            untrained = runs[method]["curve"][0]["eval"]
            _save(result, args.out, time.time() - t0)
    print_summary(result)
    _save(result, args.out, time.time() - t0)
    plot(result, args.out / "personalize.png")
    print(f"\nwrote {args.out / 'personalize.json'} and {args.out / 'personalize.png'} ({(time.time() - t0) / 60:.0f} min)")


def _save(result: dict, out: Path, seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    result["seconds"] = round(seconds, 1)
    (out / "personalize.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))


# -- one daemon, one method ---------------------------------------------------------------------
class Daemon:
    def __init__(self, method: str, args: argparse.Namespace, home: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        learn = ["--auto-learn", "false"] if method == "base" else \
            ["--train-method", method, "--train-batch", str(args.batch), *LOOP_FLAGS]
        cmd = [sys.executable, "-m", "clawd", "serve", "--home", str(home), "--port", str(self.port), *learn,
               *(["--model", args.model] if args.model else []),
               *(["--threads", str(args.threads)] if args.threads else []), *shlex.split(args.daemon_args)]
        # The daemon also reads $CLAWD_HOME/config.json and CLAWD_* variables: keep the user's out.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWD_")} | {"CLAWD_HOME": str(home)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.proc = start_server(cmd, self.port, home / "daemon.out", env)
        self.client = OpenAI(base_url=self.url + "/v1", api_key="sk-local", timeout=900, max_retries=0)

    def status(self) -> dict[str, Any]:
        return httpx.get(self.url + "/v1/clawd/status", timeout=60).json()

    def chat(self, messages: list[dict], max_tokens: int, temperature: float, seed: int,
             headers: dict[str, str] | None = None) -> tuple[str, str]:
        r = self.client.chat.completions.create(model="clawd", messages=messages, max_tokens=max_tokens,
                                                temperature=temperature, seed=seed, extra_headers=headers)
        return r.id, r.choices[0].message.content or ""


def run_method(sc: Scenario, method: str, args: argparse.Namespace, untrained: dict | None) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"clawd-bench-{sc.name}-{method}-"))
    t0 = time.time()
    d = Daemon(method, args, home)
    try:
        ev = untrained or evaluate(d, sc, args)
        curve = [{"feedback_turns": 0, "adapter": None, "adherence": ev["adherence"],
                  "probe_accuracy": ev["probe_accuracy"], "eval": ev}]
        print(f"  0 feedback turns: held-out adherence {ev['adherence']:.2f}, probes {ev['probe_accuracy']:.2f}"
              + (" (shared: the same untrained weights)" if untrained else ""), flush=True)
        run: dict[str, Any] = {"curve": curve, "turns": [], "rounds": []}
        if method != "base":
            converse_and_learn(d, sc, args, run)
            run["judge"] = judge_agreement(home / "clawd.db", run["turns"])
    except BaseException:
        print(f"  failed; the daemon's home is kept: {home}", file=sys.stderr)
        raise
    finally:
        stop(d.proc)
    shutil.rmtree(home, ignore_errors=True)  # after the stop: a live daemon still writes its log there
    run["seconds"] = round(time.time() - t0, 1)
    return run


def converse_and_learn(d: Daemon, sc: Scenario, args: argparse.Namespace, run: dict[str, Any]) -> None:
    """Talk until a round's worth of turns has feedback, let the daemon judge, train and publish on
    its own, score what went live; until --turns feedback turns. Same prompts and seeds for every method."""
    rng = random.Random(args.seed)
    prompts = list(sc.prompts)
    rng.shuffle(prompts)
    version = None
    asked = 0
    need = args.batch  # feedback turns to give before the daemon could have a round's worth
    while len(run["turns"]) < args.turns:
        t_talk, start = time.time(), len(run["turns"])
        while len(run["turns"]) - start < need and len(run["turns"]) < args.turns:
            run["turns"] += converse(d, sc, prompts[asked % len(prompts)], args, seed=args.seed * 100_000 + asked * 10,
                                     rng=random.Random(args.seed * 100_000 + asked))
            asked += 1
        block = run["turns"][start:]
        talked = time.time() - t_talk
        print(f"  {len(run['turns'])} feedback turns: {sum(t['ok'] for t in block)}/{len(block)} answers met the "
              f"preference ({talked:.0f}s of conversation); waiting for the daemon", flush=True)
        since = time.time()
        st, waited = wait_for_round(d, since=since, timeout=args.round_timeout)
        rnd = {"feedback_turns": len(run["turns"]), "talk_s": round(talked, 1), "learn_s": round(waited, 1),
               "train": _since(st["training"]["last"], since), "publish": _since(st["training"]["last_publish"], since),
               "turn_counts": st["turns"]}
        run["rounds"].append(rnd)
        live = (st["adapter"] or {}).get("version")
        # Turns the judge scored 0 (or gave no hint, for opd) carry no signal: talk only as much
        # more as the next round still lacks.
        need = max(1, st["training"]["batch"] - st["training"]["ready"])
        if live == version:
            why = (rnd["publish"] or {}).get("error") or (rnd["train"] or {}).get("error") or \
                f"{st['training']['ready']}/{st['training']['batch']} turns ready to train"
            print(f"  no new adapter after {waited:.0f}s: {why}", flush=True)
            continue
        version = live
        t_eval = time.time()
        ev = evaluate(d, sc, args)
        rnd["eval_s"] = round(time.time() - t_eval, 1)
        run["curve"].append({"feedback_turns": len(run["turns"]), "adapter": version, "adherence": ev["adherence"],
                             "probe_accuracy": ev["probe_accuracy"], "eval": ev})
        print(f"  adapter {version} live after {waited:.0f}s: held-out adherence {ev['adherence']:.2f}, "
              f"probes {ev['probe_accuracy']:.2f}", flush=True)


def converse(d: Daemon, sc: Scenario, prompt: str, args: argparse.Namespace, seed: int,
             rng: random.Random) -> list[dict[str, Any]]:
    """One short conversation: an answer, a complaint and one more try if it misses, then thanks or
    giving up. Returns the answers the user reacted to, with the simulator's truth."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    turns = []
    for attempt in range(2):
        cid, text = d.chat(messages, args.max_tokens, temperature=0.7, seed=seed + attempt)
        ok = sc.check(text)
        reaction = rng.choice(THANKS if ok else sc.complaints if attempt == 0 else GIVE_UP)
        turns.append({"id": cid, "prompt": prompt, "attempt": attempt, "ok": ok, "text": text, "reaction": reaction})
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": reaction}]
        if ok:
            break
    # The reaction reaches the daemon as the next request, which links it to the answer as that
    # answer's next state. The reply to it ends the session and is never judged.
    d.chat(messages, 16, temperature=0.7, seed=seed + 9, headers={"X-Session-Done": "1"})
    return turns


def wait_for_round(d: Daemon, since: float, timeout: float) -> tuple[dict[str, Any], float]:
    """Until the daemon has gone idle after `since`: judged everything, and trained and published
    if enough turns were ready."""
    deadline = since + timeout
    while time.time() < deadline:
        st = d.status()
        if st["doing"] == "idle" and time.time() - st["doing_since_s"] > since:
            return st, time.time() - since
        time.sleep(2)
    raise TimeoutError(f"the daemon did not finish a round within {timeout:.0f}s; last status: {json.dumps(st)[:1500]}")


def _since(event: dict | None, since: float) -> dict | None:
    """A status event if it happened after `since` (status keeps the last one, however old)."""
    return event if event is not None and event.get("at", 0) > since else None


# -- scoring ------------------------------------------------------------------------------------
SIDE = {"X-Turn-Type": "side"}  # scoring requests are recorded as side turns: never judged or trained on


def evaluate(d: Daemon, sc: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """Held-out adherence and probe accuracy of the live weights, greedy, one answer per prompt."""
    t0 = time.time()
    held = []
    for prompt in sc.heldout:
        _, text = d.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                         args.max_tokens, temperature=0.0, seed=args.seed, headers=SIDE)
        held.append({"prompt": prompt, "ok": sc.check(text), "text": text})
    probes = []
    for question, accepted in PROBES:
        _, text = d.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
                         48, temperature=0.0, seed=args.seed, headers=SIDE)
        probes.append({"question": question, "ok": probe_right(text, accepted), "text": text})
    return {"adherence": sum(h["ok"] for h in held) / len(held), "probe_accuracy": sum(p["ok"] for p in probes) / len(probes),
            "seconds": round(time.time() - t0, 1), "heldout": held, "probes": probes}


def judge_agreement(db_path: Path, turns: list[dict[str, Any]]) -> dict[str, Any]:
    """The judge's verdict on each answer the user reacted to, against the simulator's truth
    (+1 met the preference, -1 missed it). Read-only: the daemon owns the database."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:
        rows = con.execute("SELECT t.completion_id, j.score, j.hint FROM judgments j JOIN turns t ON t.id = j.turn_id").fetchall()
    finally:
        con.close()
    judged = {cid: (score, hint) for cid, score, hint in rows}
    confusion = {str(truth): {"1": 0, "0": 0, "-1": 0} for truth in (1, -1)}
    hints = 0
    for t in turns:
        if t["id"] in judged:
            score, hint = judged[t["id"]]
            confusion["1" if t["ok"] else "-1"][str(score)] += 1
            hints += hint is not None
    n = sum(sum(row.values()) for row in confusion.values())
    agree = confusion["1"]["1"] + confusion["-1"]["-1"]
    decided = n - confusion["1"]["0"] - confusion["-1"]["0"]
    return {"judged": n, "of": len(turns), "agreement": agree / n if n else None,
            "agreement_when_decided": agree / decided if decided else None, "hints": hints,
            "confusion": confusion}


# -- report -------------------------------------------------------------------------------------
def print_summary(result: dict[str, Any]) -> None:
    print("\nheld-out adherence against feedback turns (probe accuracy in brackets)")
    for name, sc in result["scenarios"].items():
        print(f"\n{name}: {sc['preference']} ({sc['heldout']} held-out prompts, {sc['probes']} probes)")
        for method, run in sc["methods"].items():
            curve = "  ".join(f"{p['feedback_turns']}:{p['adherence']:.2f}[{p['probe_accuracy']:.2f}]" for p in run["curve"])
            first, last = run["curve"][0], run["curve"][-1]
            line = f"  {method:<9}{curve}   gain {last['adherence'] - first['adherence']:+.2f}, " \
                   f"probes {last['probe_accuracy'] - first['probe_accuracy']:+.2f}"
            if run.get("judge"):
                j = run["judge"]
                line += f"; judge agrees with the user on {_pct(j['agreement'])} of {j['judged']} turns" \
                        f" ({_pct(j['agreement_when_decided'])} when not 0)"
            print(line + f"; {run['seconds'] / 60:.0f} min")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["scenarios"])
    fig, axes = plt.subplots(1, len(names), figsize=(max(6.0, 4.2 * len(names)), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        runs = result["scenarios"][name]["methods"]
        turns = max([int(result["config"]["turns"])] + [p["feedback_turns"] for r in runs.values() for p in r["curve"]])
        for method, run in runs.items():
            xs = [p["feedback_turns"] for p in run["curve"]]
            ys = [p["adherence"] for p in run["curve"]]
            if method == "base":  # untrained: the same score at any number of turns
                ax.plot([0, turns], ys * 2, "--", color="gray", label="base")
                continue
            line, = ax.plot(xs, ys, "o-", label=method)
            ax.plot(xs, [p["probe_accuracy"] for p in run["curve"]], ":", marker="x", color=line.get_color(),
                    label=f"{method}: probes")
        ax.set_title(f"{name}: {result['scenarios'][name]['preference']}", fontsize=9)
        ax.set_xlabel("feedback turns")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlim(-0.5, turns + 0.5)
    axes[0][0].set_ylabel("held-out adherence (probe accuracy dotted)")
    axes[0][-1].legend(fontsize=8)
    model = Path(result["config"]["model"]).name if result["config"]["model"] else "SmolLM2-135M (bundled)"
    fig.suptitle(f"clawd personalize — {model}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
