"""The `clawd` command: a thin client of the daemon's HTTP API, plus `serve` itself.

Flags of `clawd serve` are generated from `Settings`, so a new knob is one described field.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import typing
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .config import ConfigError, Settings, default_home, ensure_home, write_config_file
from .store.records import GateResult

_TYPES = {int: int, float: float, str: str, Path: Path}


def _field_type(annotation: Any):
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return _TYPES.get(args[0], str)


def _add_settings_flags(p: argparse.ArgumentParser, names: tuple[str, ...] | None = None) -> None:
    """A flag per setting (`names`, default all), absent unless given: Settings fills the rest."""
    for name, f in Settings.model_fields.items():
        if names is not None and name not in names:
            continue
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_field_type(f.annotation),
                       default=argparse.SUPPRESS, help=(f.description or "").replace("%", "%%"))  # argparse formats help with %


def _settings(ns: argparse.Namespace) -> Settings:
    given = {k: v for k, v in vars(ns).items() if k in Settings.model_fields}
    return Settings(**given)


def _daemon(settings: Settings):
    from .client import DaemonClient

    return DaemonClient(settings)


def _call(settings: Settings, method: str, *args: Any, must: bool = False) -> Any:
    """`DaemonClient.<method>(*args)`: the record the daemon answers; None when no daemon listens
    (with `must`, that exits: it was up a moment ago). An error answer exits with its message."""
    from .client import DaemonError

    try:
        out = getattr(_daemon(settings), method)(*args)
    except DaemonError as e:
        sys.exit(str(e))
    if out is None and must:
        sys.exit(f"the daemon at {_daemon(settings).url} stopped answering; `clawd status` says more")
    return out


def _online(settings: Settings, ns: argparse.Namespace) -> bool:
    """Whether this command goes through the daemon (True) or runs here with `--offline` (False):
    the CLI is the daemon's client and does the daemon's work in its own process only when told.
    Exits when neither is possible."""
    client = _daemon(settings)
    up = client.up()
    if ns.offline and up:
        sys.exit(f"the daemon is running at {client.url} and does this itself: drop --offline, or stop it first")
    if not ns.offline and not up:
        sys.exit(f"no daemon answers at {client.url}: start it with `clawd serve` (or `clawd install-service`), "
                 "or pass --offline to do this here, in this process, on its data")
    return up


def cmd_serve(ns: argparse.Namespace) -> None:
    from .daemon import serve

    serve(_settings(ns))


def cmd_status(ns: argparse.Namespace) -> None:
    settings = _settings(ns)
    st = _call(settings, "status")
    if st is None:
        if ns.json:
            print(json.dumps({"up": False, "url": f"http://{settings.host}:{settings.port}"}))
        else:
            print(f"clawd is not running on {settings.host}:{settings.port}.\n"
                  "Start it with `clawd serve` (foreground) or `clawd install-service` (at login).")
        sys.exit(1)
    if ns.json:
        print(json.dumps(st.to_json(), indent=2))
        return
    from . import cli_show

    cli_show.status(st)


def cmd_config(ns: argparse.Namespace) -> None:
    home = ensure_home(default_home())
    if ns.action == "show":
        print(json.dumps(Settings().public(), indent=2))
        return
    if ns.key not in Settings.model_fields:
        sys.exit(f"unknown setting {ns.key!r}; known: {', '.join(Settings.model_fields)}")
    if ns.action == "set":
        if ns.value is None:
            sys.exit("clawd config set KEY VALUE")
        try:
            write_config_file(home, {ns.key: ns.value})
        except ValidationError as e:
            sys.exit(f"not set: {e.errors()[0]['msg']} ({ns.key}={ns.value!r})")
    else:
        write_config_file(home, unset=(ns.key,))
    print(f"{ns.action} {ns.key} in {home / 'config.json'}")


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
    from . import ops

    settings = _settings(ns)
    st = _call(settings, "status")
    if st is not None:
        ctx = st.model.context
    else:
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


# -- adapters, publish, merge (design §8) --------------------------------------------------------
def _local_adapters(settings: Settings):
    import logging

    from .publish import Adapters
    from .store.store import Store

    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    return Adapters(settings, Store(ensure_home(settings.home) / "clawd.db"))


def cmd_adapters(ns: argparse.Namespace) -> None:
    settings = _settings(ns)
    if ns.action == "use" and ns.version is None:
        sys.exit("which one? `clawd adapters use N` (see `clawd adapters list`)")
    where = "daemon"
    if _online(settings, ns):
        state = _call(settings, "adapters", ns.action, ns.version, must=True)
    else:
        where = "stored state; the daemon is not running and serves it at its next start"
        local = _local_adapters(settings)
        try:
            state = local.use(ns.version) if ns.action == "use" else getattr(local, ns.action)()
        except (LookupError, ValueError) as e:
            sys.exit(str(e).strip("'\""))
    from . import cli_show

    cli_show.adapters(state, ns.json, where)


def cmd_publish(ns: argparse.Namespace) -> None:
    """In the daemon when it runs (its engine gates between requests), else here with a small
    engine of our own; either way the gate's verdict is stored with every reason."""
    settings = _settings(ns)
    where = "in the daemon"
    if _online(settings, ns):
        out = _call(settings, "publish", ns.version, must=True)
    else:
        where = "; `clawd serve` serves it"
        try:
            out = _local_adapters(settings).publish(ns.version)
        except (LookupError, ValueError) as e:
            sys.exit(str(e).strip("'\""))
    gate = GateResult.from_json(out.gate)  # a rejection came back as an error, with every reason
    drop = (gate.checks.get("replay") or {}).get("drop")
    print(f"adapter {out.version} passed the gate in {gate.seconds:.0f}s"
          + (f" (replay drop {drop:+.3f} nats/token)" if drop is not None else " (no judged turns to replay yet)")
          + f" and is live {where}".replace("live ;", "live;"))


