"""The adapters table beside the adapter directory (clawd/adapter_dir.py defines the files).

Statuses: trained (not yet gated), published (passed the gate; may be live), rejected (failed it;
never goes live), retired (rolled back from).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..adapter_dir import AdapterDir
from ..store.records import Adapter
from ..store.store import Store

log = logging.getLogger("clawd.publish")


class AdapterError(ValueError):
    """A request about adapters that cannot be done as asked; the message names the fix."""


class Registry(AdapterDir):
    """The directory's files, and each version's row and history in the `adapters` table."""

    def __init__(self, home: Path, store: Store):
        super().__init__(home)
        self.store = store

    def sync(self) -> None:
        """Register adapter directories the trainer wrote but the table does not know yet."""
        known = {a.version for a in self.store.adapters()}
        for version in self.versions():
            if version in known:
                continue
            d = self.dir(version)
            meta = json.loads((d / "meta.json").read_text()) if (d / "meta.json").is_file() else {}
            parent = meta.get("parent")
            self.store.add_adapter(version, str(d), int(parent) if parent is not None else None, meta)
            log.info("registered adapter %s", d.name)

    def rows(self) -> list[Adapter]:
        self.sync()
        return self.store.adapters()

    def row(self, version: int) -> Adapter:
        for a in self.rows():
            if a.version == version:
                return a
        raise LookupError(f"no adapter {version}; `clawd adapters list` shows them")
