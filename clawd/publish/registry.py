"""The adapter directory: `adapters/NNNN/` per trained adapter, `adapters/current` the live one.

`current` is a relative symlink (`current -> 0007`) replaced with rename(2), so a reader (the
daemon starting, the trainer picking its parent) sees the old or the new target, never neither.
No `current` = base weights. The `adapters` table keeps each version's history: trained (not
yet gated), published (passed the gate; may be live), rejected (failed it; never goes live),
retired (rolled back from).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ..store import Store

log = logging.getLogger("clawd.publish")

GGUF_NAME = "adapter.gguf"  # the converted adapter, beside the peft files in NNNN/


class AdapterError(ValueError):
    """A request about adapters that cannot be done as asked; the message names the fix."""


class Registry:
    def __init__(self, home: Path, store: Store):
        self.root = Path(home) / "adapters"
        self.store = store

    def dir(self, version: int) -> Path:
        return self.root / f"{version:04d}"

    def gguf(self, version: int) -> Path:
        return self.dir(version) / GGUF_NAME

    def sync(self) -> None:
        """Register adapter directories the trainer wrote but the table does not know yet."""
        if not self.root.is_dir():
            return
        known = {r["version"] for r in self.store.adapters()}
        for d in sorted(self.root.iterdir()):
            if not (d.name.isdigit() and d.is_dir() and not d.is_symlink()) or int(d.name) in known:
                continue
            if not (d / "adapter_config.json").is_file():
                continue  # still being written, or not a peft adapter
            meta = json.loads((d / "meta.json").read_text()) if (d / "meta.json").is_file() else {}
            parent = meta.get("parent")
            self.store.add_adapter(int(d.name), str(d), int(parent) if parent is not None else None, meta)
            log.info("registered adapter %s", d.name)

    def rows(self) -> list[dict[str, Any]]:
        self.sync()
        return self.store.adapters()

    def row(self, version: int) -> dict[str, Any]:
        for r in self.rows():
            if r["version"] == version:
                return r
        raise LookupError(f"no adapter {version}; `clawd adapters list` shows them")

    def current(self) -> int | None:
        link = self.root / "current"
        try:
            target = os.readlink(link)
        except (FileNotFoundError, OSError):
            return None
        name = Path(target).name
        return int(name) if name.isdigit() else None

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
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself survives a power cut
        finally:
            os.close(fd)
