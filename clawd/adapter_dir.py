"""The adapter directory, defined once (design §7, §8); train writes it, publish and the CLI read it.

    adapters/NNNN/           one trained adapter: peft files (adapter_config.json is written
                             last of them, so it marks a whole one), meta.json, optimizer.pt (the
                             AdamW state the next round continues from), later adapter.gguf and
                             gate.json from publish
    adapters/current         relative symlink to the live NNNN (absent: the base weights),
                             replaced with rename(2): a reader sees the old or the new target
    adapters/.staging/       the checkpoint of a round in progress (state.pt), resumed after a kill
    adapters/.tmp-NNNN/      a version being written; renamed to NNNN/ whole
    adapters/.train.lock     held by the one training round that may run

This module imports no torch and no llama.cpp: the daemon reads it to see an interrupted round.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("clawd.adapters")

GGUF_NAME = "adapter.gguf"  # the converted adapter, beside the peft files in NNNN/
OPTIMIZER_NAME = "optimizer.pt"  # AdamW's moments and step count at the end of the round that wrote NNNN/
COMPLETE = "adapter_config.json"


class AdapterDirError(RuntimeError):
    """The directory cannot be used as asked; the message names the fix."""


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` survive a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AdapterDir:
    def __init__(self, home: Path):
        self.root = Path(home) / "adapters"
        self.staging = self.root / ".staging"
        self.staged_state = self.staging / "state.pt"

    def dir(self, version: int) -> Path:
        return self.root / f"{version:04d}"

    def gguf(self, version: int) -> Path:
        return self.dir(version) / GGUF_NAME

    def optimizer(self, version: int) -> Path:
        return self.dir(version) / OPTIMIZER_NAME

    def is_complete(self, version: int) -> bool:
        return (self.dir(version) / COMPLETE).is_file()

    def versions(self) -> list[int]:
        """Every whole adapter on disk, oldest first (not those still being written)."""
        if not self.root.is_dir():
            return []
        return sorted(int(d.name) for d in self.root.iterdir()
                      if d.name.isdigit() and d.is_dir() and not d.is_symlink() and (d / COMPLETE).is_file())

    def staged_round(self) -> bool:
        """A round a stop or a kill interrupted left its checkpoint: the next round resumes it,
        whether or not enough new turns are ready."""
        return self.staged_state.is_file()

    # -- the live version -----------------------------------------------------------------------
    def current(self) -> int | None:
        """The version `current` names; None when there is none (the base weights). A link that
        names no version is logged and read as none, as the daemon serves then."""
        link = self.root / "current"
        try:
            target = os.readlink(link)
        except OSError:  # no link (or not a link: nothing clawd wrote)
            return None
        name = Path(target.rstrip("/")).name
        if not name.isdigit():
            log.warning("%s points at %r, not an adapter version: serving and training from the base weights",
                        link, target)
            return None
        return int(name)

    def set_current(self, version: int | None) -> None:
        """Point `current` at `version` (None: remove it) atomically."""
        self.root.mkdir(parents=True, exist_ok=True)
        link = self.root / "current"
        if version is None:
            link.unlink(missing_ok=True)
        else:
            tmp = self.root / f".current.{os.getpid()}.tmp"
            tmp.unlink(missing_ok=True)
            os.symlink(f"{version:04d}", tmp)
            os.replace(tmp, link)
        fsync_dir(self.root)

    # -- writing a version ------------------------------------------------------------------------
    def next_version(self, known: int = 0) -> int:
        """One past every number used on disk (whole or not) and `known` (the database's highest)."""
        taken = [int(p.name) for p in self.root.iterdir() if p.name.isdigit()] if self.root.is_dir() else []
        return max([*taken, known]) + 1

    def write(self, version: int, fill: Callable[[Path], None]) -> Path:
        """NNNN/ appears whole or not at all: `fill(tmp)` writes the files, then one rename."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp, path = self.root / f".tmp-{version:04d}", self.dir(version)
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            fill(tmp)
            fsync_dir(tmp)
        except BaseException:  # disk full, say: leave no partial directory
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        os.rename(tmp, path)
        fsync_dir(self.root)
        return path

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """The training round's lock: one round at a time, across processes."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / ".train.lock"
        with open(path, "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise AdapterDirError(f"another training round is running (it holds {path})") from None
            yield