# -- training (design §7) ----------------------------------------------------------------------
def cmd_train(ns: argparse.Namespace) -> None:
    """One training round in the foreground, with a progress bar."""
    if not ns.once:
        sys.exit("the daemon trains by itself when idle; `clawd train --once` runs one round now, in the foreground")
    overrides = {k: v for k, v in (("train_method", ns.round_method), ("train_batch", ns.round_batch)) if v is not None}
    settings = Settings(**{k: v for k, v in vars(ns).items() if k in Settings.model_fields}, **overrides)
    if _online(settings, ns) and _asked_daemon(settings, "train", bool(overrides) or any(
            k in vars(ns) for k in Settings.model_fields if k not in ("home", "log_level"))):
        return
    from .cli_offline import train_here

    train_here(settings)


def _asked_daemon(settings: Settings, job: str, own_settings: bool) -> bool:
    """With the daemon running, a one-shot job is the daemon's to run (it holds the model, the
    database and the adapter it serves); True once it was asked. With auto_learn off it runs none,
    and the job runs here."""
    from .client import DaemonError

    client = _daemon(settings)
    if not client.up():
        return False
    if own_settings:
        sys.exit(f"the daemon is running at {client.url} and {job}s with its own settings: stop it to {job} with "
                 f"other flags here, or change them with `clawd config set`")
    try:
        out = client.ask(job)
    except DaemonError as e:
        if e.status == 409:
            return False
        sys.exit(str(e))
    if out is None:  # it stopped meanwhile
        return False
    if job == "judge":
        what = f"its backlog of {out.backlog} turn(s)"
    elif out.batch:
        what = f"a round on the {out.ready} turns ready (of {out.batch} a round) and {out.groups} scored groups"
    else:  # grpo: only groups train
        what = f"a round on the {out.groups} scored groups ready"
    print(f"asked the daemon at {client.url} to {job} {what} as soon as no request is in flight "
          f"(now: {out.doing}); `clawd status` shows progress")
    return True


def cmd_judge(ns: argparse.Namespace) -> None:
    """Judge the backlog: the daemon's job when it runs (asked for), else with --offline in this
    process, then exit."""
    if not ns.once:
        sys.exit("clawd judge runs with --once: it judges the backlog and exits. "
                 "A running daemon judges on its own when idle.")
    settings = _settings(ns)
    if _online(settings, ns) and _asked_daemon(settings, "judge", False):
        return
    from .cli_offline import judge_here

    judge_here(settings)


