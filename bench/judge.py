"""Judge benchmark: how well each way of reaching a verdict agrees with hand-labeled turns.

    python bench/judge.py                        # bundled SmolLM2, plus Qwen2.5-0.5B if scripts/qwen-model.sh works
    python bench/judge.py --model X.gguf         # one model (repeatable)
    python bench/judge.py --limit 20 --methods score
    python bench/judge.py --vote-limit 9 --ttft-reps 5 --hint-cases 6   # what wrote bench/out/judge.json

For each model and each method (`vote`: m sampled answers ending in \\boxed{}, majority; `score`:
one forward pass, P of each verdict after the forced `\\boxed{`), over tests/data/judge_cases.jsonl:
accuracy against the label, the 3×3 confusion (rows: label, columns: verdict), seconds per judged
turn. For `score` also the accuracy at other margins, from the same probabilities. Hint votes are
off: they do not make the verdict. Then, for a user request that lands while the judge works, how
long it waited for the engine and its time to first token, against the same on an idle engine;
and with --hint-cases, how often hint votes parse and yield a hint on turns that deserve one.
Results go to bench/out/judge.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clawd.config import Settings, bundled_model_path  # noqa: E402
from clawd.engine import Engine, GenInfo, Sampling  # noqa: E402
from clawd.judge import Judge, verdict_from_probs  # noqa: E402
from clawd.records import NextState, ToolCall, Turn  # noqa: E402

CASES = ROOT / "tests" / "data" / "judge_cases.jsonl"
LABELS = (1, 0, -1)
MARGINS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)


def load_cases(path: Path) -> list[tuple[dict, Turn, NextState]]:
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        c = json.loads(line)
        calls = [ToolCall(id=f"call_{k}", name=t["name"], arguments=t["arguments"]) for k, t in enumerate(c["output"]["tool_calls"])]
        turn = Turn(session_id=0, index=0, kind="main", completion_id=f"case-{c['id']}", request={"messages": c["messages"]},
                    prompt_ids=[], text=c["output"]["text"], tool_calls=calls, status="ok", id=i + 1)
        ns = NextState(turn_id=i + 1, role=c["next_state"]["role"], messages=c["next_state"]["messages"],
                       content="\n\n".join(m["content"] for m in c["next_state"]["messages"]))
        out.append((c, turn, ns))
    return out


def confusion(pairs: list[tuple[int, int]]) -> dict[str, dict[str, int]]:
    return {str(lab): {str(v): sum(1 for a, b in pairs if a == lab and b == v) for v in LABELS} for lab in LABELS}


def accuracy(pairs: list[tuple[int, int]]) -> float:
    return round(sum(a == b for a, b in pairs) / max(len(pairs), 1), 3)


def run_method(judge: Judge, cases, method: str) -> dict:
    rows, t0 = [], time.perf_counter()
    for c, turn, ns in cases:
        t = time.perf_counter()
        j = judge.judge_turn(turn, ns, method=method)
        rows.append({"id": c["id"], "label": c["label"], "verdict": j.score, "s": round(time.perf_counter() - t, 2),
                     "probs": j.probs, "votes": [v.value for v in j.votes],
                     "raw": [v.raw for v in j.votes][:1]})
        print(f"  {method:5s} {c['id']:18s} label {c['label']:+d} verdict {j.score:+d}"
              + (f"  p1={j.probs['1']:.2f} p-1={j.probs['-1']:.2f} p0={j.probs['0']:.2f}" if j.probs else
                 f"  votes {[v.value for v in j.votes]}"), file=sys.stderr, flush=True)
    pairs = [(r["label"], r["verdict"]) for r in rows]
    res = {"accuracy": accuracy(pairs), "confusion": confusion(pairs),
           "s_per_turn": round((time.perf_counter() - t0) / max(len(rows), 1), 2), "cases": rows}
    if method == "score":
        res["accuracy_by_margin"] = {str(m): accuracy([(r["label"], verdict_from_probs(r["probs"], m)) for r in rows])
                                     for m in MARGINS}
    else:
        res["failed_votes"] = sum(v is None for r in rows for v in r["votes"])
        res["votes"] = sum(len(r["votes"]) for r in rows)
    return res


def ttft(engine: Engine, prompt: list[int]) -> tuple[float, float]:
    """(seconds until the request holds the engine, seconds until its first token)."""
    t0 = time.perf_counter()
    with engine.lock.user():
        t_lock = time.perf_counter()
        gen = engine.generate(prompt, Sampling(temperature=0, max_tokens=1), GenInfo())
        next(gen, None)
        gen.close()
    return t_lock - t0, time.perf_counter() - t0


def mid_judge_ttft(judge: Judge, cases, reps: int) -> dict:
    """A fresh (uncached) short user request, on an idle engine and then while the judge works
    (evaluating its prompt or sampling votes). The lock wait is what the judge adds; the time to
    first token also holds the request's own prompt, which on a busy CPU varies more than that."""
    engine = judge.engine
    prompts = [engine.tokenize(engine.template.render([{"role": "user", "content": f"Request {i}: name a fruit."}]))
               for i in range(2 * reps)]
    idle = [ttft(engine, prompts[i]) for i in range(reps)]
    mid, judge_s, aborts = [], [], judge.context.aborts
    for i in range(reps):
        _, turn, ns = cases[(7 * i) % len(cases)]
        judge.context._truncate(0)  # a cold judge prompt, so some requests land in its evaluation
        done = threading.Event()
        t = threading.Thread(target=lambda turn=turn, ns=ns, done=done: (judge.judge_turn(turn, ns, method="vote"), done.set()))
        t0 = time.perf_counter()
        t.start()
        time.sleep(random.uniform(0.05, 2.0))
        if done.is_set():
            print("  (judge had already finished; that request did not land mid-judge)", file=sys.stderr)
        mid.append(ttft(engine, prompts[reps + i]))
        t.join()
        judge_s.append(time.perf_counter() - t0)
    med = lambda xs: statistics.median(xs)  # noqa: E731
    return {"idle_lock_s": [round(a, 4) for a, _ in idle], "idle_ttft_s": [round(b, 3) for _, b in idle],
            "mid_lock_s": [round(a, 4) for a, _ in mid], "mid_ttft_s": [round(b, 3) for _, b in mid],
            "added_ttft_s_median": round(med([b for _, b in mid]) - med([b for _, b in idle]), 3),
            "lock_wait_s_max": round(max(a for a, _ in mid), 4),
            "prompt_batches_aborted": judge.context.aborts - aborts,
            "judge_finished_after_s": [round(x, 2) for x in judge_s]}


