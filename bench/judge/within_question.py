"""Does a user's fit rank answers to one question, or only the questions? (issue 28)

The GRPO scorer's fit reads the base model's state after (evidence, question, answer) and is fitted
on the answers the user judged. A group is K answers to *one* question, so only what the fit reads
from the answer can rank it. But a judged answer mostly has a question of its own, and the bar
(`scorer.signal`: each judged answer ranked by a fit on the others, above chance) is passed just as
well by a fit that has learned which *questions* get rejected: the control user (any right answer is
thanked, a wrong figure corrected) rejects answers to measurement questions and to their own
complaints, and its fits passed the bar and then ranked its groups at AUC 0.30 and 0.50 (stop 50).

This replays real bench conversations (each run's judged answers and what its simulated user said,
`--extract` takes them from bench/personalize's cache of loop runs) through the daemon's scorer:

- **as the daemon reads them**: features of (evidence, question, answer);
- **the question taken out**: the same less the features of (evidence, question, no answer), so
  that a fit can use only what the answer changes.

For each: the bar (cross-validated AUC and the AUC needed), then a fit on every judged answer and
groups of K answers to each conversation question sampled from the base at the users'
temperature, ranked against the simulated user's verdict (`scenarios.accepts`): AUC within groups,
pairs decided at the daemon's margin and decided the wrong way.

    python -m bench.judge.within_question --extract /tmp/runs/grpo-quick/cache/loop-*-grpo-*.json
    python -m bench.judge.within_question --model X.gguf [--runs control]

Histories: bench/judge/data/user-histories.json. Writes bench/results/scorer-within-question-<model>.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.judge.user_fit import MAX_WRONG_SIGN
from bench.personalize.evaluate import SAMPLING_TEMPERATURE
from bench.personalize.scenarios import CONTROL, SCENARIOS, SYSTEM, accepts
from clawd.config import Settings
from clawd.engine.engine import Engine, GenInfo, Sampling
from clawd.judge.calibration import FOLDS, fit, folds, predict
from clawd.judge.judge import Judge
from clawd.judge.scorer import COMPONENTS, EVIDENCE_ITEMS, PLAIN, Scorer, pair_metrics, signal

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = Path(__file__).parent / "data" / "user-histories.json"
MARGIN = 0.25  # the daemon's margin on Qwen2.5-Coder-0.5B (its scorer's status in every run here)
NO_ANSWER = ""


def extract(paths: list[Path]) -> list[dict[str, Any]]:
    """Each cached loop run's conversation: scenario, seed and its turns (prompt, attempt, text, the
    user's verdict and reaction), in order."""
    out = []
    for p in paths:
        d = json.loads(p.read_text())
        name = p.name.split("-")[1]
        out.append({"run": p.name, "scenario": name, "seed": d["seed"], "turns": [
            {k: t[k] for k in ("prompt", "attempt", "text", "ok", "reaction")} for t in d["turns"]]})
    return out


def labeled(run: dict[str, Any]) -> tuple[list[str], list[tuple[str, str, bool]]]:
    """What the daemon's fit would read at the end of the run: the user's corrections (newest first,
    distinct, EVIDENCE_ITEMS of them) and each judged answer as (question, answer, accepted), the
    question being the user's last message (a retry's is the complaint before it). The simulated
    user's verdict stands in for the judge's."""
    turns, rows = run["turns"], []
    for i, t in enumerate(turns):
        question = t["prompt"] if t["attempt"] == 0 else turns[i - 1]["reaction"]
        rows.append((question, t["text"], bool(t["ok"])))
    evidence: list[str] = []
    for t in reversed(turns):
        if not t["ok"] and t["reaction"] and t["reaction"] not in evidence:
            evidence.append(t["reaction"])
    return evidence[:EVIDENCE_ITEMS], rows


def groups(engine: Engine, prompts: list[str], k: int, seed: int, max_tokens: int) -> list[list[str]]:
    """K answers to each prompt from the base weights at the users' temperature."""
    out = []
    for i, prompt in enumerate(prompts):
        ids = engine.tokenize(engine.template.render([{"role": "system", "content": SYSTEM},
                                                       {"role": "user", "content": prompt}]))
        answers = []
        for j in range(k):
            s = Sampling(temperature=SAMPLING_TEMPERATURE, seed=seed * 100_000 + i * 10 + j, max_tokens=max_tokens)
            with engine.lock.user():
                answers.append(b"".join(st.piece for st in engine.generate(ids, s, GenInfo())).decode("utf-8", "replace"))
        out.append(answers)
    return out


