"""Every `clawd` command prints its help (issue 30: `clawd serve --help` crashed on a setting's
description holding "10%", which argparse read as a format code)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from clawd.cli import build_parser

pytestmark = pytest.mark.fast


def _commands() -> list[list[str]]:
    """Every command path of the parser: [], ["serve"], ["adapters", "list"], ..."""
    out: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        out.append(path)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])

    walk(build_parser(), [])
    return out


def test_every_command_prints_its_help():
    commands = _commands()
    assert ["serve"] in commands and len(commands) > 8
    for path in commands:
        p = subprocess.run([sys.executable, "-m", "clawd", *path, "--help"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "usage: clawd" in p.stdout, (path, p.stderr[-500:])
    serve = subprocess.run([sys.executable, "-m", "clawd", "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert "10%" in serve.stdout  # the description that crashed it, printed as written


def test_config_set_and_unset_write_one_private_file(tmp_path):
    """`clawd config set|unset`: config.json's one writer (clawd.config.write_config_file) checks
    the value before anything is written and keeps the file 0600."""
    import json
    import os
    import stat

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CLAWD_")}, "CLAWD_HOME": str(tmp_path / "home")}

    def config(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "clawd", "config", *args], capture_output=True, text=True,
                              timeout=60, env=env)

    path = tmp_path / "home" / "config.json"
    assert config("set", "ctx", "4096").returncode == 0 and config("set", "grpo_k", "6").returncode == 0
    assert json.loads(path.read_text()) == {"ctx": "4096", "grpo_k": "6"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    bad = config("set", "ctx", "-1")
    assert bad.returncode != 0 and "not set" in bad.stderr and "ctx" in bad.stderr
    assert json.loads(path.read_text()) == {"ctx": "4096", "grpo_k": "6"}  # nothing written
    assert config("unset", "ctx").returncode == 0 and json.loads(path.read_text()) == {"grpo_k": "6"}
    shown = json.loads(config("show").stdout)
    assert shown["grpo_k"] == 6 and shown["ctx"] == 0


def test_without_a_daemon_the_cli_works_here_only_when_told(tmp_path):
    """The CLI is the daemon's client: with no daemon it says how to start one, or does the work in
    its own process with --offline (issue 30)."""
    import os

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CLAWD_")}, "CLAWD_HOME": str(tmp_path / "home"),
           "CLAWD_PORT": "1"}

    def clawd(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "clawd", *args], capture_output=True, text=True, timeout=60, env=env)

    for args in (("adapters", "list"), ("adapters", "off"), ("publish",), ("merge",), ("judge", "--once"),
                 ("train", "--once")):
        r = clawd(*args)
        assert r.returncode != 0 and "no daemon answers at http://127.0.0.1:1" in r.stderr and "--offline" in r.stderr, args
    r = clawd("adapters", "list", "--offline")
    assert r.returncode == 0 and "no adapters yet" in r.stdout, r.stderr
