"""The work `clawd train --once` and `clawd judge --once` do in the CLI's own process: with
`--offline`, or when no daemon answers the ask. The daemon runs the same services when it is up.
"""

from __future__ import annotations

import logging
import sys

from .config import Settings, ensure_home
from .store.records import TrainEvent


def train_here(settings: Settings) -> None:
    """One training round in the foreground, with a progress bar, then what it wrote."""
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .train.loop import TrainError, run_round

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn()) as bar:
        task = bar.add_task("loading model", total=None, info="")

        def progress(e: TrainEvent) -> None:
            if e.event == "start":
                bar.update(task, description=f"run {e.run_id}: {e.detail['samples']} turns", total=e.steps,
                           completed=e.step, info=f"{e.detail['backend']} on {e.detail['device']}")
            elif e.event == "step":
                bar.update(task, completed=e.step, info=f"loss {e.loss:+.4f}")

        try:
            result = run_round(settings, progress=progress)
        except TrainError as e:
            sys.exit(str(e))
    if result is None:
        what = "no scored GRPO groups (the daemon samples them in idle time)" if settings.train_method == "grpo" else \
            f"no judged main turns with a {settings.train_method} signal that a finished run has not used, nor scored GRPO groups"
        sys.exit(f"nothing to train: {what} (`clawd status` shows how many are judged and sampled)")
    m = result.metrics
    turns = m['samples'] - m['group_answers']
    reward = f", mean reward {m['mean_reward']:+.2f}" if m['mean_reward'] is not None else ""
    groups = f", {m['groups']} GRPO groups ({m['group_answers']} answers)" if m['groups'] else ""
    print(f"adapter {result.version:04d} written to {result.path}: {turns} turns{reward}{groups}, "
          f"loss {m['losses'][0]:+.4f} → {m['losses'][-1]:+.4f} in {m['seconds']:.0f}s. "
          "`clawd publish` gates it and puts it live.")


def judge_here(settings: Settings) -> None:
    """Judge the backlog in this process with a small engine of its own, with a progress bar."""
    from rich.logging import RichHandler
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .engine.engine import Engine
    from .judge.judge import Judge
    from .store.store import Store

    ensure_home(settings.home)
    store = Store(settings.home / "clawd.db")
    progress = Progress(TextColumn("judging"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"))
    logging.basicConfig(level=settings.log_level.upper(), format="%(message)s", force=True,
                        handlers=[RichHandler(console=progress.console, show_path=False)])
    # The serving context goes unused here: keep it small. The judge's own context is sized by
    # judge_budget_tokens.
    engine = Engine(settings.resolved_model(), n_ctx=512, threads=settings.threads, batch=settings.batch,
                    gpu_layers=settings.gpu_layers)
    judge = Judge(engine, store, settings)
    total = judge.backlog_size()
    scores = {1: 0, 0: 0, -1: 0}

    def judged(turn, j) -> None:
        scores[j.score] += 1
        progress.update(task, advance=1, description=f"+1: {scores[1]}  0: {scores[0]}  -1: {scores[-1]}")

    with progress:
        task = progress.add_task("", total=total)
        done = judge.run_backlog(on_judged=judged)
    print(f"judged {done} turn(s) by {settings.judge_method} with {engine.model_path.name}; "
          f"{judge.backlog_size()} left")
