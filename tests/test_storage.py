"""A full disk under a live daemon, a database it may not write at start (issue 8): each refused request gets a
clear 503 that says why, nothing a client was answered is missing, the database stays intact,
and the daemon serves again by itself once it can write. The home directory lives on a small
tmpfs of its own, which needs the right to mount (root here and in CI), and `chattr +i` makes the
database unwritable even for root; elsewhere these skip."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest
from conftest import Daemon


def tmpfs(path: Path, size: str):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): run as root to test a full disk")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def small_disk(tmp_path):
    yield from tmpfs(tmp_path / "disk", "6m")


@pytest.fixture
def adapter_disk(tmp_path):  # room for one adapter of the bundled model (20 MB in f32)
    yield from tmpfs(tmp_path / "disk", "32m")


def fill(path: Path) -> Path:
    """Write zeros until the file system says ENOSPC."""
    filler = path / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


def ask(d: Daemon, text: str, stream: bool = False) -> httpx.Response:
    body = {"model": "clawd", "max_tokens": 4, "temperature": 0, "stream": stream,
            "messages": [{"role": "user", "content": text}]}
    return httpx.post(d.url + "/v1/chat/completions", json=body, timeout=120)


def check_answered(d: Daemon, answered: list[str]) -> None:
    con = sqlite3.connect(d.db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for cid in answered:
            row = con.execute("SELECT status FROM turns WHERE completion_id = ?", (cid,)).fetchone()
            assert row == ("ok",), f"answered turn {cid}: {row}"
    finally:
        con.close()


def truncate_wal(d: Daemon) -> None:
    """Empty SQLite's write-ahead log, so the daemon's next write has to grow the file (a full or
    unwritable disk refuses that) instead of reusing room the log already holds."""
    con = sqlite3.connect(d.db)
    try:
        busy = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        assert busy == 0
    finally:
        con.close()


def refused(d: Daemon, why: str) -> None:
    """The next request is refused with a 503 that names the cause; the daemon stays up."""
    r = ask(d, "Are you recording this?")
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["code"] == "storage_unavailable" and why in err["message"], err
    assert int(r.headers["retry-after"]) > 0
    assert httpx.get(d.url + "/health", timeout=10).status_code == 200
    assert httpx.get(d.url + "/v1/clawd/status", timeout=10).status_code == 200


def test_full_disk_refuses_then_recovers(small_disk):
    d = Daemon(small_disk / "home", "--auto-learn", "false").start()
    try:
        answered = []
        r = ask(d, "Hello there.")
        assert r.status_code == 200
        answered.append(r.json()["id"])

        truncate_wal(d)
        filler = fill(small_disk)
        refused(d, "database or disk is full")
        filler.unlink()
        r = ask(d, "Space again?")
        assert r.status_code == 200, r.text
        answered.append(r.json()["id"])
        check_answered(d, answered)

        r = ask(d, "Streaming again?", stream=True)
        assert r.status_code == 200 and "[DONE]" in r.text
        r = ask(d, "And once more.")
        answered.append(r.json()["id"])
        check_answered(d, answered)
    finally:
        d.stop()
    assert (os.stat(small_disk / "home").st_mode & 0o777) == 0o700


def test_adapter_conversion_on_a_full_disk_leaves_nothing(adapter_disk, tmp_path):
    """Publishing's write (peft → GGUF) fails with the OS's error and leaves no partial file."""
    from publish_util import make_adapter

    from clawd.config import bundled_model_path
    from clawd.publish import ConvertError, convert_adapter
    from clawd.publish.convert import BaseInfo

    peft_dir = make_adapter(tmp_path / "peft", sigma=0.01)
    out = adapter_disk / "adapter.gguf"
    filler = fill(adapter_disk)
    with pytest.raises(ConvertError, match="cannot write the adapter .* MiB free"):
        convert_adapter(peft_dir, BaseInfo.of(bundled_model_path()), out)
    assert sorted(p.name for p in adapter_disk.iterdir()) == ["filler"]
    filler.unlink()
    subprocess.run(["chattr", "+i", str(adapter_disk)], check=True)  # a directory it may not write in
    try:
        with pytest.raises(ConvertError, match="Operation not permitted"):
            convert_adapter(peft_dir, BaseInfo.of(bundled_model_path()), out)
    finally:
        subprocess.run(["chattr", "-i", str(adapter_disk)], check=True)
    assert sorted(p.name for p in adapter_disk.iterdir()) == []
    convert_adapter(peft_dir, BaseInfo.of(bundled_model_path()), out)
    assert out.stat().st_size > 0


def test_unwritable_database_stops_the_start_with_a_clear_error(tmp_path):
    """`chattr +i`: not even root may write the file. A daemon that could not record refuses to
    start, says why, and starts normally once the file is writable again."""
    home = tmp_path / "home"
    d = Daemon(home, "--auto-learn", "false").start()
    d.stop()
    if subprocess.run(["chattr", "+i", str(d.db)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i is not permitted here (needs root and a file system that supports it)")
    try:
        d = Daemon(home, "--auto-learn", "false")
        with pytest.raises(RuntimeError, match="exited with 1"):
            d.start()
        log = d.log.read_text()
        assert "cannot write the database" in log and "Traceback" not in log
    finally:
        subprocess.run(["chattr", "-i", str(d.db)], check=True)
    d = Daemon(home, "--auto-learn", "false").start()
    try:
        assert ask(d, "Hello again.").status_code == 200
    finally:
        d.stop()
