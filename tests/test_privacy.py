"""Private by default: no outbound connections at run time, no message text in the logs."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import Daemon

GUARD = Path(__file__).parent / "netguard"


def test_no_outbound_connections_and_no_text_in_logs(fresh_home, tmp_path):
    record = tmp_path / "outbound.txt"
    record.touch()
    env = {"PYTHONPATH": f"{GUARD}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "CLAWD_NETGUARD_LOG": str(record)}
    d = Daemon(fresh_home, env=env).start()
    secret = "zebra-quartz-7741 is my secret"
    try:
        c = d.client()
        c.chat.completions.create(model="clawd", messages=[{"role": "system", "content": "Be brief."},
                                                           {"role": "user", "content": secret}], max_tokens=8)
        list(c.chat.completions.create(model="clawd", messages=[{"role": "user", "content": secret}], max_tokens=8,
                                       stream=True))
        c.models.list()
    finally:
        d.stop()
    assert record.read_text() == "", f"the daemon tried to reach: {record.read_text()}"
    log = (fresh_home / "clawd.log").read_text()
    assert "turn 1" in log and "zebra-quartz" not in log
