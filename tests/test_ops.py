"""Service units and the OpenClaw provider block."""

from __future__ import annotations

import json
import plistlib
import shutil
import subprocess
import sys

import pytest
from conftest import MODEL

from clawd import ops
from clawd.config import Settings


def test_systemd_unit_renders_and_verifies(tmp_path):
    text = ops.render_unit("systemd", Settings(home=tmp_path / "h"))
    assert f"ExecStart={sys.executable} -m clawd serve" in text and "Restart=always" in text and "@" not in text.replace("@PYTHON@", "")
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    unit = tmp_path / "clawd.service"
    unit.write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", "--user", str(unit)], capture_output=True, text=True)
    problems = [line for line in r.stderr.splitlines() if "clawd.service" in line]
    assert not problems, r.stderr


def test_launchd_plist_parses(tmp_path):
    plist = plistlib.loads(ops.render_unit("launchd", Settings(home=tmp_path / "h")).encode())
    assert plist["KeepAlive"] is True and plist["ProgramArguments"][:3] == [sys.executable, "-m", "clawd"]
    assert plist["EnvironmentVariables"]["CLAWD_HOME"] == str(tmp_path / "h")


def test_openclaw_config_merges_and_backs_up(tmp_path):
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps({"models": {"providers": {"other": {"baseUrl": "x"}}}, "channels": {"telegram": {}}}))
    block = ops.provider_block(Settings(port=9999, api_key="k"), context_window=32768)
    backup = ops.write_openclaw_config(block, path)
    merged = json.loads(path.read_text())
    assert set(merged["models"]["providers"]) == {"other", "clawd"} and "channels" in merged
    p = merged["models"]["providers"]["clawd"]
    assert p["baseUrl"] == "http://127.0.0.1:9999/v1" and p["apiKey"] == "k" and p["timeoutSeconds"] >= 600
    assert p["models"][0]["contextWindow"] == 32768 and merged["agents"]["defaults"]["model"]["primary"] == "clawd/clawd"
    assert p["models"][0]["compat"] == {"sendSessionAffinityHeaders": True}  # OpenClaw then sends its session id
    assert json.loads(backup.read_text())["channels"] == {"telegram": {}}


def test_cli_openclaw_config_without_daemon_reads_model_context(tmp_path):
    r = subprocess.run([sys.executable, "-m", "clawd", "openclaw-config", "--port", "1"],
                       env={"CLAWD_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "CLAWD_MODEL": MODEL}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["models"]["providers"]["clawd"]["models"][0]["contextWindow"] == 8192


def test_status_when_down_says_how_to_start(tmp_path):
    r = subprocess.run([sys.executable, "-m", "clawd", "status", "--port", "1"],
                       env={"CLAWD_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "CLAWD_MODEL": MODEL}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "clawd serve" in r.stdout


def test_one_shot_commands_ask_a_running_daemon(tmp_path):
    """With the daemon up, `clawd train --once` and `clawd judge --once` are its to run (it holds
    the model and serves the adapter); with other settings they refuse, with it down they run here."""
    import os

    from conftest import Daemon

    d = Daemon(tmp_path / "home").start()
    try:
        env = {**os.environ, "CLAWD_HOME": str(d.home), "CLAWD_PORT": str(d.port)}

        def clawd(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "clawd", *args], env=env, capture_output=True, text=True,
                                  timeout=120)

        r = clawd("train", "--once")
        assert r.returncode == 0 and "asked the daemon" in r.stdout and "0 turns ready" in r.stdout, r.stdout + r.stderr
        r = clawd("judge", "--once")
        assert r.returncode == 0 and "backlog of 0 turn(s)" in r.stdout, r.stdout + r.stderr
        r = clawd("train", "--once", "--lr", "0.1")
        assert r.returncode == 1 and "trains with its own settings" in r.stderr
        r = clawd("publish")  # through the daemon: its error, as the daemon words it
        assert r.returncode == 1 and "no trained adapter" in r.stderr, r.stdout + r.stderr
    finally:
        d.stop()
