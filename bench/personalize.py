"""Does it learn? Simulated users with a hidden preference talk to a real daemon; held-out prompts
show whether what the daemon learned from them carries over.

    python bench/personalize.py                                   # every scenario and method, bundled SmolLM2
    clawd bench personalize --scenarios brevity --methods combined --turns 16 --seeds 0,1
    python bench/personalize.py --model "$(bash scripts/qwen-model.sh)" --threads 1 \\
        --scenarios brevity,no_lists --methods rl,opd,combined
    python bench/personalize.py --rescore bench/out/personalize-no_lists.json   # re-grade a recorded run

For each scenario, method and seed, a fresh daemon (its own temp home and port) is started with
that method and otherwise the daemon's own defaults: the bench measures what a user gets, so it does
not turn the learning rate, batch or training length up to learn faster (pass `--daemon-args` to
try other values; they are recorded with the results). The simulated user asks a question and
first checks that the reply answers it at all: a repeated question, an empty reply or an off-topic
one gets "You just repeated my question." or "That doesn't answer it.". Then it checks the hidden
rule and replies like a person: a complaint that names what it wants ("too long — keep it to two
sentences"), then one more try, or thanks. No label reaches the daemon; it judges each answer from
that reply, trains when a round's worth of turns is ready, gates and hot-swaps the adapter.

After each published adapter the bench scores the live weights (greedy) on held-out prompts never
used in conversation: adherence is the share that answer, with the known content, as the user
wants; the degenerate share (no answer at all: echo, empty, off-topic) is reported beside it at
every point, and no adherence figure should be quoted without it. It also scores the bench's 48
probes (personalize_probes.py, graded by answer) and reports their change against the base. The
base (untrained) weights are scored once per scenario: greedy scoring is deterministic, so that is
every curve's point at 0 feedback turns. At the end, the judge's verdicts are read from the daemon's
database and compared with the simulator's truth.

Results: bench/out/personalize.json (every answer) and .png; bench/results/personalize-SCENARIO-
METHOD-seedN-Tturns.json, one summary per run, to commit (personalize_report.py writes and prints them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import Daemon as ClawdServe
from personalize_probes import PROBES
from personalize_report import RESULTS, ROOT, plot, point_text, print_summary, write_summaries
from personalize_scenarios import SCENARIOS, SYSTEM, Scenario, grade_heldout, non_answer, probe_right, react

METHODS = ("rl", "opd", "combined")
# When the scheduler looks, not how it learns: start as soon as the simulated user pauses instead of
# after 30 s of quiet, or a run would spend most of its time waiting.
LOOP_FLAGS = ["--idle-seconds", "1", "--tick-seconds", "0.5"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="GGUF to serve and train (default: the daemon's, Qwen2.5-Coder-0.5B once installed)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    p.add_argument("--seeds", default="0", help="comma-separated: each seed is one run per scenario and method "
                   "(its own prompt order and sampled answers)")
    p.add_argument("--turns", type=int, default=32,
                   help="feedback turns (answers the user reacted to) per run; the daemon trains every train_batch (8)")
    p.add_argument("--max-tokens", type=int, default=160, help="longest answer, in conversation and on held-out prompts")
    p.add_argument("--threads", type=int, help="CPU threads for the daemon (llama.cpp and training)")
    p.add_argument("--daemon-args", default="", help='more `clawd serve` flags, e.g. "--train-batch 8"; recorded')
    p.add_argument("--round-timeout", type=float, default=3600, help="seconds to wait for a round to judge, train and publish")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    p.add_argument("--rescore", type=Path, nargs="+", metavar="JSON",
                   help="re-grade the answers recorded in these personalize.json files with today's checkers; runs nothing")
    args = p.parse_args()
    if args.rescore:
        for path in args.rescore:
            result = rescore(json.loads(path.read_text())) | {"rescored_from": str(path.resolve().relative_to(ROOT))}
            print(f"\n{path} (re-graded)")
            print_summary(result)
            write_summaries(result)
        return
    scenarios = [SCENARIOS[n] for n in args.scenarios.split(",")]
    methods = args.methods.split(",")
    if unknown := set(methods) - set(METHODS):
        sys.exit(f"unknown method(s) {', '.join(unknown)}: choose from {', '.join(METHODS)}")
    seeds = [int(x) for x in args.seeds.split(",")]

    t0 = time.time()
    result: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "loop_flags": LOOP_FLAGS, "system": SYSTEM, "scenarios": {}}
    for sc in scenarios:
        runs: dict[str, Any] = {}
        result["scenarios"][sc.name] = {"preference": sc.preference, "heldout": len(sc.heldout),
                                        "probes": len(PROBES), "runs": runs}
        base = None  # the held-out and probe scores of the untrained weights, shared by every run
        for method in methods:
            for seed in seeds:
                print(f"\n== {sc.name} / {method} / seed {seed}", flush=True)
                run = runs[f"{method}/{seed}"] = run_method(sc, method, seed, args, base)
                base = run["curve"][0]["eval"]
                _save(result, args.out, time.time() - t0)
                write_summaries(result, only=(sc.name, f"{method}/{seed}"))
    print_summary(result)
    _save(result, args.out, time.time() - t0)
    plot(result, args.out / "personalize.png")
    print(f"\nwrote {args.out / 'personalize.json'}, {args.out / 'personalize.png'} and summaries in {RESULTS} "
          f"({(time.time() - t0) / 60:.0f} min)")


def _save(result: dict, out: Path, seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    result["seconds"] = round(seconds, 1)
    (out / "personalize.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))


# -- one daemon, one method ---------------------------------------------------------------------
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


def is_learning(name: str) -> bool:
    """A setting that decides how a run learns (judge, trainer, gate), recorded with its results."""
    return name.startswith(("judge_", "train_", "lora_", "w_", "gate_")) or name in ("lr", "max_train_tokens")


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


def run_method(sc: Scenario, method: str, seed: int, args: argparse.Namespace, base: dict | None) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"clawd-bench-{sc.name}-{method}-{seed}-"))
    t0 = time.time()
    # The judge's calibration is measured once per model file (minutes); a user's daemon does it
    # once, so every run after the first starts with the one the first measured.
    calibrations = args.out / "judge-calibration"
    if calibrations.is_dir():
        shutil.copytree(calibrations, home / "judge")
    d = Daemon(method, args, home).start()
    try:
        ev = base or evaluate(d, sc, args)
        # the model the daemon serves, as it says: without --model, its default (Qwen once assembled)
        run: dict[str, Any] = {"method": method, "seed": seed, "settings": d.settings,
                               "model": Path(d.status()["model"]["path"]).name,
                               "curve": [{"feedback_turns": 0, "adapter": None, "eval": ev}], "turns": [], "rounds": []}
        print(f"  0 feedback turns (base{', shared' if base else ''}): {point_text(run['curve'][0], ev)}", flush=True)
        converse_and_learn(d, sc, seed, args, run)
        run["judge"] = judge_agreement(d, run["turns"])
        if (home / "judge").is_dir():
            shutil.copytree(home / "judge", calibrations, dirs_exist_ok=True)
    except BaseException:
        print(f"  failed; the daemon's home is kept: {home}", file=sys.stderr)
        raise
    finally:
        d.stop()
    shutil.rmtree(home, ignore_errors=True)  # after the stop: a live daemon still writes its log there
    run["seconds"] = round(time.time() - t0, 1)
    return run


def converse_and_learn(d: Daemon, sc: Scenario, seed: int, args: argparse.Namespace, run: dict[str, Any]) -> None:
    """Talk until a round's worth of turns has feedback, let the daemon judge, train and publish on
    its own, score what went live; until --turns feedback turns. Same prompts and seeds for every method."""
    rng = random.Random(seed)
    prompts = list(sc.prompts)
    rng.shuffle(prompts)
    version = None
    asked = 0
    need = d.status()["training"]["batch"]  # feedback turns to give before the daemon could have a round's worth
    while len(run["turns"]) < args.turns:
        t_talk, start = time.time(), len(run["turns"])
        while len(run["turns"]) - start < need and len(run["turns"]) < args.turns:
            run["turns"] += converse(d, sc, prompts[asked % len(prompts)], args, seed=seed * 100_000 + asked * 10,
                                     rng=random.Random(seed * 100_000 + asked))
            asked += 1
        block = run["turns"][start:]
        talked = time.time() - t_talk
        print(f"  {len(run['turns'])} feedback turns: {sum(t['ok'] for t in block)}/{len(block)} answers met the "
              f"preference, {sum(t['non_answer'] is not None for t in block)} were no answer "
              f"({talked:.0f}s of conversation); waiting for the daemon", flush=True)
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
        run["curve"].append({"feedback_turns": len(run["turns"]), "adapter": version, "eval": ev})
        print(f"  adapter {version} live after {waited:.0f}s: {point_text(run['curve'][-1], run['curve'][0]['eval'])}",
              flush=True)


def converse(d: Daemon, sc: Scenario, prompt: str, args: argparse.Namespace, seed: int,
             rng: random.Random) -> list[dict[str, Any]]:
    """One short conversation: an answer, a complaint and one more try if it misses, then thanks or
    giving up. Returns the answers the user reacted to, with the simulator's truth."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    turns = []
    for attempt in range(2):
        cid, text = d.chat(messages, args.max_tokens, temperature=0.7, seed=seed + attempt)
        ok, why, reaction = react(sc, prompt, text, attempt, rng.choice)
        turns.append({"id": cid, "prompt": prompt, "attempt": attempt, "ok": ok, "non_answer": why, "text": text,
                      "reaction": reaction})
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
    """The live weights' greedy answers to the held-out prompts and the probes, graded."""
    t0 = time.time()

    def ask(question: str, max_tokens: int) -> str:
        return d.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
                      max_tokens, temperature=0.0, seed=0, headers=SIDE)[1]

    held = [{"prompt": q, "text": ask(q, args.max_tokens)} for q in sc.heldout]
    probes = [{"question": q, "accepted": list(acc), "text": ask(q, 48)} for q, acc in PROBES]
    return grade(sc, {"seconds": round(time.time() - t0, 1), "heldout": held, "probes": probes})


