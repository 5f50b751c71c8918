"""The trainer as a child process the daemon can start, pause, resume and stop (design §2).

A crash or an out-of-memory in training never takes serving down, and the child's memory (the
model, CUDA's included) goes back to the system when it exits. Pausing takes effect between
micro-steps (one sample's forward and backward); stopping keeps the last step's checkpoint,
which the next round resumes. This module imports no torch: the daemon stays light.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import signal
import sys
from pathlib import Path
from typing import Any

from ..config import Settings
from ..store.records import TrainEvent

log = logging.getLogger("clawd.train")


def _die_with_parent(parent: int) -> None:
    """A daemon killed with SIGKILL cannot stop its trainer: on Linux the kernel does it, so no
    orphan keeps the CPU and the round's lock (the next daemon resumes from the last checkpoint)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the line above took effect
        os._exit(1)


def return_freed_memory() -> None:
    """Make this process's resident memory follow its live tensors (glibc). glibc serves a large
    block from its heap once one of that size was freed (its mmap threshold climbs to 32 MiB) and
    keeps freed heap memory: on the bundled model a 2048-token micro-step's tensors grew the
    process by 0.23 GB and its RSS by 2 GB, past what the memory plan (memory.py) can bound.
    Blocks of 1 MiB and more then come from mmap and go back to the system when freed."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
        except AttributeError:  # a libc without mallopt (musl)
            pass


def _child(settings: dict[str, Any], serving: dict[str, Any] | None, template: dict[str, Any] | None, go, stop, events,
           parent: int) -> None:
    _die_with_parent(parent)
    return_freed_memory()
    os.environ["TQDM_DISABLE"] = "1"  # the library's bars would fill the daemon's log; progress goes as events
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if (Path(settings["home"]) / "clawd.log").is_file():  # the daemon's log, appended to as the daemon does
        handlers.append(logging.FileHandler(Path(settings["home"]) / "clawd.log"))
    logging.basicConfig(level=str(settings.get("log_level", "INFO")).upper(), handlers=handlers,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the daemon's terminal: the parent decides
    os.nice(10)  # a request arriving mid micro-step still gets the CPU first (pause waits for the step's end)
    from ..engine.chat_template import ChatTemplate
    from .loop import Control, NoRoom, Stopped, run_round
    from .memory import Serving

    try:
        control = Control(go, stop, on_pause=lambda paused: events.put(TrainEvent("paused" if paused else "resumed")))
        result = run_round(Settings(**settings), progress=events.put, control=control,
                           serving=Serving(**serving) if serving else None,
                           template=ChatTemplate(**template) if template else None)
        if result is None:
            events.put(TrainEvent("idle"))
    except Stopped:
        events.put(TrainEvent("stopped"))
    except NoRoom as e:  # not a failure: the memory is serving's; the scheduler asks again later
        logging.getLogger("clawd.train").warning("%s", e)
        events.put(TrainEvent("waiting", error=str(e), detail={"memory_plan": e.plan.as_dict()}))
    except Exception as e:  # reported to the parent; the traceback goes to the log
        logging.getLogger("clawd.train").exception("training failed")
        events.put(TrainEvent("error", error=str(e)))
        raise SystemExit(1) from None


class Trainer:
    """One training round in a spawned child. Poll `events()` for its progress (TrainEvent:
    load, start, step, paused, resumed, then done | idle | stopped | waiting | error).
    `serving`: what the daemon's engine holds (clawd.train.memory.Serving's fields), for the
    child's memory plan. `template`: the engine's chat template (ChatTemplate.spec()), so that the
    child, which holds torch, never loads llama.cpp as well: on a CUDA machine the two aborted in
    one process (docs/device-check.md). None: the child reads the GGUF's with llama.cpp."""

    def __init__(self, settings: Settings, serving: dict[str, Any] | None = None,
                 template: dict[str, Any] | None = None):
        self.settings = settings
        ctx = mp.get_context("spawn")  # never fork a process holding llama.cpp threads
        self._go, self._stop, self._events = ctx.Event(), ctx.Event(), ctx.Queue()
        self._go.set()
        self.proc = ctx.Process(target=_child, args=(settings.model_dump(mode="json"), serving, template, self._go, self._stop, self._events, os.getpid()),
                                name="clawd-train", daemon=True)
        self._ended = False

    def start(self) -> Trainer:
        self.proc.start()
        log.info("trainer started (pid %d)", self.proc.pid)
        return self

    def pause(self) -> None:
        self._go.clear()

    def resume(self) -> None:
        self._go.set()

    @property
    def paused(self) -> bool:
        return not self._go.is_set()

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def stop(self, timeout: float = 60.0) -> int | None:
        """Stop at the next micro-step (the last checkpoint stays); kill if it does not exit in time."""
        self._stop.set()
        self._go.set()
        self.proc.join(timeout)
        if self.proc.is_alive():
            log.warning("trainer did not stop within %.0fs: killing it (the next round resumes its last step)", timeout)
            self.proc.kill()
            self.proc.join()
        return self.proc.exitcode

    def join(self, timeout: float | None = None) -> int | None:
        self.proc.join(timeout)
        return self.proc.exitcode

    def events(self) -> list[TrainEvent]:
        """Events since the last call; an exit without a final event becomes an error event."""
        out = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                break
        if any(e.final for e in out):
            self._ended = True
        elif not self._ended and self.proc.exitcode is not None:
            self._ended = True
            code = self.proc.exitcode
            why = (" — killed by the system, most likely out of memory: lower max_train_tokens"
                   if code == -signal.SIGKILL else "")
            out.append(TrainEvent("error", error=f"trainer exited with code {code}{why}"))
        return out
