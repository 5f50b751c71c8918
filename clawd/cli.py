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
    t.add_row("status", f"[green]up[/green] {_ago(st['uptime_s'])}; now {st['doing']} ({_ago(st['doing_since_s'])}), "
                        f"{st['in_flight']} request(s) in flight")
    t.add_row("model", f"{st['model']['id']} — {st['model']['path']}")
    t.add_row("context", f"{st['model']['context']} tokens (trained {st['model']['trained_context']}) on {st['device']}")
    a = st["adapter"]
    t.add_row("adapter", f"v{a['version']}, published {_ago(a['age_s'])} ago" if a else "none (base weights)")
    c = st["turns"]
    t.add_row("turns", f"{c['turns']} recorded: {c['main']} main, {c['side']} side, {c['aborted']} aborted; "
                       f"{c['with_next_state']} with a next state, {c['judged']} judged, {c['trained']} trained on; "
                       f"{c['sessions']} sessions")
    t.add_row("scores", _sparkline(st["recent_scores"]) or "no judged turns yet")
    t.add_row("judge", _judge_line(st["judge"]))
    tr = st["training"]
    last = tr["last"]
    t.add_row("training", (f"last round {last['event']} {_ago(time.time() - last['at'])} ago; " if last else "no round yet; ")
              + f"next when {tr['ready']}/{tr['batch']} turns are ready and idle {tr['idle_seconds']:.0f}s"
              + ("" if tr["auto"] else " (auto_learn is off)")
              + (" — [yellow]learning paused[/yellow] (dashboard, POST /v1/clawd/learning/resume)" if tr.get("paused") else ""))
    if tr["progress"] and st["doing"].startswith("training"):
        t.add_row("progress", json.dumps(tr["progress"]))
    t.add_row("memory", f"{st['memory_mb']:.0f} MB")
    t.add_row("data", st["home"])
    Console().print(t)


def _judge_line(j: dict) -> str:
    """How far the loop trusts its judge, with the measured figures."""
    if j["mode"] in ("calibrating", "not measured yet"):
        p = j.get("progress") or {}
        return f"{j['mode']}" + (f" ({p['calibrating']}/{p['of']} labeled cases)" if p else "") + \
            "; until then nothing is judged"
    cv = j["cv"]
    figures = (f"cross-validated on {j['cases']} labeled cases: accuracy {cv['accuracy']:.2f}, "
               f"wrong-sign {cv['wrong_sign']:.1%}, decided {cv['decided']:.0%}")
    if j["mode"] == "trusted":
        return f"trusted, verdicts past {j['threshold']:.2f} confidence ({figures})"
    if j["mode"] == "confident_only":
        return (f"[yellow]not trusted[/yellow] (accuracy {j['cv_trusted']['accuracy']:.2f} < the minimum): learns from "
                f"explicit feedback and verdicts past {j['threshold']:.2f} confidence only ({figures})")
    return (f"[red]not trusted[/red] (accuracy {j['cv_trusted']['accuracy']:.2f}): learns from explicit feedback only "
            "(POST /v1/feedback)")


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _sparkline(scores: list[int]) -> str:
    """−1 / 0 / +1 as ▁ ▄ █, newest last, with the mean."""
    if not scores:
        return ""
    bars = "".join({-1: "[red]▁[/red]", 0: "▄", 1: "[green]█[/green]"}[s] for s in scores)
    return f"{bars}  mean {sum(scores) / len(scores):+.2f} over the last {len(scores)}"


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


# -- adapters, publish, merge (design §8) --------------------------------------------------------
def _daemon_call(settings: Settings, method: str, path: str, body: dict | None = None, timeout: float = 900) -> Any:
    """The daemon's JSON answer; None when no daemon listens. An error answer exits with its message."""
    import httpx

    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    try:
        r = httpx.request(method, f"http://{host}:{settings.port}{path}", json=body, headers=headers, timeout=timeout)
    except httpx.TransportError:
        return None
    if r.status_code >= 400:
        sys.exit(r.json().get("error", {}).get("message", r.text))
    return r.json()