def cmd_merge(ns: argparse.Namespace) -> None:
    """In the daemon when it runs (it moves to the merged model between requests), else here."""
    settings = _settings(ns)
    if _online(settings, ns):
        print("merging in the daemon (progress: `clawd logs -f`); it keeps serving meanwhile", file=sys.stderr)
        out = _call(settings, "merge", must=True)
    else:
        def progress(stage: str, done: float) -> None:
            print(f"\r{stage}: {done:4.0%}", end="\n" if done >= 1 else "", file=sys.stderr, flush=True)

        try:
            out = _local_adapters(settings).merge(progress)
        except (LookupError, ValueError) as e:
            sys.exit(str(e).strip("'\""))
    print(f"merged adapter {out['version']} into {out['model']} ({out['bytes'] / 1e6:.0f} MB, {out['seconds']:.0f}s); "
          f"it is the configured model now and no adapter is live"
          + ("; the daemon serves it" if out.get("serving") else "; `clawd serve` serves it"))


def cmd_bench(ns: argparse.Namespace) -> None:
    """Benchmarks live in the checkout's bench/, not in the package: run them from there, as modules."""
    import subprocess

    root, parts = Path(__file__).resolve().parent.parent, ns.name.split(".") + ([] if "." in ns.name else ["run"])
    if not root.joinpath("bench", *parts).with_suffix(".py").is_file():
        sys.exit(f"no bench/{'/'.join(parts)}.py in {root}: the benchmarks run from a clawd checkout (pip install -e .)")
    sys.exit(subprocess.call([sys.executable, "-m", ".".join(["bench", *parts]), *ns.args], cwd=root))


def _offline_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--offline", action="store_true", help="run here, in this process, on the daemon's data, while "
                   "the daemon is stopped (without it the command asks the running daemon)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="clawd", description="A local model daemon that learns from being used.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the daemon in the foreground (what the service units run)")
    _add_settings_flags(p)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("status", help="what the daemon is doing")
    p.add_argument("--json", action="store_true", help="every field, as JSON")
    _add_settings_flags(p, ("host", "port", "api_key"))
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("config", help="show the effective settings, or set/unset one in config.json")
    p.add_argument("action", choices=["show", "set", "unset"], nargs="?", default="show")
    p.add_argument("key", nargs="?")
    p.add_argument("value", nargs="?")
    p.set_defaults(func=cmd_config)
    p = sub.add_parser("judge", help="judge recorded turns from what came next (design §6)")
    p.add_argument("--once", action="store_true", help="judge the backlog now (the daemon's, or --offline here) and exit")
    _offline_flag(p)
    _add_settings_flags(p)
    p.set_defaults(func=cmd_judge)
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
    p = sub.add_parser("adapters", help="list the adapters, or change which one is live")
    p.add_argument("action", choices=["list", "use", "rollback", "off"], nargs="?", default="list")
    p.add_argument("version", nargs="?", type=int, help="for `use`: the adapter version")
    p.add_argument("--json", action="store_true", help="every field, as JSON")
    _offline_flag(p)
    _add_settings_flags(p)
    p.set_defaults(func=cmd_adapters)
    p = sub.add_parser("publish", help="convert, gate and make live the newest trained adapter (or version N)")
    p.add_argument("version", nargs="?", type=int)
    _offline_flag(p)
    _add_settings_flags(p)
    p.set_defaults(func=cmd_publish)
    p = sub.add_parser("merge", help="fold the live adapter into the model: a new quantized GGUF, served from the next start")
    _offline_flag(p)
    _add_settings_flags(p)
    p.set_defaults(func=cmd_merge)
    p = sub.add_parser("train", help="run one training round now, in the foreground")
    p.add_argument("--once", action="store_true", help="one round from the judged turns not yet trained on")
    p.add_argument("--method", dest="round_method", choices=["grpo", "rl", "opd", "combined"],
                   help="what to learn from (default: train_method)")
    _offline_flag(p)
    p.add_argument("--batch", dest="round_batch", type=int, help="turns in the round (default: train_batch)")
    _add_settings_flags(p, ("home", "model", "threads", "lr", "train_minibatch", "train_epochs", "max_train_tokens",
                            "train_base", "log_level"))
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("bench", help="run a benchmark from the checkout's bench/ (`clawd bench personalize --help`)")
    p.add_argument("name", help="a subject, which runs its run.py (personalize, judge), or subject.script "
                   "(tools.tasks, serving.serve): bench/SUBJECT/SCRIPT.py")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own flags")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> None:
    ns = build_parser().parse_args(argv)
    try:
        ns.func(ns)
    except ConfigError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
