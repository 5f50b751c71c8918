"""What bench/personalize.py reports: a line per scoring point while it runs, the per-run summaries
committed under bench/results/, the table at the end and the plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from personalize_scenarios import THANKS

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def point_text(point: dict[str, Any], base: dict[str, Any]) -> str:
    ev = point["eval"]
    return (f"held-out adherence {ev['adherence']:.2f} (degenerate {ev['degenerate']:.2f}, wrong {ev['wrong']:.2f}), "
            f"probes {ev['probe_accuracy']:.2f} ({ev['probe_accuracy'] - base['probe_accuracy']:+.2f} vs base, "
            f"degenerate {ev['probe_degenerate']:.2f})")


def served_model(result: dict[str, Any], run: dict[str, Any]) -> str:
    """The model file a run's daemon served (recorded from its status; older results have only
    the --model flag, and without it the daemon served its default, not necessarily SmolLM2)."""
    if run.get("model"):
        return run["model"]
    return Path(result["config"]["model"]).name if result["config"]["model"] else "the daemon's default"


def summary(result: dict[str, Any], scenario: str, key: str) -> dict[str, Any]:
    """One run's numbers without its answers: what bench/results/ keeps."""
    sc, run = result["scenarios"][scenario], result["scenarios"][scenario]["runs"][key]
    base = run["curve"][0]["eval"]
    turns = run["turns"]
    return {
        "scenario": scenario, "preference": sc["preference"], "method": run["method"], "seed": run["seed"],
        "model": served_model(result, run),
        "settings": run.get("settings"), "loop_flags": result["loop_flags"], "daemon_args": result["config"]["daemon_args"],
        "threads": result["config"]["threads"], "heldout_prompts": sc["heldout"], "probes": sc["probes"],
        "curve": [{"feedback_turns": p["feedback_turns"], "adapter": p["adapter"],
                   **{k: round(p["eval"][k], 3) for k in ("adherence", "degenerate", "wrong", "probe_accuracy")},
                   "probe_delta": round(p["eval"]["probe_accuracy"] - base["probe_accuracy"], 3),
                   "probe_degenerate": round(p["eval"]["probe_degenerate"], 3),
                   "non_answers": p["eval"]["non_answers"]} for p in run["curve"]],
        "conversation": {"answers": len(turns), "thanked": sum(t["reaction"] in THANKS for t in turns),
                         "non_answers": sum(t["non_answer"] is not None for t in turns),
                         # > 0 only in runs from before the simulated user checked for non-answers
                         "non_answers_thanked": sum(t["non_answer"] is not None and t["reaction"] in THANKS for t in turns)},
        "judge": run.get("judge"),
        "rounds": [{"feedback_turns": r["feedback_turns"],
                    "train": r["train"] and {k: r["train"].get(k) for k in ("samples", "steps", "mean_reward", "opd_samples")},
                    "published": bool(r["publish"] and r["publish"].get("passed")),
                    "rejected": r["publish"] and r["publish"].get("error")} for r in run["rounds"]],
        "seconds": run["seconds"],
        # a run recorded before today's checkers, its answers re-graded by --rescore
        **({"rescored_from": result["rescored_from"]} if "rescored_from" in result else {}),
    }


def write_summaries(result: dict[str, Any], only: tuple[str, str] | None = None) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    for scenario, sc in result["scenarios"].items():
        for key in sc["runs"]:
            if only in (None, (scenario, key)):
                method, seed = key.split("/")
                turns = result["config"].get("turns")
                path = RESULTS / f"personalize-{scenario}-{method}-seed{seed}-{turns}turns.json"
                path.write_text(json.dumps(summary(result, scenario, key), indent=1, ensure_ascii=False) + "\n")
                print(f"wrote {path.relative_to(ROOT)}")


def print_summary(result: dict[str, Any]) -> None:
    print("\nheld-out adherence against feedback turns: adherence [degenerate share] (probe accuracy, change vs base)")
    for name, sc in result["scenarios"].items():
        print(f"\n{name}: {sc['preference']} ({sc['heldout']} held-out prompts, {sc['probes']} probes)")
        for key, run in sc["runs"].items():
            base = run["curve"][0]["eval"]
            curve = "  ".join(f"{p['feedback_turns']}: {p['eval']['adherence']:.2f} [{p['eval']['degenerate']:.2f}] "
                              f"({p['eval']['probe_accuracy']:.2f}, {p['eval']['probe_accuracy'] - base['probe_accuracy']:+.2f})"
                              for p in run["curve"])
            line = f"  {key:<12}{curve}"
            turns = run["turns"]
            line += f"; conversation: {sum(t['non_answer'] is not None for t in turns)} of {len(turns)} answers were no answer"
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
        runs = result["scenarios"][name]["runs"]
        turns = max([int(result["config"]["turns"])] + [p["feedback_turns"] for r in runs.values() for p in r["curve"]])
        for key, run in runs.items():
            xs = [p["feedback_turns"] for p in run["curve"]]
            line, = ax.plot(xs, [p["eval"]["adherence"] for p in run["curve"]], "o-", label=key)
            ax.plot(xs, [p["eval"]["degenerate"] for p in run["curve"]], "--", marker="s", color=line.get_color(),
                    label=f"{key}: degenerate")
            ax.plot(xs, [p["eval"]["probe_accuracy"] for p in run["curve"]], ":", marker="x", color=line.get_color(),
                    label=f"{key}: probes")
        ax.set_title(f"{name}: {result['scenarios'][name]['preference']}", fontsize=9)
        ax.set_xlabel("feedback turns")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlim(-0.5, turns + 0.5)
    axes[0][0].set_ylabel("held-out adherence (degenerate dashed, probes dotted)")
    axes[0][-1].legend(fontsize=8)
    model = served_model(result, next((r for s in result["scenarios"].values() for r in s["runs"].values()), {}))
    fig.suptitle(f"clawd personalize — {model}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