def grade(sc: Scenario, ev: dict[str, Any]) -> dict[str, Any]:
    """Grades recorded answers in place (also how --rescore re-grades an old run) and sums them up:
    adherence, and beside it the share of held-out replies that were no answer at all (degenerate) and
    of those that answered without the known content (wrong); probe accuracy and degenerate share."""
    for h in ev["heldout"]:
        h |= grade_heldout(sc, h["prompt"], h["text"])
    for p in ev["probes"]:
        # Runs recorded before the probes kept their accepted answers were graded by an older list,
        # whose "144 divided by 12?" contains its own answer: their verdict stands, and a right
        # answer is an answer.
        if "accepted" in p:
            p["ok"] = probe_right(p["question"], p["text"], tuple(p["accepted"]))
        p["non_answer"] = None if p["ok"] else non_answer(p["question"], p["text"])
    held, probes = ev["heldout"], ev["probes"]
    return ev | {
        "adherence": _share(held, lambda h: h["ok"]),
        "degenerate": _share(held, lambda h: h["non_answer"] is not None),
        "non_answers": {why: sum(h["non_answer"] == why for h in held) for why in ("echo", "empty", "off-topic")},
        "wrong": _share(held, lambda h: h["non_answer"] is None and not h["known"]),
        "probe_accuracy": _share(probes, lambda p: p["ok"]),
        "probe_degenerate": _share(probes, lambda p: p["non_answer"] is not None)}


