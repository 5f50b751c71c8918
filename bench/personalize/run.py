"""Does it learn? Simulated users with a hidden preference talk to a real daemon; held-out prompts
show whether what the daemon learned from them carries over.

    python -m bench.personalize.run                                   # every scenario and method, bundled SmolLM2
    clawd bench personalize --scenarios brevity --turns 16 --seeds 0,1   # the daemon's own method, grpo
    python -m bench.personalize.run --model "$(bash scripts/qwen-model.sh)" --threads 1 \\
        --scenarios brevity,no_lists --methods rl,opd,combined
    python -m bench.personalize.run --rescore bench/out/personalize-no_lists.json   # re-grade a recorded run
    python -m bench.personalize.run --model "$(bash scripts/qwen-model.sh)" --threads 2 --quick   # one scenario, 15 min
    python -m bench.personalize.run --scenarios control --seeds 0,1   # the control user

For each scenario, method and seed, a fresh daemon (its own temp home and port) is started with
that method and otherwise the daemon's own defaults: the bench measures what a user gets, so it does
not turn the learning rate, batch or training length up to learn faster (pass `--daemon-args` to
try other values; they are recorded with the results). The simulated user asks a question and
first checks that the reply answers it at all: a repeated question, an empty reply or an off-topic
one gets "You just repeated my question." or "That doesn't answer it.". Then it checks the hidden
rule and replies like a person: a complaint that names what it wants ("too long — keep it to two
sentences"), then one more try, or thanks. An answer in its form that says nothing a right answer
to the question says (none of the prompt's known words, or a wrong figure: scenarios.says_something)
gets "That doesn't really answer my question." instead of thanks. No label reaches the daemon; it judges each answer from
that reply, trains when a round's worth of turns is ready, gates and hot-swaps the adapter.

After each published adapter the bench scores the live weights (greedy) on held-out prompts never
used in conversation: adherence is the share that answer, with the known content, as the user
wants; the degenerate share (no answer at all: echo, empty, off-topic) is reported beside it at
every point, and no adherence figure should be quoted without it. It also scores the bench's 48
probes (personalize_probes.py, graded by answer) and reports their change against the base. The
base (untrained) weights are scored once per scenario: greedy scoring is deterministic, so that is
every curve's point at 0 feedback turns. The last weights (and the base, cached) also answer the
held-out prompts as served (`served_answers`: the daemon's default temperature, as OpenClaw gets
it, a fixed seed a prompt): the summary's `served` figures beside the greedy ones say whether a
loop seen greedy is one a user reads. At the end, the judge's verdicts are read from the daemon's
database and compared with the simulator's truth.

Results: bench/out/personalize.json (every answer) and .png; bench/results/personalize-SCENARIO-
METHOD-seedN-Tturns.json, one summary per run, to commit (report.py writes and prints them).

Each scenario is reported in four columns, measured in the same run on the same held-out prompts
(32 or more a scenario, each with known-answer content): base (the untrained weights), told (the
base with the preference in the prompt, as the OPD teacher sees it), oracle (the daemon trained on
its own samples that the checker passes: what a perfect scorer would reach, oracle.py)
and loop (what the daemon learned from the simulated user). Each comes with a bootstrap 95%
interval, continuous measures (measures.py), probes lost against the base, and the loop's
gain as a share of the oracle's. The base and told answers, the oracle's record and each finished loop
run are cached in OUT/cache by model file and settings (a loop run by the daemon's source too: it
is what the code does end to end): a sweep run again with the same flags in the next sitting picks
up where the last one stopped. The control user (--scenarios control) has no hidden
preference: its runs are scored on every pool, and every scenario's adherence must stay where it was.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.personalize.agreement import judge_agreement, scorer_agreement
from bench.personalize.checkers import non_answer
from bench.personalize.evaluate import (
    LOOP_FLAGS,
    SAMPLING_TEMPERATURE,
    Daemon,
    cached_answers,
    grade,
    greedy_answers,
    idle_cost,
    pause_learning,
    served_answers,
    since,
    wait_for_round,
)
from bench.personalize.oracle import run_oracle
from bench.personalize.probes import PROBES
from bench.personalize.report import (
    RESULTS,
    ROOT,
    plot,
    point_text,
    print_summary,
    served_text,
    write_oracle_summaries,
    write_summaries,
)
from bench.personalize.scenarios import CONTROL, SCENARIOS, SYSTEM, Scenario, react, users_source

METHODS = ("grpo", "rl", "opd", "combined")
COLUMNS = ("base", "told", "oracle", "loop")
# The default sweep: the first five scenarios, and the candidates whose answers to the conversation
# prompts leave room and pass often enough when sampled (bench/results/personalize-reach-*.json,
# Qwen2.5-Coder-0.5B, greedy / sampled pass rate: answer_first 0.41 / 0.38, one_paragraph 0.41 / 0.33,
# no_bold 0.62 / 0.63, bold_terms 0.38 / 0.36). Left out: no_code (greedy 0.84, no room) and
# ends_with_question (sampled 0.04).
SWEEP = ("brevity", "no_lists", "sign_off", "metric", "french", "answer_first", "one_paragraph", "no_bold", "bold_terms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="GGUF to serve and train (default: the daemon's, Qwen2.5-Coder-0.5B once installed)")
    p.add_argument("--scenarios", default=",".join(SWEEP),
                   help=f"comma-separated, of {', '.join(SCENARIOS)}, and control (the user with no hidden preference)")
    p.add_argument("--methods", default="grpo", help=f"comma-separated, of {', '.join(METHODS)}")
    p.add_argument("--columns", default=",".join(COLUMNS), help=f"comma-separated, of {', '.join(COLUMNS)}")
    p.add_argument("--seeds", default="0,1", help="comma-separated: each seed is one run per scenario and method "
                   "(its own prompt order and sampled answers), and one oracle")
    p.add_argument("--turns", type=int, default=24,
                   help="feedback turns (answers the user reacted to) per run; the daemon trains every train_batch (8)")
    p.add_argument("--oracle-k", type=int, default=4, help="the oracle's samples per conversation prompt")
    p.add_argument("--oracle-pairs", action="store_true",
                   help="the oracle labels each prompt's (pass, fail) sample pairs +1 and -1, and nothing else (GRPO's labels)")
    p.add_argument("--max-tokens", type=int, default=160, help="longest answer, in conversation and on held-out prompts")
    p.add_argument("--threads", type=int, help="CPU threads for the daemon (llama.cpp and training)")
    p.add_argument("--daemon-args", default="", help='more `clawd serve` flags, e.g. "--train-batch 8"; recorded')
    p.add_argument("--round-timeout", type=float, default=3600, help="seconds to wait for a round to judge, train and publish")
    p.add_argument("--idle-limit", type=float,
                   help="the user's idle seconds after each block of turns: then they talk on, whatever the daemon is "
                        "doing, and learning is paused before the held-out prompts are scored (default: until the "
                        "daemon is idle, at most --round-timeout; GRPO replays every turn under each new adapter, so "
                        "that can be an hour)")
    p.add_argument("--score-every-adapter", action="store_true",
                   help="score the held-out prompts after every adapter, not only after the last feedback turn")
    p.add_argument("--quick", action="store_true", help="one scenario (the first of --scenarios), one seed and method, "
                   "16 feedback turns, scored at the end; base, told and oracle come from the cache when there")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    p.add_argument("--rescore", type=Path, nargs="+", metavar="JSON",
                   help="re-grade the answers recorded in these personalize.json files with today's checkers; runs nothing")
    args = p.parse_args()
    if args.rescore:
        for path in args.rescore:
            where = path.resolve()
            result = rescore(json.loads(path.read_text())) | {
                "rescored_from": str(where.relative_to(ROOT) if where.is_relative_to(ROOT) else where)}
            print(f"\n{path} (re-graded)")
            print_summary(result)
            write_summaries(result)
            write_oracle_summaries(result)
        return
    everyone = SCENARIOS | {CONTROL.name: CONTROL}
    if unknown := set(args.scenarios.split(",")) - set(everyone):
        sys.exit(f"unknown scenario(s) {', '.join(unknown)}: choose from {', '.join(everyone)}")
    methods, columns = args.methods.split(","), args.columns.split(",")
    if unknown := set(methods) - set(METHODS):
        sys.exit(f"unknown method(s) {', '.join(unknown)}: choose from {', '.join(METHODS)}")
    if unknown := set(columns) - set(COLUMNS):
        sys.exit(f"unknown column(s) {', '.join(unknown)}: choose from {', '.join(COLUMNS)}")
    if args.idle_limit is not None and args.score_every_adapter:
        sys.exit("--idle-limit scores the held-out prompts once, at the end (learning paused): "
                 "drop --score-every-adapter")
    seeds = [int(x) for x in args.seeds.split(",")]
    scenarios = [everyone[n] for n in args.scenarios.split(",")]
    if args.quick:
        scenarios, seeds, methods, args.turns = scenarios[:1], seeds[:1], methods[:1], 16

    t0 = time.time()
    result: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "loop_flags": LOOP_FLAGS, "system": SYSTEM, "scenarios": {}}
    for sc in scenarios:
        graded = graded_scenarios(sc)
        pools = [(g.pool, list(g.heldout)) for g in {g.pool: g for g in graded}.values()]
        entry: dict[str, Any] = {"preference": sc.preference, "graded": [g.name for g in graded],
                                 "heldout": sum(len(q) for _, q in pools), "probes": len(PROBES), "runs": {},
                                 "reference": {}}
        result["scenarios"][sc.name] = entry
        ref = entry["reference"]
        if "oracle" in columns and sc is not CONTROL:
            for seed in seeds:
                print(f"\n== {sc.name} / oracle / seed {seed}", flush=True)
                rec = ref[f"oracle/{seed}"] = run_oracle(sc, seed, args, pools, args.out / "cache")
                print(f"  oracle: {point_text({'eval': grade(sc, rec['eval'])}, None)}", flush=True)
                _save(result, args.out, time.time() - t0)
        for method in methods if {"base", "told", "loop"} & set(columns) else []:
            for seed in seeds if "loop" in columns else seeds[:1]:
                print(f"\n== {sc.name} / {method} / seed {seed}", flush=True)
                run = run_method(sc, method, seed, args, pools, ref, loop="loop" in columns, told="told" in columns)
                if "loop" in columns:
                    entry["runs"][f"{method}/{seed}"] = run
                _save(result, args.out, time.time() - t0)
                write_summaries(result, only=(sc.name, f"{method}/{seed}"))
    print_summary(result)
    _save(result, args.out, time.time() - t0)
    write_oracle_summaries(result)
    plot(result, args.out / "personalize.png")
    print(f"\nwrote {args.out / 'personalize.json'}, {args.out / 'personalize.png'} and summaries in {RESULTS} "
          f"({(time.time() - t0) / 60:.0f} min)")


def graded_scenarios(sc: Scenario) -> list[Scenario]:
    """Whose adherence a run reports: its own; for the control user, every scenario's (and its own)."""
    return [*SCENARIOS.values(), CONTROL] if sc is CONTROL else [sc]


