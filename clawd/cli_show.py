"""What `clawd status` and `clawd adapters` print: the daemon's JSON, for a person."""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from .store.answers import AdaptersState, Status, TrainingStatus
from .store.records import TrainEvent


def status(st: Status) -> None:
    t = Table(show_header=False, box=None)
    t.add_row("status", f"[green]up[/green] {ago(st.uptime_s)}; now {st.doing} ({ago(st.doing_since_s)}), "
                        f"{st.in_flight} request(s) in flight")
    t.add_row("model", f"{st.model.id} — {st.model.path}")
    t.add_row("context", f"{st.model.context} tokens (trained {st.model.trained_context}) on {st.device}")
    a = st.adapter
    t.add_row("adapter", f"v{a.version}, published {ago(a.age_s)} ago" if a else "none (base weights)")
    c = st.turns
    t.add_row("turns", f"{c['turns']} recorded: {c['main']} main, {c['side']} side, {c['aborted']} aborted; "
                       f"{c['with_next_state']} with a next state, {c['judged']} judged, {c['trained']} trained on; "
                       f"{c['sessions']} sessions")
    t.add_row("scores", sparkline(st.recent_scores) or "no judged turns yet")
    t.add_row("judge", judge_line(st.judge))
    tr = st.training
    t.add_row("training", training_line(tr, st.grpo))
    if st.grpo:
        t.add_row("GRPO", grpo_line(st.grpo))
    t.add_row("backend", f"{tr.backend or 'none yet'} (train_backend={tr.backend_setting})")
    if tr.memory_plan:
        t.add_row("memory plan", f"{tr.memory_plan['decision']}: {tr.memory_plan['reason']}")
    if tr.progress and st.doing.startswith("training"):
        t.add_row("progress", progress_line(tr.progress))
    t.add_row("prompt cache", cache_line(st.prompt_cache))
    t.add_row("memory", f"{st.memory_mb:.0f} MB")
    t.add_row("data", st.home)
    Console().print(t)


def training_line(tr: TrainingStatus, grpo: dict | None) -> str:
    """The last round, and what the next one waits for: judged turns, with GRPO's scored groups
    counting toward the same round (scheduler: ready/train_batch + groups/grpo_groups >= 1)."""
    last = tr.last
    done = f"last round {last.event} {ago(time.time() - (last.at or time.time()))} ago; " if last else "no round yet; "
    if grpo and grpo["k"] >= 2 and not tr.batch:  # grpo: judged turns are evidence, groups train
        need = f"{grpo['ready']}/{grpo['wanted']} groups are ready"
    elif grpo and grpo["k"] >= 2:
        need = f"{tr.ready}/{tr.batch} turns + {grpo['ready']}/{grpo['wanted']} groups make a whole round"
    else:
        need = f"{tr.ready}/{tr.batch} turns are ready"
    return (done + f"next when {need} and idle {tr.idle_seconds:.0f}s" + ("" if tr.auto else " (auto_learn is off)")
            + (" — [yellow]learning paused[/yellow] (dashboard, POST /v1/clawd/learning/resume)" if tr.paused else ""))


def progress_line(e: TrainEvent) -> str:
    """The round under way, as far as its latest event says."""
    if e.event == "step":
        return f"run {e.run_id}: step {e.step}/{e.steps}, loss {e.loss:+.4f}"
    if e.event == "start":
        return f"run {e.run_id}: {e.detail.get('samples')} turns scored, {e.steps} steps to go from {e.step}"
    return f"run {e.run_id}: {e.event}" if e.run_id is not None else e.event


