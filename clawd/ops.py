"""Operating the daemon: system service units and the OpenClaw provider block."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .config import Settings

REPO = Path(__file__).resolve().parent.parent
LABEL = "dev.clawd"


def _template(name: str) -> str:
    """The unit templates live in systemd/ and launchd/ of the source tree clawd runs from
    (scripts/install.sh installs it editable)."""
    path = REPO / name
    if not path.is_file():
        raise SystemExit(f"service template {path} not found: install clawd from its source tree")
    return path.read_text()


def render_unit(kind: str, settings: Settings) -> str:
    name = "systemd/clawd.service" if kind == "systemd" else "launchd/dev.clawd.plist"
    return _template(name).replace("@PYTHON@", sys.executable).replace("@HOME_DIR@", str(settings.home))


def unit_path(kind: str, system: bool) -> Path:
    if kind == "launchd":
        base = Path("/Library/LaunchDaemons") if system else Path.home() / "Library/LaunchAgents"
        return base / f"{LABEL}.plist"
    base = Path("/etc/systemd/system") if system else Path.home() / ".config/systemd/user"
    return base / "clawd.service"


def service_kind() -> str:
    return "launchd" if platform.system() == "Darwin" else "systemd"


def _run(cmd: list[str]) -> None:
    if shutil.which(cmd[0]) is None:
        print(f"  ({cmd[0]} not found: run `{' '.join(cmd)}` where it exists)")
        return
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(f"  $ {' '.join(cmd)}" + (f"\n  {r.stderr.strip()}" if r.returncode else ""))


def install_service(settings: Settings, system: bool, start: bool = True) -> Path:
    kind = service_kind()
    path = unit_path(kind, system)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_unit(kind, settings))
    print(f"wrote {path}")
    if start:
        if kind == "systemd":
            scope = [] if system else ["--user"]
            _run(["systemctl", *scope, "daemon-reload"])
            _run(["systemctl", *scope, "enable", "--now", "clawd"])
        else:
            _run(["launchctl", "load", "-w", str(path)])
    return path


def uninstall_service(system: bool) -> None:
    kind = service_kind()
    path = unit_path(kind, system)
    if kind == "systemd":
        scope = [] if system else ["--user"]
        _run(["systemctl", *scope, "disable", "--now", "clawd"])
    else:
        _run(["launchctl", "unload", "-w", str(path)])
    if path.exists():
        path.unlink()
        print(f"removed {path}")
    else:
        print(f"{path} was not installed")


def provider_block(settings: Settings, context_window: int, max_tokens: int = 4096) -> dict[str, Any]:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    model = {
        "id": settings.model_id, "name": settings.model_id, "reasoning": False, "input": ["text"],
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        "contextWindow": context_window, "maxTokens": min(max_tokens, context_window // 4),
        # OpenClaw then sends its session id (`x-session-affinity: <sessionId>:0`), which clawd
        # uses as the session key (tests/fixtures/openclaw/session_affinity_headers.json)
        "compat": {"sendSessionAffinityHeaders": True},
    }
    return {
        "models": {"mode": "merge", "providers": {"clawd": {
            "baseUrl": f"http://{host}:{settings.port}/v1", "apiKey": settings.api_key or "sk-local",
            "api": "openai-completions", "timeoutSeconds": 600, "models": [model]}}},
        "agents": {"defaults": {"model": {"primary": f"clawd/{settings.model_id}"}}},
    }


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def write_openclaw_config(block: dict[str, Any], path: Path) -> Path | None:
    """Merge `block` into OpenClaw's config, keeping every other setting; back the old file up first."""
    backup = None
    current: dict[str, Any] = {}
    if path.exists():
        try:
            current = json.loads(path.read_text())
        except ValueError as e:
            raise SystemExit(f"{path} is not valid JSON ({e}); fix or move it, then run again") from None
        backup = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.copy2(path, backup)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_merge(current, block), indent=2) + "\n")
    os.replace(tmp, path)
    return backup
