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