def grpo_line(g: dict) -> str:
    """Groups sampled in idle time, the scorer's mode, and the last round's advantage spread."""
    if g["k"] < 2:
        return "off (grpo_k < 2)"
    s, c = g["scorer"], g["groups"]
    if s["mode"] in ("measuring", "not measured yet"):
        p = s.get("progress") or {}
        scorer = s["mode"] + (f" ({p['measuring']}/{p['of']} labeled cases)" if p else "")
    else:
        m = s["measured"]
        scorer = (f"{'trusted' if s['mode'] == 'trusted' else '[yellow]untrusted[/yellow], trains nothing'} "
                  f"(margin {s['margin']:.2f}: {m['decided']:.0%} of pairs decided, {m['wrong_sign']:.1%} wrong way; "
                  f"AUC {m['auc']:.2f}, length alone {s['length_auc']:.2f})")
    v, last = g["verdicts"], g.get("last_round")
    wait = (f"; waiting for the user's verdicts ({v['accepted']} accepted, {v['rejected']} rejected of "
            f"{v['needed']} each)" if min(v["accepted"], v["rejected"]) < v["needed"] else "")
    if not wait and v.get("cv_auc") is not None and v["cv_auc"] < v["needed_auc"]:
        wait = (f"; [yellow]the fit does not see the user's verdicts yet[/yellow] (AUC {v['cv_auc']:.2f}, "
                f"{v['needed_auc']:.2f} needed): no groups until their next one")
    spread = (f"; last round {last['groups']} groups, mean |advantage| {last['advantage_mean_abs']:.2f}" if last else "")
    return (f"{c['sampled']} groups sampled, {c['hindsight']} hindsight pairs, {c['scored']} scored, "
            f"{c['trained']} trained on; {g['ready']}/{g['wanted']} ready; scorer {scorer}{wait}{spread}")


def judge_line(j: dict) -> str:
    """How far the loop trusts its judge, with the measured figures."""
    if j["mode"] in ("calibrating", "not measured yet"):
        p = j.get("progress") or {}
        return f"{j['mode']}" + (f" ({p['calibrating']}/{p['of']} labeled cases)" if p else "") + \
            "; until then nothing is judged"
    cv = j["cv"]
    figures = (f"cross-validated on {j['cases']} labeled cases: accuracy {cv['accuracy']:.2f}, "
               f"wrong-sign {cv['wrong_sign']:.1%}, decided {cv['decided']:.0%}")
    if j["mode"] == "trusted":
        return f"trusted, verdicts past {j['threshold']:.2f} confidence ({figures})"
    if j["mode"] == "confident_only":
        return (f"[yellow]not trusted[/yellow] (accuracy {j['cv_trusted']['accuracy']:.2f} < the minimum): learns from "
                f"explicit feedback and verdicts past {j['threshold']:.2f} confidence only ({figures})")
    return (f"[red]not trusted[/red] (accuracy {j['cv_trusted']['accuracy']:.2f}): learns from explicit feedback only "
            "(POST /v1/feedback)")


def cache_line(c: dict | None) -> str:
    if c is None:
        return "off (prompt_cache_mb 0): only the context's own prefix is reused"
    mib = 2**20
    h = c["hits"]
    return (f"{c['entries']} prompt(s), {c['bytes'] / mib:.0f} of {c['budget_bytes'] / mib:.0f} MiB in memory; "
            f"{c['disk_entries']} on disk, {c['disk_bytes'] / mib:.0f} of {c['disk_budget_bytes'] / mib:.0f} MiB; "
            f"prefix from the context {h['live']}×, memory {h['memory']}×, disk {h['disk']}×, none {c['misses']}×")


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def sparkline(scores: list[int]) -> str:
    """−1 / 0 / +1 as ▁ ▄ █, newest last, with the mean."""
    if not scores:
        return ""
    bars = "".join({-1: "[red]▁[/red]", 0: "▄", 1: "[green]█[/green]"}[s] for s in scores)
    return f"{bars}  mean {sum(scores) / len(scores):+.2f} over the last {len(scores)}"


def adapters(state: AdaptersState, as_json: bool, where: str) -> None:
    if as_json:
        print(json.dumps(asdict(state), indent=2))
        return
    if not state.adapters:
        print(f"no adapters yet ({where}); training makes them and `clawd publish` puts one live")
        return
    print(f"{'':2}{'VERSION':<8}{'STATUS':<10}{'PARENT':<8}{'CREATED':<18}GATE")
    for a in state.adapters:
        gate = a.gate or {}
        drop = (gate.get("replay") or {}).get("drop")
        # one reason a line, under this column; a pass shows what was measured
        note = ("passed" + (f", replay drop {drop:+.3f}" if drop is not None else "")
                + (f"; {gate['summary']}" if gate.get("summary") else "")) if gate.get("passed") else \
            ("\n" + " " * 46).join(gate.get("reasons", [])) or "-"
        created = datetime.datetime.fromtimestamp(a.created).strftime("%Y-%m-%d %H:%M")
        print(f"{'*' if a.current else '':2}{a.version:<8}{a.status:<10}{str(a.parent or '-'):<8}"
              f"{created:<18}{note}")
    print(f"\n* live: {state.current if state.current is not None else 'none (base weights)'} ({where})")