def _local_adapters(settings: Settings):
    import logging

    from .publish import Adapters
    from .store import Store

    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    return Adapters(settings, Store(ensure_home(settings.home) / "clawd.db"))


def _print_adapters(state: dict, as_json: bool, where: str) -> None:
    if as_json:
        print(json.dumps(state, indent=2))
        return
    import datetime

    if not state["adapters"]:
        print(f"no adapters yet ({where}); training makes them and `clawd publish` puts one live")
        return
    print(f"{'':2}{'VERSION':<8}{'STATUS':<10}{'PARENT':<8}{'CREATED':<18}GATE")
    for a in state["adapters"]:
        gate = a["gate"] or {}
        drop = (gate.get("replay") or {}).get("drop")
        # one reason a line, under this column; a pass shows what was measured
        note = ("passed" + (f", replay drop {drop:+.3f}" if drop is not None else "")
                + (f"; {gate['summary']}" if gate.get("summary") else "")) if gate.get("passed") else \
            ("\n" + " " * 46).join(gate.get("reasons", [])) or "-"
        created = datetime.datetime.fromtimestamp(a["created"]).strftime("%Y-%m-%d %H:%M")
        print(f"{'*' if a['current'] else '':2}{a['version']:<8}{a['status']:<10}{str(a['parent'] or '-'):<8}"
              f"{created:<18}{note}")
    print(f"\n* live: {state['current'] if state['current'] is not None else 'none (base weights)'} ({where})")


def cmd_adapters(ns: argparse.Namespace) -> None:
    settings = _settings(ns)
    if ns.action == "use" and ns.version is None:
        sys.exit("which one? `clawd adapters use N` (see `clawd adapters list`)")
    path = "/v1/clawd/adapters" + ("" if ns.action == "list" else f"/{ns.action}")
    state = _daemon_call(settings, "GET" if ns.action == "list" else "POST", path,
                         {"version": ns.version} if ns.action == "use" else None)
    where = "daemon"
    if state is None:
        where = "stored state; the daemon is not running and serves it at its next start"
        local = _local_adapters(settings)
        try:
            state = local.use(ns.version) if ns.action == "use" else getattr(local, ns.action)()
        except (LookupError, ValueError) as e:
            sys.exit(str(e).strip("'\""))
    _print_adapters(state, ns.json, where)


def cmd_publish(ns: argparse.Namespace) -> None:
    """Convert and gate here (own small engine), then make live through the daemon if it runs."""
    settings = _settings(ns)
    local = _local_adapters(settings)
    try:
        out = local.prepare(ns.version)
    except (LookupError, ValueError) as e:
        sys.exit(str(e).strip("'\""))
    gate = out["gate"]
    if not out["passed"]:
        sys.exit(f"adapter {out['version']} rejected by the gate; it will not go live:\n  - " + "\n  - ".join(gate["reasons"]))
    state = _daemon_call(settings, "POST", "/v1/clawd/adapters/use", {"version": out["version"]})
    if state is None:
        state = local.use(out["version"])
    drop = (gate.get("replay") or {}).get("drop")
    print(f"adapter {out['version']} passed the gate in {gate['seconds']:.0f}s"
          + (f" (replay drop {drop:+.3f} nats/token)" if drop is not None else " (no judged turns to replay yet)")
          + f" and is live{'' if state.get('serving') == 'n/a' else ' in the daemon'}")


