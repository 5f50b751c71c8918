"""The `clawd` command: a thin client of the daemon's HTTP API, plus `serve` itself.

Flags of `clawd serve` are generated from `Settings`, so a new knob is one described field.
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from pathlib import Path
from typing import Any

from .config import Settings, default_home, ensure_home

_TYPES = {int: int, float: float, str: str, Path: Path}


def _field_type(annotation: Any):
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return _TYPES.get(args[0], str)


def _add_settings_flags(p: argparse.ArgumentParser) -> None:
    for name, f in Settings.model_fields.items():
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_field_type(f.annotation),
                       default=argparse.SUPPRESS, help=f.description)


def _settings(ns: argparse.Namespace) -> Settings:
    given = {k: v for k, v in vars(ns).items() if k in Settings.model_fields}
    return Settings(**given)


def _get(settings: Settings, path: str, timeout: float = 5.0) -> Any:
    import httpx

    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    r = httpx.get(f"http://{host}:{settings.port}{path}", headers=headers, timeout=timeout)
    r.raise_for_status()
    return r.json()


def cmd_serve(ns: argparse.Namespace) -> None:
    from .daemon import serve

    serve(_settings(ns))


def cmd_status(ns: argparse.Namespace) -> None:
    import httpx

    settings = _settings(ns)
    try:
        st = _get(settings, "/v1/clawd/status")
    except httpx.HTTPError:
        if ns.json:
            print(json.dumps({"up": False, "url": f"http://{settings.host}:{settings.port}"}))
        else:
            print(f"clawd is not running on {settings.host}:{settings.port}.\n"
                  "Start it with `clawd serve` (foreground) or `clawd install-service` (at login).")
        sys.exit(1)
    if ns.json:
        print(json.dumps(st, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(show_header=False, box=None)
    t.add_row("status", "[green]up[/green]" + f" for {st['uptime_s']:.0f}s, {st['in_flight']} request(s) in flight")
    t.add_row("model", f"{st['model']['id']} — {st['model']['path']}")
    t.add_row("context", f"{st['model']['context']} tokens (trained {st['model']['trained_context']})")
    t.add_row("device", st["device"])
    t.add_row("adapter", str(st["adapter"] or "none (base weights)"))
    c = st["turns"]
    t.add_row("turns", f"{c['turns']} recorded: {c['main']} main, {c['side']} side, {c['aborted']} aborted; "
                       f"{c['with_next_state']} with a next state; {c['sessions']} sessions")
    t.add_row("memory", f"{st['peak_rss_mb']:.0f} MB peak RSS")
    t.add_row("data", st["home"])
    Console().print(t)


def cmd_config(ns: argparse.Namespace) -> None:
    home = ensure_home(default_home())
    path = home / "config.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    if ns.action == "show":
        print(json.dumps(Settings().public(), indent=2))
        return
    if ns.key not in Settings.model_fields:
        sys.exit(f"unknown setting {ns.key!r}; known: {', '.join(Settings.model_fields)}")
    if ns.action == "set":
        if ns.value is None:
            sys.exit("clawd config set KEY VALUE")
        data[ns.key] = ns.value
        Settings(**{**data})  # validate before writing
    else:
        data.pop(ns.key, None)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.chmod(0o600)
    tmp.replace(path)
    print(f"{ns.action} {ns.key} in {path}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clawd", description="A local model daemon that learns from being used.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the daemon in the foreground (what the service units run)")
    _add_settings_flags(p)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("status", help="what the daemon is doing")
    p.add_argument("--json", action="store_true", help="every field, as JSON")
    for name in ("host", "port", "api_key"):
        f = Settings.model_fields[name]
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_field_type(f.annotation),
                       default=argparse.SUPPRESS, help=f.description)
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("config", help="show the effective settings, or set/unset one in config.json")
    p.add_argument("action", choices=["show", "set", "unset"], nargs="?", default="show")
    p.add_argument("key", nargs="?")
    p.add_argument("value", nargs="?")
    p.set_defaults(func=cmd_config)
    return parser


def main(argv: list[str] | None = None) -> None:
    ns = build_parser().parse_args(argv)
    ns.func(ns)


if __name__ == "__main__":
    main()
