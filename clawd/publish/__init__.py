"""Publishing (design §8): peft adapter → GGUF LoRA → gate → `adapters/current` → the serving
context, plus the adapter actions behind `clawd adapters` and `/v1/clawd/adapters`.

    convert.py   peft → GGUF LoRA with the `gguf` package (names, q/k permutation, alpha)
    gate.py      finite, loads, replay of positive turns, answer-checked probes, echo, stamped
                 phrase, degeneration, KL — all against the base weights
    probes.py    the probe set (probes.jsonl) and how answers are graded
    registry.py  the `adapters` table beside the adapter directory (clawd/adapter_dir.py)
    merge.py     fold the live adapter (and those merged before) into the base → a quantized GGUF

`Adapters` works on the stored state alone (the CLI with no daemon) or, given the daemon's
engine, also moves the serving context. Imports config, store, engine; never serve/judge/train.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from ..config import Settings, write_config_file
from ..engine.engine import Engine
from ..store.answers import AdapterRow, AdaptersState, Published
from ..store.records import GateResult
from ..store.store import Store
from .convert import BaseInfo, ConvertError, convert_adapter
from .gate import GATE_SETTINGS, GateConfig, run_gate
from .registry import AdapterError, Registry

log = logging.getLogger("clawd.publish")

__all__ = ["AdapterError", "Adapters", "ConvertError", "GateConfig", "Registry", "convert_adapter", "run_gate"]


class Adapters:
    def __init__(self, settings: Settings, store: Store, engine: Engine | None = None):
        self.settings, self.store, self.engine = settings, store, engine
        self.registry = Registry(settings.home, store)
        self._lock = threading.Lock()  # one change of `current` at a time

    # -- reading ------------------------------------------------------------------------------
    def list(self) -> AdaptersState:
        current = self.registry.current()
        rows = []
        for a in self.registry.rows():
            gate, meta = a.gate.to_json() if a.gate else {}, a.meta or {}
            rows.append(AdapterRow(
                version=a.version, status=a.status, parent=a.parent, current=a.version == current, created=a.created,
                method=meta.get("method"), turns=len(meta.get("turn_ids") or []),
                gate={k: gate[k] for k in ("passed", "reasons", "summary", "replay", "probes", "near_flips", "kl",
                                           "seconds") if k in gate} or None,
                path=a.path))
        serving = self.engine.adapter_version if self.engine is not None else None
        return AdaptersState(current, serving, self.engine is not None, rows)

    # -- changing what is live ----------------------------------------------------------------
    def use(self, version: int) -> AdaptersState:
        with self._lock:
            row = self.registry.row(version)
            if row.status == "rejected":
                reasons = "; ".join(row.gate.reasons if row.gate else []) or "see `clawd adapters list --json`"
                raise AdapterError(f"adapter {version} was rejected by the gate and never goes live: {reasons}")
            if row.status == "trained":
                raise AdapterError(f"adapter {version} has not been through the gate yet: run `clawd publish {version}`")
            gguf_path = self.registry.gguf(version)
            if not gguf_path.is_file():
                raise AdapterError(f"{gguf_path} is missing: run `clawd publish {version}` to convert it again")
            self._apply(gguf_path, version)
            self.store.set_adapter_status(version, "published")
        log.info("adapter %d is live", version)
        return self.list()

    def off(self) -> AdaptersState:
        with self._lock:
            self._apply(None, None)
        log.info("adapters off: serving the base weights")
        return self.list()

    def rollback(self) -> AdaptersState:
        """Retire the live adapter and go back to the newest published one before it (or the base)."""
        with self._lock:
            current = self.registry.current()
            if current is None:
                raise AdapterError("no adapter is live to roll back from; `clawd adapters use N` picks one")
            earlier = [a.version for a in self.registry.rows() if a.status == "published" and a.version < current]
            previous = max(earlier) if earlier else None
            self._apply(self.registry.gguf(previous) if previous is not None else None, previous)
            self.store.set_adapter_status(current, "retired")
        log.info("rolled back from adapter %d to %s", current, previous if previous is not None else "the base weights")
        return self.list()

    def apply_current(self) -> int | None:
        """At daemon start: serve what `current` points to. A file that no longer loads is logged
        and the base served; the link is left for the user to fix."""
        version = self.registry.current()
        if version is None or self.engine is None:
            return None
        try:
            self.engine.set_adapter(self.registry.gguf(version), version)
        except (ValueError, OSError) as e:
            log.error("cannot serve adapter %d (%s); serving the base weights. `clawd adapters use N` or "
                      "`clawd adapters off` fixes it", version, e)
            return None
        return version

    def _apply(self, gguf_path: Path | None, version: int | None) -> None:
        # the engine first: if llama.cpp refuses the file, `current` still names what is served
        if self.engine is not None:
            self.engine.set_adapter(gguf_path, version)
        self.registry.set_current(version)

    # -- publishing -----------------------------------------------------------------------------
    def newest_trained(self) -> int | None:
        trained = [a.version for a in self.registry.rows() if a.status == "trained"]
        return max(trained) if trained else None

    def prepare(self, version: int | None = None, gate: GateConfig | None = None,
                gate_engine: Engine | None = None) -> tuple[int, GateResult]:
        """Convert and gate `version` (default: the newest trained), storing the results; does
        not make it live. Returns the version and the gate's verdict (conversion in its checks)."""
        if version is None:
            version = self.newest_trained()
            if version is None:
                raise AdapterError(f"no trained adapter waiting in {self.registry.root}: `clawd train` makes one")
        row = self.registry.row(version)
        model = self.settings.resolved_model()
        summary = convert_adapter(Path(row.path), BaseInfo.of(model), self.registry.gguf(version))
        engine = gate_engine or Engine(model, n_ctx=2048, threads=self.settings.threads, batch=128,
                                       gpu_layers=self.settings.gpu_layers)
        exclude = set(row.meta.get("turn_ids", []))
        # against the base weights, whatever is live (gate.py says why); the base's own probe
        # answers are cached under home/gate per model file
        result = run_gate(engine, self.registry.gguf(version), self.store, exclude, gate or self.gate_config(),
                          version=version, cache_dir=self.settings.home / "gate")
        result.checks["convert"] = summary
        (self.registry.dir(version) / "gate.json").write_text(json.dumps(result.to_json(), indent=2))
        self.store.set_adapter_status(version, "published" if result.passed else "rejected", gate=result)
        if not result.passed:
            self.registry.gguf(version).unlink(missing_ok=True)  # a rejected adapter cannot be loaded by accident
        return version, result

    def publish(self, version: int | None = None, gate: GateConfig | None = None,
                gate_engine: Engine | None = None) -> Published:
        """Convert, gate and (if it passes) make live. Raises AdapterError with the reasons if not."""
        version, result = self.prepare(version, gate, gate_engine)
        if not result.passed:
            raise AdapterError(f"adapter {version} rejected by the gate: " + "; ".join(result.reasons))
        self.use(version)
        return Published(version, True, result.to_json())

    # -- merging -------------------------------------------------------------------------------
    def merge(self, progress=None) -> dict[str, Any]:
        """Fold the live adapter into the base: `models/merged-NNNN.gguf`, quantized like the base,
        from the original base plus every adapter merged since (merged.json keeps that chain).
        config.json's `model` then names the merged file (every stage, the trainer too, reads it
        from there), `current` is removed (the adapter is in the weights; training starts a new
        chain on them) and, in the daemon, the engine moves to it between requests."""
        import time

        from .merge import merge

        current = self.registry.current()
        if current is None:
            raise AdapterError("no adapter is live, so there is nothing to merge (`clawd adapters use N` first)")
        models = self.settings.home / "models"
        models.mkdir(parents=True, exist_ok=True)
        record_path = models / "merged.json"
        served = self.settings.resolved_model()
        record = json.loads(record_path.read_text()) if record_path.is_file() else {}
        if record.get("model") != str(served):  # not serving an earlier merge: start from what is served
            record = {"base": str(served), "adapters": []}
        chain = [*record["adapters"], str(self.registry.dir(current))]
        out = models / f"merged-{current:04d}.gguf"
        info = merge(Path(record["base"]), [Path(d) for d in chain], out, self.settings.threads, progress or _log_progress())
        record = {"base": record["base"], "adapters": chain, "model": str(out), "version": current, "at": time.time()}
        _write_json(record_path, record)
        write_config_file(self.settings.home, {"model": str(out)})
        with self._lock:
            if self.engine is not None:
                self.engine.reload(out)  # clears the adapter too
            self.registry.set_current(None)
        log.info("adapter %d merged into %s, which is now the model%s", current, out,
                 " served" if self.engine is not None else " (served from the daemon's next start)")
        return {**info, **record, "serving": self.engine is not None}

    def gate_config(self) -> GateConfig:
        return GateConfig(**{k: getattr(self.settings, f"gate_{k}") for k in GATE_SETTINGS})


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.chmod(0o600)
    tmp.replace(path)


def _log_progress():
    """A merge progress callback for the daemon log: one line per stage quarter."""
    seen: set[tuple[str, int]] = set()

    def report(stage: str, done: float) -> None:
        q = int(done * 4)
        if (stage, q) not in seen:
            seen.add((stage, q))
            log.info("%s: %d%%", stage, q * 25)
    return report