def _share(items: list[dict], pred) -> float:
    return sum(map(pred, items)) / len(items)


def judge_agreement(d: Daemon, turns: list[dict[str, Any]]) -> dict[str, Any]:
    """The judge's verdict on each answer the user reacted to, against the simulator's truth
    (+1 met the preference, -1 missed it), read from the daemon's database."""
    rows = d.rows("SELECT t.completion_id, j.score, j.hint FROM judgments j JOIN turns t ON t.id = j.turn_id")
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


# -- re-grading ---------------------------------------------------------------------------------
def rescore(result: dict[str, Any]) -> dict[str, Any]:
    """A recorded result, every answer re-graded with today's checkers. Results from before --seeds
    keep their runs under "methods" (one seed, config "seed", the base a run of its own): they are
    moved to "runs", and the base, which is every run's first point anyway, is dropped."""
    for name, sc in result["scenarios"].items():
        scenario = SCENARIOS[name]
        if "runs" not in sc:
            seed = result["config"]["seed"]
            sc["runs"] = {f"{m}/{seed}": run | {"method": m, "seed": seed}
                          for m, run in sc.pop("methods").items() if m != "base"}
        sc["probes"] = len(sc["runs"] and next(iter(sc["runs"].values()))["curve"][0]["eval"]["probes"])
        for run in sc["runs"].values():
            for point in run["curve"]:
                point["eval"] = grade(scenario, point["eval"])
            for t in run["turns"]:
                t["non_answer"] = non_answer(t["prompt"], t["text"])
    return result


if __name__ == "__main__":
    main()