def _save(result: dict, out: Path, seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    result["seconds"] = round(seconds, 1)
    (out / "personalize.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))


# -- one daemon, one method ---------------------------------------------------------------------
def reference_columns(sc: Scenario, method: str, args: argparse.Namespace, pools: list[tuple[str, list[str]]],
                      ref: dict[str, Any], told: bool) -> None:
    """The base and told columns (cached across runs) into `ref`, from a daemon of their own. On the
    loop's daemon their 100 answers were its first turns, and a group's sampling seeds follow turn
    ids (rollouts.answer_seed): the same run sampled other groups with the cache cold than warm
    (one_paragraph seed 0, stop 60: its first groups were turns 122, 119, … against 22, 19, …)."""
    home = Path(tempfile.mkdtemp(prefix=f"clawd-bench-{sc.name}-reference-"))
    d = Daemon(method, args, home).start()
    try:
        if "base" not in ref:
            ref["base"] = cached_answers(d, pools, args.max_tokens, args.out / "cache")
            print(f"  base: {point_text({'eval': grade(sc, ref['base'])}, None)}", flush=True)
        if told and "told" not in ref:
            ref["told"] = cached_answers(d, pools, args.max_tokens, args.out / "cache", told_sc=sc)
            print(f"  told: {point_text({'eval': grade(sc, ref['told'])}, grade(sc, ref['base']))}", flush=True)
        if "served" not in ref:
            ref["served"] = cached_answers(d, pools, args.max_tokens, args.out / "cache", served=True)
            print(f"  base, as served: {served_text(grade(sc, ref['served']))}", flush=True)
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)


def run_method(sc: Scenario, method: str, seed: int, args: argparse.Namespace, pools: list[tuple[str, list[str]]],
               ref: dict[str, Any], loop: bool = True, told: bool = True) -> dict[str, Any]:
    """One loop run on a fresh daemon. Before any turn, the base and told columns (cached across runs,
    stored in `ref`); then conversation, rounds and scoring."""
    home = Path(tempfile.mkdtemp(prefix=f"clawd-bench-{sc.name}-{method}-{seed}-"))
    t0 = time.time()
    # The judge's calibration is measured once per model file (minutes); a user's daemon does it
    # once, so every run after the first starts with the one the first measured.
    calibrations = args.out / "judge-calibration"
    if calibrations.is_dir():
        shutil.copytree(calibrations, home / "judge")
    cache = args.out / "cache"
    told = told and sc is not CONTROL
    if "base" not in ref or "served" not in ref or (told and "told" not in ref):
        reference_columns(sc, method, args, pools, ref, told)
    d = Daemon(method, args, home).start()
    try:
        # the model the daemon serves, as it says: without --model, its default (Qwen once assembled)
        run: dict[str, Any] = {"method": method, "seed": seed, "settings": d.settings,
                               "model": Path(d.status()["model"]["path"]).name,
                               "curve": [{"feedback_turns": 0, "adapter": None, "eval": ref["base"]}], "turns": [],
                               "rounds": []}
        # A finished loop run is kept like the reference columns, so that a sweep spanning sittings
        # picks up where the last one stopped (its summary was written when it finished).
        source = daemon_source()
        key = json.dumps([d.model_key(), sc.name, sc.prompts, method, seed, args.turns, args.max_tokens,
                          args.score_every_adapter, d.settings, pools, source, users_source()]
                         + ([args.idle_limit] if args.idle_limit is not None else []))
        done = cache / f"loop-{sc.name}-{method}-seed{seed}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"
        if loop and done.is_file():
            print(f"  loop: finished in an earlier sitting ({done.name})", flush=True)
            run = json.loads(done.read_text()) | {"cached": done.name}
        elif loop:
            run["code"] = {"clawd_source": source, "commit": git_commit()}  # which daemon this measured
            converse_and_learn(d, sc, seed, args, run, pools)
            if args.idle_limit is not None:
                pause_learning(d)
            if not args.score_every_adapter:
                live = (d.status()["adapter"] or {}).get("version")
                ev = greedy_answers(d, pools, args.max_tokens) if live is not None else ref["base"]
                served = served_answers(d, pools, args.max_tokens) if live is not None else ref["served"]
                run["curve"].append({"feedback_turns": len(run["turns"]), "adapter": live, "eval": ev, "served": served})
                print(f"  after {len(run['turns'])} feedback turns, adapter {live}: "
                      f"{point_text({'eval': grade(sc, ev)}, grade(sc, ref['base']))}; as served: "
                      f"{served_text(grade(sc, served))}", flush=True)
            run["judge"] = judge_agreement(d, run["turns"])
            run["scorer"] = sa = scorer_agreement(d, sc)
            if sa["pairs"]:
                print(f"  GRPO scorer against the checker: {sa['groups']} groups, {sa['pairs']} (pass, fail) pairs, AUC "
                      f"{sa['auc']:.2f}; at margin {sa['margin']}: {sa['decided']:.0%} decided, {sa['wrong_sign']:.0%} "
                      "the wrong way; answer length alone AUC "
                      f"{sa['length_auc']:.2f}, the favoured answer shorter in {sa['shorter_first'] or 0:.0%} of decided pairs; "
                      f"{sum(g['loops'] for g in sa['by_group'])} sampled answers loop, "
                      f"{sum(g['refused'] for g in sa['by_group'])} refused by the daemon", flush=True)
        if (home / "judge").is_dir():
            shutil.copytree(home / "judge", calibrations, dirs_exist_ok=True)
    except BaseException:
        print(f"  failed; the daemon's home is kept: {home}", file=sys.stderr)
        raise
    finally:
        d.stop()
    if "cached" not in run and (home / "clawd.log").is_file():  # kept beside the results: what the idle time went to
        run["idle"] = i = idle_cost((home / "clawd.log").read_text())
        print(f"  idle work: {i['groups']:.0f} groups in {i['rollouts_s']:.0f}s, {i['rounds']:.0f} rounds trained in "
              f"{i['train_s']:.0f}s, gates {i['gate_s']:.0f}s", flush=True)
        (args.out / "logs").mkdir(parents=True, exist_ok=True)
        shutil.copy(home / "clawd.log", args.out / "logs" / f"{home.name}.log")
    shutil.rmtree(home, ignore_errors=True)  # after the stop: a live daemon still writes its log there
    if "cached" in run:
        return run
    run["seconds"] = round(time.time() - t0, 1)
    if loop:
        cache.mkdir(parents=True, exist_ok=True)
        done.write_text(json.dumps(run, ensure_ascii=False))
    return run


def daemon_source(root: Path = ROOT) -> str:
    """A digest of clawd/'s Python source. A finished loop run is reused only by the code that made
    it: a scheduler change with the same settings is a new point. (The base, told and oracle
    columns are keyed without it: they go through serving and training paths that rarely change,
    and each costs up to an hour to measure again.)"""
    h = hashlib.sha256()
    for path in sorted((root / "clawd").rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def git_commit() -> str | None:
    """The checkout's commit, "+dirty" when clawd/ has uncommitted changes; None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "clawd"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def converse_and_learn(d: Daemon, sc: Scenario, seed: int, args: argparse.Namespace, run: dict[str, Any],
                       pools: list[tuple[str, list[str]]]) -> None:
    """Talk until a round's worth of turns has feedback, let the daemon judge, train and publish on
    its own; with --score-every-adapter, score what went live; until --turns feedback turns. Same
    prompts and seeds for every method."""
    rng = random.Random(seed)
    prompts = list(sc.prompts)
    rng.shuffle(prompts)
    version = None
    asked = 0
    # feedback turns between idle times: a round's worth, also under grpo, where turns only feed the scorer
    cadence = int(d.settings["train_batch"])
    need = cadence
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
        t_wait = time.time()
        limited = args.idle_limit is not None
        st, waited = wait_for_round(d, since=t_wait, timeout=args.idle_limit if limited else args.round_timeout,
                                    give_up=limited)
        if st.get("gave_up"):
            print(f"  the user's {args.idle_limit:.0f}s of idle time are over; the daemon was {st['doing']}", flush=True)
        rnd = {"feedback_turns": len(run["turns"]), "talk_s": round(talked, 1), "learn_s": round(waited, 1),
               "gave_up": bool(st.get("gave_up")),
               "train": since(st["training"]["last"], t_wait), "publish": since(st["training"]["last_publish"], t_wait),
               "turn_counts": st["turns"], "grpo": st.get("grpo")}
        run["rounds"].append(rnd)
        live = (st["adapter"] or {}).get("version")
        # Turns the judge scored 0 (or gave no hint, for opd) carry no signal: talk only as much
        # more as the next round still lacks (grpo: the next round's worth, as the groups need time).
        tr, grpo = st["training"], st.get("grpo") or {}
        need = max(1, tr["batch"] - tr["ready"]) if tr["batch"] else cadence
        if live == version:
            ready = f"{tr['ready']}/{tr['batch']} turns" if tr["batch"] else f"{grpo.get('ready')}/{grpo.get('wanted')} groups"
            why = (rnd["publish"] or {}).get("error") or (rnd["train"] or {}).get("error") or f"{ready} ready to train"
            print(f"  no new adapter after {waited:.0f}s: {why}", flush=True)
            continue
        version = live
        print(f"  adapter {version} live after {waited:.0f}s", flush=True)
        if args.score_every_adapter:
            t_eval = time.time()
            ev = greedy_answers(d, pools, args.max_tokens)
            rnd["eval_s"] = round(time.time() - t_eval, 1)
            run["curve"].append({"feedback_turns": len(run["turns"]), "adapter": version, "eval": ev})


def converse(d: Daemon, sc: Scenario, prompt: str, args: argparse.Namespace, seed: int,
             rng: random.Random) -> list[dict[str, Any]]:
    """One short conversation: an answer, a complaint and one more try if it misses, then thanks or
    giving up. Returns the answers the user reacted to, with the simulator's truth."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    turns = []
    for attempt in range(2):
        cid, text = d.chat(messages, args.max_tokens, temperature=SAMPLING_TEMPERATURE, seed=seed + attempt)
        ok, why, reaction = react(sc, prompt, text, attempt, rng.choice)
        turns.append({"id": cid, "prompt": prompt, "attempt": attempt, "ok": ok, "non_answer": why, "text": text,
                      "reaction": reaction})
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": reaction}]
        if ok:
            break
    # The reaction reaches the daemon as the next request, which links it to the answer as that
    # answer's next state. The reply to it ends the session and is never judged.
    d.chat(messages, 16, temperature=SAMPLING_TEMPERATURE, seed=seed + 9, headers={"X-Session-Done": "1"})
    return turns


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
        if sc["runs"]:  # a result with the reference columns alone keeps its count
            sc["probes"] = len(next(iter(sc["runs"].values()))["curve"][0]["eval"]["probes"])
        for run in sc["runs"].values():
            for point in run["curve"]:
                point["eval"] = grade(scenario, point["eval"])
            for t in run["turns"]:
                t["non_answer"] = non_answer(t["prompt"], t["text"])
    return result


if __name__ == "__main__":
    main()