# -- training (design §7) ----------------------------------------------------------------------
def cmd_train(ns: argparse.Namespace) -> None:
    """One training round in the foreground, with a progress bar."""
    import logging

    if not ns.once:
        sys.exit("the daemon trains by itself when idle; `clawd train --once` runs one round now, in the foreground")
    overrides = {k: v for k, v in (("train_method", ns.round_method), ("train_batch", ns.round_batch)) if v is not None}
    settings = Settings(**{k: v for k, v in vars(ns).items() if k in Settings.model_fields}, **overrides)
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .train.loop import TrainError, run_round

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn()) as bar:
        task = bar.add_task("loading model", total=None, info="")

        def progress(e: dict) -> None:
            if e["event"] == "start":
                bar.update(task, description=f"run {e['run_id']}: {e['samples']} turns", total=e["steps"],
                           completed=e["step"], info=f"{e['backend']} on {e['device']}")
            elif e["event"] == "step":
                bar.update(task, completed=e["step"], info=f"loss {e['loss']:+.4f}")

        try:
            result = run_round(settings, progress=progress)
        except TrainError as e:
            sys.exit(str(e))
    if result is None:
        sys.exit(f"nothing to train: no judged main turns with a {settings.train_method} signal that a finished run "
                 "has not used (`clawd status` shows how many are judged)")
    m = result.metrics
    print(f"adapter {result.version:04d} written to {result.path}: {m['samples']} turns, mean reward "
          f"{m['mean_reward']:+.2f}, loss {m['losses'][0]:+.4f} → {m['losses'][-1]:+.4f} in {m['seconds']:.0f}s. "
          "`clawd publish` gates it and puts it live.")


def cmd_judge(ns: argparse.Namespace) -> None:
    """Judge the backlog in this process (the daemon need not run) and exit."""
    if not ns.once:
        sys.exit("clawd judge runs with --once: it judges the backlog and exits. "
                 "A running daemon judges on its own when idle.")
    import logging

    from rich.logging import RichHandler
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .engine import Engine
    from .judge import Judge
    from .store import Store

    settings = _settings(ns)
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


def cmd_merge(ns: argparse.Namespace) -> None:
    """In the daemon when it runs (it moves to the merged model between requests), else here."""
    settings = _settings(ns)
    if _daemon_call(settings, "GET", "/health", timeout=2) is not None:
        print("merging in the daemon (progress: `clawd logs -f`); it keeps serving meanwhile", file=sys.stderr)
        out = _daemon_call(settings, "POST", "/v1/clawd/adapters/merge", timeout=3600)
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
    """Benchmarks live in the checkout's bench/, not in the package: run them from there."""
    import subprocess

    script = Path(__file__).resolve().parent.parent / "bench" / f"{ns.name}.py"
    if not script.is_file():
        sys.exit(f"{script} not found: the benchmarks run from a clawd checkout (pip install -e .)")
    sys.exit(subprocess.call([sys.executable, str(script), *ns.args]))


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
    p = sub.add_parser("judge", help="judge recorded turns from what came next (design §6)")
    p.add_argument("--once", action="store_true", help="judge the backlog in this process and exit")
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
    _add_settings_flags(p)
    p.set_defaults(func=cmd_adapters)
    p = sub.add_parser("publish", help="convert, gate and make live the newest trained adapter (or version N)")
    p.add_argument("version", nargs="?", type=int)
    _add_settings_flags(p)
    p.set_defaults(func=cmd_publish)
    p = sub.add_parser("merge", help="fold the live adapter into the model: a new quantized GGUF, served from the next start")
    _add_settings_flags(p)
    p.set_defaults(func=cmd_merge)
    p = sub.add_parser("train", help="run one training round now, in the foreground")
    p.add_argument("--once", action="store_true", help="one round from the judged turns not yet trained on")
    p.add_argument("--method", dest="round_method", choices=["rl", "opd", "combined"],
                   help="what to learn from (default: train_method)")
    p.add_argument("--batch", dest="round_batch", type=int, help="turns in the round (default: train_batch)")
    for name in ("home", "model", "threads", "lr", "train_minibatch", "train_epochs", "max_train_tokens", "train_base",
                 "log_level"):
        f = Settings.model_fields[name]
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_field_type(f.annotation),
                       default=argparse.SUPPRESS, help=f.description)
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("bench", help="run a benchmark from the checkout's bench/ (`clawd bench personalize --help`)")
    p.add_argument("name", choices=["personalize"])
    p.add_argument("args", nargs=argparse.REMAINDER, help="the benchmark's own flags")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> None:
    ns = build_parser().parse_args(argv)
    ns.func(ns)


if __name__ == "__main__":
    main()