def hint_rate(judge: Judge, cases) -> dict:
    """Hint votes on turns where the next state shows a better answer (label -1)."""
    votes, with_hint, examples = [], 0, []
    for c, turn, ns in cases:
        j = judge.judge_turn(turn, ns, method="score")
        hv = [v for v in j.votes if v.kind == "hint"]
        votes += [v.value for v in hv]
        with_hint += j.hint is not None
        examples.append({"id": c["id"], "values": [v.value for v in hv], "hint": j.hint})
        print(f"  hint  {c['id']:18s} values {[v.value for v in hv]} hint {j.hint!r}", file=sys.stderr, flush=True)
    return {"turns": len(cases), "votes": len(votes), "valid_votes": sum(v is not None for v in votes),
            "positive_votes": sum(v == 1 for v in votes), "turns_with_hint": with_hint, "examples": examples}


def qwen_model() -> Path | None:
    script = ROOT / "scripts" / "qwen-model.sh"
    if not script.is_file():
        return None
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    path = Path(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else None
    return path if path and path.is_file() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", type=Path, help="GGUF to judge with (repeatable)")
    ap.add_argument("--methods", default="score,vote")
    ap.add_argument("--limit", type=int, default=0, help="only the first N cases (0 = all)")
    ap.add_argument("--vote-limit", type=int, default=0, help="only N cases for 'vote' (it is ~10× slower)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--ttft-reps", type=int, default=3, help="mid-judge time-to-first-token repetitions (0 = skip)")
    ap.add_argument("--hint-cases", type=int, default=0, help="also sample hint votes on N negative cases")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "judge.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    models = args.model or [m for m in (bundled_model_path(), qwen_model()) if m is not None]
    cases = load_cases(CASES)
    if args.limit:
        cases = cases[:args.limit]
    # spread the categories over a --vote-limit subset instead of taking the first N (all 'thanks')
    spread = sorted(cases, key=lambda x: int(x[0]["id"].rsplit("-", 1)[1]))
    results = {}
    for model in models:
        print(f"{model.name}: {len(cases)} cases", file=sys.stderr)
        settings = Settings(judge_hint_votes=0)
        engine = Engine(model, n_ctx=settings.judge_budget_tokens + 1024, threads=args.threads)
        judge = Judge(engine, None, settings)
        res: dict = {"model": str(model), "cases": len(cases), "votes": settings.judge_votes,
                     "temperature": settings.judge_temperature, "margin": settings.judge_margin}
        methods = [m for m in args.methods.split(",") if m in ("vote", "score")]
        for method in methods:
            subset = spread[:args.vote_limit] if method == "vote" and args.vote_limit else cases
            res[method] = run_method(judge, subset, method)
            res[method]["n"] = len(subset)
        if args.ttft_reps:
            res["ttft"] = mid_judge_ttft(judge, cases, args.ttft_reps)
        if args.hint_cases:
            judge.settings = Settings()  # the default hint votes
            res["hints"] = hint_rate(judge, [x for x in spread if x[0]["label"] == -1][:args.hint_cases])
        results[model.name] = res
        print(f"\n{model.name}")
        for method in methods:
            r = res[method]
            print(f"  {method:5s} accuracy {r['accuracy']:.2f} on {r['n']} cases, {r['s_per_turn']:.2f} s/turn")
            print("        label\\verdict   +1   0  -1")
            for lab in LABELS:
                row = r["confusion"][str(lab)]
                print(f"        {lab:+d}             " + " ".join(f"{row[str(v)]:3d}" for v in LABELS))
            if method == "score":
                print("        by margin: " + ", ".join(f"{m}: {a:.2f}" for m, a in r["accuracy_by_margin"].items()))
            else:
                print(f"        failed votes: {r['failed_votes']} of {r['votes']}")
        if "ttft" in res:
            t = res["ttft"]
            print(f"  user request mid-judge: waited for the engine {t['mid_lock_s']} s (max {t['lock_wait_s_max']}); "
                  f"time to first token idle {t['idle_ttft_s']}, mid-judge {t['mid_ttft_s']} "
                  f"(median added {t['added_ttft_s_median']} s)")
        if "hints" in res:
            h = res["hints"]
            print(f"  hint votes on {h['turns']} negative turns: {h['valid_votes']}/{h['votes']} valid, "
                  f"{h['positive_votes']} positive, {h['turns_with_hint']} turn(s) got a hint")
        sys.stdout.flush()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))  # after each model: a long run keeps what it measured
    print(f"\nwritten {args.out}")


if __name__ == "__main__":
    main()