def ranked(model: dict[str, list], x: np.ndarray, ok: list[list[bool]], others: list[dict[str, list]]) -> dict[str, float]:
    """A fit's rewards on the groups' features x (groups·k, d) against the verdicts, pairs within
    groups; `stable_*`: a pair counts as decided only if every fit of `others` (each on 4 of the 5
    folds of the judged answers) orders it as this fit does."""
    n_groups, k = len(ok), len(ok[0])
    r = predict(model, x)[:, 2].reshape(n_groups, k)
    rs = np.array([predict(m, x)[:, 2] for m in others]).reshape(len(others), n_groups, k)
    cases = [list(zip(rg.tolist(), g)) for rg, g in zip(r, ok)]
    at = pair_metrics(cases, MARGIN)
    pairs = [(i, a, b) for i, g in enumerate(ok) for a in range(k) for b in range(k) if g[a] and not g[b]]
    stable = [r[i, a] - r[i, b] for i, a, b in pairs if abs(r[i, a] - r[i, b]) >= MARGIN
              and all(np.sign(rs[:, i, a] - rs[:, i, b]) == np.sign(r[i, a] - r[i, b]))]
    return {"stable_decided": round(len(stable) / max(len(pairs), 1), 3),
            "stable_wrong_sign": round(sum(gap < 0 for gap in stable) / max(len(pairs), 1), 3),
            "auc": round(pair_metrics(cases, 0.0)["auc"], 3), "decided": round(at["decided"], 3),
            "wrong_sign": round(at["wrong_sign"], 3), "pairs": at["pairs"],
            "reward_sd_within": round(float(r.std(1).mean()), 4), "reward_sd_between": round(float(r.mean(1).std()), 4)}


def read(scorer: Scorer, engine: Engine, run: dict[str, Any], k: int, max_tokens: int, cache: Path) -> dict[str, Any]:
    """The run's judged answers and sampled groups with their features, cached in `cache` (the
    features are minutes of forward passes; the fits that read them are not)."""
    path = cache / f"{Path(run['run']).stem}-k{k}-{max_tokens}.npz"
    if path.is_file():
        z = np.load(path, allow_pickle=True)
        return {name: z[name] for name in z.files}
    sc = CONTROL if run["scenario"] == "control" else SCENARIOS[run["scenario"]]
    evidence, rows = labeled(run)
    prompts = list(dict.fromkeys(t["prompt"] for t in run["turns"]))
    answers = groups(engine, prompts, k, run["seed"], max_tokens)
    z = {"ok": np.array([a for _, _, a in rows]),
         "x": np.array([scorer.probe(evidence, q, a) for q, a, _ in rows]),  # (n, 1 + n_embd)
         "x0": np.array([scorer.probe(evidence, q, NO_ANSWER) for q, _, _ in rows]),
         "verdicts": np.array([[accepts(sc, p, a) for a in g] for p, g in zip(prompts, answers)]),  # (groups, k)
         "gx": np.array([scorer.probe(evidence, p, a) for p, g in zip(prompts, answers) for a in g]),  # (groups·k, d)
         "gx0": np.repeat(np.array([scorer.probe(evidence, p, NO_ANSWER) for p in prompts]), k, axis=0),
         "answers": np.array(answers, dtype=object), "evidence": np.array(evidence, dtype=object)}
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, **z)
    return z


def study(scorer: Scorer, engine: Engine, run: dict[str, Any], k: int, max_tokens: int, cache: Path) -> dict[str, Any]:
    z = read(scorer, engine, run, k, max_tokens, cache)
    ok, x, x0, gx, gx0 = z["ok"], z["x"], z["x0"], z["gx"], z["gx0"]
    verdicts = z["verdicts"].tolist()
    evidence = z["evidence"].tolist()
    out: dict[str, Any] = {"run": run["run"], "scenario": run["scenario"], "seed": run["seed"], "judged": len(ok),
                           "accepted": int(ok.sum()), "evidence": evidence, "groups": len(verdicts),
                           "group_pass_rate": round(float(np.mean(verdicts)), 3),
                           "mixed_groups": sum(0 < sum(v) < k for v in verdicts)}
    y = np.where(ok, 1, -1)
    for name, fx, fg in (("as_read", x, gx), ("question_out", x - x0, gx - gx0)):
        cv, need = signal(fx, ok)
        model = fit(fx, y, plain=PLAIN, components=min(COMPONENTS, len(ok) - 1))
        f = folds(y)
        others = [fit(fx[f != i], y[f != i], plain=PLAIN, components=min(COMPONENTS, int((f != i).sum()) - 1))
                  for i in range(FOLDS)]
        out[name] = {"cv_auc": round(cv, 3), "needed_auc": round(need, 3), "passes": bool(cv >= need),
                     "groups": ranked(model, fg, verdicts, others)}
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path)
    p.add_argument("--extract", type=Path, nargs="+", help="cached loop runs to take the histories from; runs nothing")
    p.add_argument("--k", type=int, default=4, help="answers sampled per conversation question")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", default="", help="only the histories whose run name contains this (e.g. control)")
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "clawd-within-question")
    args = p.parse_args()
    if args.extract:
        HISTORIES.parent.mkdir(parents=True, exist_ok=True)
        HISTORIES.write_text(json.dumps(extract(args.extract), indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {HISTORIES.relative_to(ROOT)}")
        return
    if args.model is None:
        p.error("--model is needed")
    settings = Settings(home=Path(tempfile.mkdtemp(prefix="clawd-within-question-")))
    engine = Engine(args.model, n_ctx=4096, threads=args.threads)
    scorer = Scorer(Judge(engine, None, settings), settings.home / "judge", MAX_WRONG_SIGN)
    runs = [study(scorer, engine, r, args.k, args.max_tokens, args.cache) for r in json.loads(HISTORIES.read_text())
            if args.runs in r["run"]]
    path = ROOT / "bench" / "results" / f"scorer-within-question-{args.model.stem}.json"
    path.write_text(json.dumps({"model": args.model.name, "k": args.k, "margin": MARGIN, "runs": runs}, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
