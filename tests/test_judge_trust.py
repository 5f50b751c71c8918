"""How far the loop trusts its judge (issue 12): the bundled model's calibration, measured on
the shipped cases, holds its measured floor; a judge below the threshold stops judge-driven
training, and `clawd status` says so."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
from conftest import Daemon, _judge_calibration, seed_judge

from clawd.judge.calibration import Calibration

# Measured by bench/judge/run.py on SmolLM2-135M (bench/results/judge-SmolLM2-135M-Instruct.Q4_1.json,
# 456 cases): cross-validated accuracy 0.78 at the threshold that keeps wrong-sign within 3% with
# the state at half depth, 0.61 with the final hidden state instead, 0.29 from the verdict words
# alone. The floor leaves room for llama.cpp's kernels rounding differently on other CPUs, and
# fails a calibration that reads the final state or lost the hidden state; a broken prompt or fit
# lands near 0.07 (all 0).
FLOOR = 0.70


def calibration() -> Calibration:
    (path,) = _judge_calibration().glob("*.json")
    return Calibration(**json.loads(path.read_text()))


def test_the_bundled_models_judge_holds_its_measured_floor():
    cal = calibration()
    assert cal.model.startswith("SmolLM2") and cal.method == "ask" and cal.cases >= 100
    assert cal.cv_trusted["accuracy"] >= FLOOR
    if cal.threshold is not None and cal.mode != "trusted":
        assert cal.cv["wrong_sign"] == 0.0  # the only verdicts that count made no wrong-sign error


def test_an_untrusted_judge_stops_judge_driven_training_and_status_says_so(fresh_home):
    home = seed_judge(fresh_home)
    (path,) = (home / "judge").glob("*.json")
    cal = json.loads(path.read_text())
    cal.update(mode="feedback_only", threshold=None)  # as calibrate() writes a judge no confidence makes safe
    path.write_text(json.dumps(cal))
    d = Daemon(home, "--idle-seconds", "1", "--tick-seconds", "0.5", "--train-batch", "1").start()
    try:
        c = d.client()
        ids = []
        for question, reaction in (("What is 2 + 2?", "Thanks, that's right."), ("Name a fruit.", "No, wrong.")):
            msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}]
            a = c.chat.completions.create(model="clawd", messages=msgs, max_tokens=8)
            msgs += [{"role": "assistant", "content": a.choices[0].message.content}, {"role": "user", "content": reaction}]
            c.chat.completions.create(model="clawd", messages=msgs, max_tokens=4)
            ids.append(a.id)
        deadline = time.time() + 300
        while time.time() < deadline:
            st = httpx.get(d.url + "/v1/clawd/status", timeout=30).json()
            if st["turns"]["judged"] >= 2:
                break
            time.sleep(0.5)
        assert st["judge"]["mode"] == "feedback_only" and st["judge"]["threshold"] is None
        assert st["turns"]["judged"] >= 2 and st["training"]["ready"] == 0  # judged, but nothing to learn from
        rows = d.rows("SELECT score, probs FROM judgments")
        assert rows and all(r["score"] == 0 and json.loads(r["probs"])["-1"] >= 0 for r in rows)
        out = subprocess.run([sys.executable, "-m", "clawd", "status", "--port", str(d.port)],
                             capture_output=True, text=True, timeout=60)
        assert "explicit feedback only" in " ".join(out.stdout.split()), out.stdout

        # explicit feedback still trains: one thumb makes one turn ready (the round itself is
        # tests/test_loop_e2e.py's business)
        d.stop()
        d2 = Daemon(home, "--idle-seconds", "600").start()  # idle never comes: no round starts under us
        try:
            assert httpx.post(d2.url + "/v1/feedback", json={"id": ids[1], "score": -1}, timeout=30).status_code == 200
            assert httpx.get(d2.url + "/v1/clawd/status", timeout=30).json()["training"]["ready"] == 1
        finally:
            d2.stop()
    finally:
        d.stop()
