"""What bench/personalize/run.py reports: a line per scoring point while it runs, the per-run summaries
committed under bench/results/, the table at the end and the plot.

Runs keep every answer ungraded; grades come from today's checkers whenever a report is made
(personalize_eval.grade). A run's summary has one block per graded scenario (the control user's
runs grade every scenario) with the four columns: base, told, oracle (the run's seed) and loop.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bench.personalize.evaluate import grade
from bench.personalize.measures import interval, paired, share_of_oracle
from bench.personalize.scenarios import CONTROL, SCENARIOS, THANKS, USERS, Scenario

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
# The publish gate's MIN_MARGIN (clawd/publish/gate.py, equal by a test), not imported: the gate
# loads llama.cpp, and a report needs none of it.
MIN_MARGIN = 1.0


def point_text(point: dict[str, Any], base: dict[str, Any] | None) -> str:
    """One graded scoring point in a line (`point["eval"]` graded; `base` graded or None)."""
    ev = point["eval"]
    delta = f" ({ev['probe_accuracy'] - base['probe_accuracy']:+.2f} vs base)" if base else ""
    return (f"held-out adherence {ev['adherence']:.2f} of {len(ev['heldout'])} (degenerate {ev['degenerate']:.2f}, "
            f"wrong {ev['wrong']:.2f}), probes {ev['probe_accuracy']:.2f}{delta}")


def served_text(ev: dict[str, Any]) -> str:
    """Graded `served_answers` in a line: held-out answers only, no probes."""
    return (f"form {ev['form']:.2f}, adherence {ev['adherence']:.2f} of {len(ev['heldout'])} "
            f"(degenerate {ev['degenerate']:.2f}, wrong {ev['wrong']:.2f})")


def served_model(result: dict[str, Any], run: dict[str, Any]) -> str:
    """The model file a run's daemon served (recorded from its status; older results have only
    the --model flag, and without it the daemon served its default, not necessarily SmolLM2)."""
    if run.get("model"):
        return run["model"]
    return Path(result["config"]["model"]).name if result["config"]["model"] else "the daemon's default"


def _ci(x: tuple[float, float, float]) -> list[float]:
    return [round(v, 3) for v in x]


def column(sc: Scenario, ev: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """One column's figures for scenario `sc`, against the base on the same prompts: adherence and its
    change with bootstrap 95% intervals [mean, low, high], the degenerate and wrong shares, the mean
    continuous measures, probe accuracy and the probes lost (right on the base, wrong here) and gained.
    Beside adherence, the same two figures for the form alone (the preference met, content unchecked)."""
    g, b = grade(sc, ev), grade(sc, base)
    ok = [float(h["ok"]) for h in g["heldout"]]
    base_ok = {h["prompt"]: float(h["ok"]) for h in b["heldout"]}
    form = [float(h["form"]) for h in g["heldout"]]
    base_form = {h["prompt"]: float(h["form"]) for h in b["heldout"]}
    right = {p["question"]: p["ok"] for p in g["probes"]}
    base_right = {p["question"]: p["ok"] for p in b["probes"]}
    return {"adherence": _ci(interval(ok)),
            "gain": _ci(paired(ok, [base_ok[h["prompt"]] for h in g["heldout"]])),
            "form": _ci(interval(form)), "form_gain": _ci(paired(form, [base_form[h["prompt"]] for h in g["heldout"]])),
            "degenerate": round(g["degenerate"], 3), "wrong": round(g["wrong"], 3),
            "non_answers": g["non_answers"], "measures": {k: round(v, 3) for k, v in g["measures"].items()},
            "probe_accuracy": round(g["probe_accuracy"], 3), "probe_degenerate": round(g["probe_degenerate"], 3),
            "probes_lost": sorted(q for q, r in base_right.items() if r and not right.get(q, False)),
            "probes_gained": sorted(q for q, r in right.items() if r and not base_right.get(q, False)),
            **near_flips(g["probes"], b["probes"])}


def served_column(sc: Scenario, ev: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """`column`'s held-out figures for `served_answers` (no probes), against the base's as served."""
    c = column(sc, ev, base)
    return {k: c[k] for k in ("form", "form_gain", "adherence", "gain", "degenerate", "wrong")} | {
        "words": c["measures"].get("words")}


def near_flips(probes: list[dict[str, Any]], base: list[dict[str, Any]]) -> dict[str, Any]:
    """Probe margins against the base (personalize_eval.margin; runs from before margins have none):
    the mean margin over the probes the base answers right, the probes still right whose margin
    fell to under half the base's (the near-ties that flip next: 34 + 58 answered 82), and the lost
    probes the base itself had by less than the gate's MIN_MARGIN: coin tosses that any change of
    weights may flip (6 of the 37 Qwen2.5-Coder-0.5B answers right, water's boiling point at 0.37)."""
    now = {p["question"]: p.get("margin") for p in probes}
    right = {p["question"]: p["ok"] for p in probes}
    was = {p["question"]: p.get("margin") for p in base if p["ok"] and p.get("margin") is not None}
    if not was:
        return {}
    kept = [q for q in was if now.get(q) is not None]
    return {"margin_mean": round(sum(now[q] for q in kept) / len(kept), 3) if kept else None,
            "margin_mean_base": round(sum(was.values()) / len(was), 3),
            "near_flips": sorted(q for q in kept if 0 <= now[q] < was[q] / 2),
            "lost_coin_tosses": sorted(q for q in was if not right.get(q, True) and was[q] < MIN_MARGIN)}


def reference_columns(g: Scenario, ref: dict[str, Any], base: dict[str, Any], seed: int) -> dict[str, Any]:
    """base, and told and seed's oracle where they were measured, graded for `g` against `base`."""
    cols = {"base": column(g, base, base)}
    if ref.get("told"):
        cols["told"] = column(g, ref["told"], base)
    oracle = ref.get(f"oracle/{seed}")
    if oracle:
        cols["oracle"] = column(g, oracle["eval"], base) | {
            "kept": oracle["kept"], "samples": oracle["samples"], "adapter": oracle["adapter"]}
    return cols


def summary(result: dict[str, Any], scenario: str, key: str) -> dict[str, Any]:
    """One run's numbers without its answers: what bench/results/ keeps."""
    sc, run = result["scenarios"][scenario], result["scenarios"][scenario]["runs"][key]
    ref = sc.get("reference", {})
    base = ref.get("base") or run["curve"][0]["eval"]
    last = run["curve"][-1]
    graded = [SCENARIOS.get(n) or CONTROL for n in sc.get("graded", [scenario])]
    blocks = {}
    for g in graded:
        cols = reference_columns(g, ref, base, run["seed"]) | {"loop": column(g, last["eval"], base)}
        if "oracle" in cols:
            cols["loop"]["share_of_oracle"] = share_of_oracle(cols["loop"]["gain"][0], cols["oracle"]["gain"][0])
        if ref.get("served") and last.get("served"):  # runs from stop 62 on
            cols["base"]["served"] = served_column(g, ref["served"], ref["served"])
            cols["loop"]["served"] = served_column(g, last["served"], ref["served"])
        blocks[g.name] = cols
    turns = run["turns"]
    return {
        "scenario": scenario, "preference": sc["preference"], "method": run["method"], "seed": run["seed"], "users": USERS,
        "model": served_model(result, run), "settings": run.get("settings"), "loop_flags": result["loop_flags"],
        "daemon_args": result["config"]["daemon_args"], "threads": result["config"]["threads"],
        "heldout_prompts": sc["heldout"], "probes": sc["probes"], "feedback_turns": last["feedback_turns"],
        "adapter": last["adapter"], "columns": blocks,
        "curve": [_point(graded[0], p) for p in run["curve"]],
        "conversation": {"answers": len(turns), "thanked": sum(t["reaction"] in THANKS for t in turns),
                         "non_answers": sum(t["non_answer"] is not None for t in turns),
                         # > 0 only in runs from before the simulated user checked for non-answers
                         "non_answers_thanked": sum(t["non_answer"] is not None and t["reaction"] in THANKS for t in turns)},
        "judge": run.get("judge"),
        # GRPO: its scorer against the checker in the daemon's groups; idle seconds by kind (daemon log)
        "scorer": run.get("scorer"), "idle": run.get("idle"),
        "code": run.get("code"),  # the daemon's source digest and commit (runs from 2026-12-04 evening on)
        "rounds": [{"feedback_turns": r["feedback_turns"],
                    "train": r["train"] and {k: r["train"].get(k) for k in ("samples", "steps", "mean_reward", "opd_samples")},
                    "published": bool(r["publish"] and r["publish"].get("passed")),
                    "rejected": r["publish"] and r["publish"].get("error")} for r in run["rounds"]],
        "seconds": run["seconds"],
        # a run recorded before today's checkers, its answers re-graded by --rescore
        **({"rescored_from": result["rescored_from"]} if "rescored_from" in result else {}),
    }


def oracle_summary(result: dict[str, Any], scenario: str, seed: int) -> dict[str, Any]:
    """The reference columns of one oracle seed without a loop run (an oracle sweep point): base,
    told when measured, and the oracle, graded as `summary` grades them."""
    sc = result["scenarios"][scenario]
    ref = sc["reference"]
    oracle = ref[f"oracle/{seed}"]
    cols = reference_columns(SCENARIOS[scenario], ref, ref["base"], seed)
    return {"scenario": scenario, "preference": sc["preference"], "seed": seed, "users": USERS,
            "model": Path(result["config"]["model"]).name,
            "daemon_args": result["config"]["daemon_args"], "threads": result["config"]["threads"],
            "oracle_settings": oracle["settings"], "oracle_k": oracle["k"], "oracle_pass_rate": oracle["pass_rate"],
            # records from before the labels and every round's adapter were kept have neither
            **({"oracle_labels": {"plus": oracle["labels"].count(1), "minus": oracle["labels"].count(-1)}}
               if "labels" in oracle else {"oracle_contrasted": oracle["contrasted"]} if "contrasted" in oracle else {}),
            "oracle_rounds": oracle["rounds"], **({"oracle_adapters": oracle["adapters"]} if "adapters" in oracle else {}),
            "oracle_seconds": oracle["seconds"],
            "heldout_prompts": sc["heldout"], "probes": sc["probes"], "columns": cols}


def write_oracle_summaries(result: dict[str, Any]) -> None:
    """bench/results/personalize-SCENARIO-oracle-seedN[-DAEMON-ARGS][-usersN].json for every oracle seed run."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    tag = args_tag(result)
    for labels in ("pairs", "contrast"):  # --oracle-pairs; --oracle-contrast, its predecessor, in old results
        if result["config"].get(f"oracle_{labels}"):
            tag = "-".join([labels, *filter(None, [tag])])
    if USERS > 1:  # the oracle of the users before never shares a name with theirs
        tag = "-".join(filter(None, [tag, f"users{USERS}"]))
    for scenario, sc in result["scenarios"].items():
        for key in sc.get("reference", {}):
            if key.startswith("oracle/") and "base" in sc["reference"]:
                seed = int(key.split("/")[1])
                path = RESULTS / f"personalize-{scenario}-oracle-seed{seed}{'-' + tag if tag else ''}.json"
                path.write_text(json.dumps(oracle_summary(result, scenario, seed), indent=1, ensure_ascii=False) + "\n")
                print(f"wrote {path.relative_to(ROOT)}")


def _point(sc: Scenario, point: dict[str, Any]) -> dict[str, Any]:
    g = grade(sc, point["eval"])
    return {"feedback_turns": point["feedback_turns"], "adapter": point["adapter"],
            **{k: round(g[k], 3) for k in ("adherence", "degenerate", "wrong", "probe_accuracy")},
            "non_answers": g["non_answers"]}


def args_tag(result: dict[str, Any]) -> str:
    """--daemon-args as a file-name part ("" at the daemon's defaults): a run at other settings never
    overwrites the defaults' summary."""
    tag = re.sub(r"[^A-Za-z0-9.]+", "-", result["config"].get("daemon_args") or "").strip("-")
    idle = result["config"].get("idle_limit")
    return "-".join(t for t in (tag, f"idle-{idle:.0f}s" if idle is not None else "") if t)


def write_summaries(result: dict[str, Any], only: tuple[str, str] | None = None) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    for scenario, sc in result["scenarios"].items():
        for key in sc["runs"]:
            if only in (None, (scenario, key)):
                method, seed = key.split("/")
                turns = result["config"].get("turns")
                tag = args_tag(result)
                path = RESULTS / f"personalize-{scenario}-{method}-seed{seed}-{turns}turns{'-' + tag if tag else ''}.json"
                path.write_text(json.dumps(summary(result, scenario, key), indent=1, ensure_ascii=False) + "\n")
                print(f"wrote {path.relative_to(ROOT)}")


def _fmt(ci: list[float]) -> str:
    return f"{ci[0]:.2f} [{ci[1]:.2f}, {ci[2]:.2f}]"


def print_summary(result: dict[str, Any]) -> None:
    print("\nheld-out adherence [bootstrap 95% interval], change vs base on the same prompts, probes lost")
    for name, sc in result["scenarios"].items():
        print(f"\n{name}: {sc['preference']} ({sc['heldout']} held-out prompts, {sc['probes']} probes)")
        for key in sc["runs"]:
            s = summary(result, name, key)
            for g, cols in s["columns"].items():
                parts = []
                for col in ("base", "told", "oracle", "loop"):
                    if col in cols:
                        c = cols[col]
                        tosses = f" ({len(c['lost_coin_tosses'])} by the base under {MIN_MARGIN:g} nat)" if c.get("lost_coin_tosses") else ""
                        lost = f", {len(c['probes_lost'])} probes lost{tosses}" if col != "base" else ""
                        gain = f" ({c['gain'][0]:+.2f} [{c['gain'][1]:+.2f}, {c['gain'][2]:+.2f}])" if col != "base" else ""
                        parts.append(f"{col} {_fmt(c['adherence'])}{gain}{lost}, form {c['form'][0]:.2f}, "
                                     f"wrong {c['wrong']:.2f}, degenerate {c['degenerate']:.2f}")
                share = cols["loop"].get("share_of_oracle")
                tail = f"; loop/oracle {share:.2f}" if share is not None else ""
                print(f"  {key} {g}: " + "; ".join(parts) + tail)
            j = s["judge"]
            if j:
                print(f"  {key}: judge agrees with the user on {_pct(j['agreement'])} of {j['judged']} turns "
                      f"({_pct(j['agreement_when_decided'])} when not 0); {s['seconds'] / 60:.0f} min")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def plot(result: dict[str, Any], path: Path) -> None:
    """Per scenario: each run's held-out adherence against feedback turns, and the reference columns
    as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, sc in result["scenarios"].items() if sc["runs"]]
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(max(6.0, 4.2 * len(names)), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        sc = result["scenarios"][name]
        g = SCENARIOS.get(name) or CONTROL
        for key, run in sc["runs"].items():
            xs = [p["feedback_turns"] for p in run["curve"]]
            ax.plot(xs, [grade(g, p["eval"])["adherence"] for p in run["curve"]], "o-", label=key)
        for col, style in (("told", ":"), ("oracle/0", "--")):
            if sc["reference"].get(col):
                ev = sc["reference"][col]
                ax.axhline(grade(g, ev.get("eval", ev))["adherence"], linestyle=style, color="gray", label=col)
        ax.set_title(f"{name}: {sc['preference']}", fontsize=9)
        ax.set_xlabel("feedback turns")
        ax.set_ylim(-0.05, 1.05)
    axes[0][0].set_ylabel("held-out adherence")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
