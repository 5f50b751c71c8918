"""The anchor prompts (clawd/train/anchors.jsonl, train_anchor_coef) stay apart from what measures
general ability: the gate's probes and everything the benches ask."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clawd.publish import probes as P
from clawd.train.anchors import load_prompts

FORMAT_WORDS = {"the", "a", "an", "of", "is", "in", "what", "and", "to", "with", "only", "just", "answer", "reply",
                "write", "give", "as", "one", "word"}


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) - FORMAT_WORDS


@pytest.mark.fast
def test_anchor_prompts_ask_nothing_the_gate_or_the_benches_ask():
    anchors = load_prompts()
    assert len(anchors) >= 20 and len({a["id"] for a in anchors}) == len(anchors)
    root = Path(__file__).parent.parent / "bench"
    asked = [p.q for p in P.load_probes()]
    for f in [*root.rglob("*.py"), *root.rglob("data/*.json")]:
        asked += re.findall(r'"([^"\n]{12,300})"', f.read_text())
    for a in anchors:
        mine = words(a["prompt"])
        close = [q for q in asked if len(mine & words(q)) / len(mine | words(q)) >= 0.7]
        assert not close, (a, close)  # a near copy would teach what they measure
