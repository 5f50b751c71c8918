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


def cmd_install_service(ns: argparse.Namespace) -> None:
    from . import ops

    settings = _settings(ns)
    ops.install_service(settings, system=ns.system, start=not ns.no_start)
    print("clawd now starts at login; `clawd status` shows it, `clawd logs` follows it.")


def cmd_uninstall_service(ns: argparse.Namespace) -> None:
    from . import ops

    ops.uninstall_service(system=ns.system)


def _trained_context(model: Path) -> int:
    from llama_cpp import Llama

    meta = Llama(str(model), vocab_only=True, verbose=False).metadata  # reads the header only
    return int(meta[f"{meta['general.architecture']}.context_length"])


def cmd_openclaw_config(ns: argparse.Namespace) -> None:
    import httpx

    from . import ops

    settings = _settings(ns)
    try:
        ctx = _get(settings, "/v1/clawd/status")["model"]["context"]
    except httpx.HTTPError:
        ctx = settings.ctx or _trained_context(settings.resolved_model())
        print(f"(daemon not running: contextWindow {ctx} from the settings and the model file)", file=sys.stderr)
    block = ops.provider_block(settings, ctx)
    if not ns.write:
        print(json.dumps(block, indent=2))
        return
    path = Path(ns.path).expanduser()
    backup = ops.write_openclaw_config(block, path)
    print(f"merged the clawd provider into {path}" + (f" (backup: {backup})" if backup else ""))


def cmd_logs(ns: argparse.Namespace) -> None:
    import time

    path = _settings(ns).home / "clawd.log"
    if not path.exists():
        sys.exit(f"no log yet at {path}: start the daemon with `clawd serve`")
    with path.open() as f:
        lines = f.readlines()
        sys.stdout.writelines(lines[-ns.lines:])
        if not ns.follow:
            return
        try:
            while True:
                line = f.readline()
                if line:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                else:
                    time.sleep(0.5)
        except KeyboardInterrupt:
            pass


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
    for name, func, text in (("install-service", cmd_install_service, "start clawd at login (systemd user unit / LaunchAgent)"),
                             ("uninstall-service", cmd_uninstall_service, "remove the service unit")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--system", action="store_true", help="system-wide unit instead of the user's (needs root)")
        p.add_argument("--user", dest="system", action="store_false", help="the user's unit (default)")
        if name == "install-service":
            p.add_argument("--no-start", action="store_true", help="write the unit only")
            _add_settings_flags(p)
        p.set_defaults(func=func)
    p = sub.add_parser("openclaw-config", help="print (or --write) the OpenClaw provider block for this daemon")
    p.add_argument("--write", action="store_true", help="merge it into the OpenClaw config, keeping a backup")
    p.add_argument("--path", default="~/.openclaw/openclaw.json", help="OpenClaw config file")
    _add_settings_flags(p)
    p.set_defaults(func=cmd_openclaw_config)
    p = sub.add_parser("logs", help="show the daemon's log")
    p.add_argument("-f", "--follow", action="store_true", help="keep following")
    p.add_argument("-n", "--lines", type=int, default=50)
    p.set_defaults(func=cmd_logs)
    return parser


def main(argv: list[str] | None = None) -> None:
    ns = build_parser().parse_args(argv)
    ns.func(ns)


if __name__ == "__main__":
    main()
