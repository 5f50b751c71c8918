"""The loop runs by itself: conversations whose next messages carry feedback are judged, trained
on, gated, published and hot-swapped with no manual command (issue 6). The bundled model's judge
is not trusted (its calibration says so), so the user's thumbs, with comments that become OPD
hints, are what it learns from."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
from conftest import Daemon, seed_judge

SYSTEM = "You are a helpful assistant. Answer briefly."
CONVERSATIONS = [
    ("What is the capital of France?", "Thanks, that's exactly right!", 1),
    ("Give me a word that rhymes with cat.", "No, that's wrong. That does not rhyme at all, try again.", -1),
    ("What is 2 + 2?", "Perfect, thank you.", 1),
    ("Name a color of the sky.", "Wrong. I asked for a color, you ignored the question. Redo it.", -1),
]


def test_daemon_judges_trains_publishes_by_itself(fresh_home):
    d = Daemon(seed_judge(fresh_home), "--idle-seconds", "1", "--tick-seconds", "0.5", "--train-batch", "2",
               "--max-train-tokens", "512").start()
    try:
        c = d.client()
        for question, reaction, thumb in CONVERSATIONS:
            first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
            a = c.chat.completions.create(model="clawd", messages=first, max_tokens=24, temperature=0.7)
            follow = first + [{"role": "assistant", "content": a.choices[0].message.content},
                              {"role": "user", "content": reaction}]
            c.chat.completions.create(model="clawd", messages=follow, max_tokens=8)
            r = httpx.post(d.url + "/v1/feedback", json={"id": a.id, "score": thumb, "comment": reaction}, timeout=30)
            assert r.status_code == 200 and r.json()["hint"] is True
        deadline = time.time() + 900
        st = {}
        while time.time() < deadline:
            st = httpx.get(d.url + "/v1/clawd/status", timeout=30).json()
            if st["adapter"] is not None:
                break
            time.sleep(2)
        assert st.get("adapter") is not None, f"no adapter went live; status: {json.dumps(st)[:2000]}"
        version = st["adapter"]["version"]
        assert st["turns"]["judged"] >= 2 and st["turns"]["trained"] >= 2
        r = c.chat.completions.create(model="clawd", messages=[{"role": "system", "content": SYSTEM},
                                                               {"role": "user", "content": "Hello!"}], max_tokens=4)
        assert d.turn(r.id)["adapter_version"] == version
        out = subprocess.run([sys.executable, "-m", "clawd", "status", "--json", "--port", str(d.port)],
                             capture_output=True, text=True, timeout=60)
        cli = json.loads(out.stdout)
        assert cli["adapter"]["version"] == version and cli["turns"]["judged"] >= 2
    finally:
        d.stop()
