"""Merging, and conversion agreement on an f32 base (tight).

The f32 GGUF base is the bundled Q4_1 model dequantized and written back with clawd's own merge
writer (no adapter): the same weights transformers dequantizes, so llama.cpp (f32 base +
converted adapter) and transformers (+ peft) differ only by arithmetic — KL < 1e-3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from publish_util import hf_logprobs, make_adapter
from test_publish_convert import PROMPTS, kl_tv, next_token_logprobs

from clawd.config import Settings, bundled_model_path
from clawd.engine.engine import Engine
from clawd.publish.convert import BaseInfo, convert_adapter
from clawd.publish.merge import write_merged
from clawd.store.records import GateResult
from clawd.store.store import Store


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("merge")
    make_adapter(d / "peft", sigma=0.1, seed=5)
    base = bundled_model_path()
    convert_adapter(d / "peft", BaseInfo.of(base), d / "adapter.gguf", dtype="f32")
    write_merged(base, [], d / "base-f32.gguf", "f32")
    return d


def logprobs(model: Path, adapter: Path | None, text: str) -> np.ndarray:
    engine = Engine(model, n_ctx=256, threads=1)
    engine.set_adapter(adapter, 1 if adapter else None)
    return next_token_logprobs(engine, engine.tokenize(text))


def test_f32_base_agrees_tightly_with_peft(work):
    engine = Engine(work / "base-f32.gguf", n_ctx=256, threads=1)
    engine.set_adapter(work / "adapter.gguf", 1)
    for text in PROMPTS:
        ids = engine.tokenize(text)
        kl, tv = kl_tv(hf_logprobs(ids), next_token_logprobs(engine, ids))
        assert kl < 1e-3 and tv < 0.02, (text, kl, tv)


def test_merged_weights_equal_base_plus_adapter(work):
    write_merged(bundled_model_path(), [work / "peft"], work / "merged-f32.gguf", "f32")
    text = PROMPTS[0]
    kl, _ = kl_tv(logprobs(work / "base-f32.gguf", work / "adapter.gguf", text),
                  logprobs(work / "merged-f32.gguf", None, text))
    assert kl < 1e-4, kl  # the same function: W + (alpha/r)·B·A, q/k rows permuted like W


def test_clawd_merge(work, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    store = Store(home / "clawd.db")
    from clawd.publish import Adapters

    adapters = Adapters(Settings(home=home), store)
    vdir = adapters.registry.dir(1)
    shutil.copytree(work / "peft", vdir)  # as the trainer would have written it
    adapters.registry.sync()
    convert_adapter(vdir, BaseInfo.of(bundled_model_path()), adapters.registry.gguf(1))
    store.set_adapter_status(1, "published", gate=GateResult(True, []))
    adapters.use(1)
    store.close()

    env = {**os.environ, "CLAWD_HOME": str(home)}
    r = subprocess.run([sys.executable, "-m", "clawd", "merge", "--offline", "--threads", "1", "--port", "1"], env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert "quantizing: 100%" in r.stderr  # progress shown
    merged = home / "models/merged-0001.gguf"
    assert json.loads((home / "config.json").read_text())["model"] == str(merged)
    assert not (home / "adapters/current").exists()  # the chain restarts from the merged model
    record = json.loads((home / "models/merged.json").read_text())
    assert record["base"] == str(bundled_model_path()) and record["version"] == 1
    ftype = gguf.GGUFReader(str(merged)).fields["general.file_type"].contents()
    assert ftype == 7  # MOSTLY_Q8_0: the base is Q4_1, which would round the adapter away
    # it carries the adapter: the next-token distribution is base+adapter's, within Q8_0 rounding
    text = PROMPTS[0]
    target = logprobs(bundled_model_path(), work / "adapter.gguf", text)
    assert kl_tv(target, logprobs(merged, None, text))[0] < 0.05 * kl_tv(target, logprobs(bundled_model_path(), None, text))[0]
