"""The anchor set (`train_anchor_coef`): general prompts on which a round keeps the base weights'
own greedy answers as likely as the base finds them.

Why: a style learned from one user leaks into explicit instructions elsewhere. Trained toward
"one paragraph" or "no lists", the 0.5B model starts answering "Write forty-two in digits" with a
sentence. The KL term (`train_kl_coef`) guards only the tokens trained on, which are the user's
own prompts. The anchors guard short, explicitly formatted answers (just the number, yes or no, a
numbered list when one is asked for, a JSON object, a translation).

The prompts (anchors.jsonl) were written by a helper that had read neither the gate's probes nor
the learning bench's. Nine that came out close to one of them were dropped, and
tests/test_train_anchors.py keeps the rest apart. The base's answers are made once per base model
by the trainer's own backend, adapter off, and cached in the home's train/ directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..engine.chat_template import ChatTemplate
from .samples import Sample, render

log = logging.getLogger("clawd.train")

PROMPTS = Path(__file__).with_name("anchors.jsonl")
MAX_ANSWER = 24  # tokens of the base's answer kept: where a format is decided (a number, "yes", "1.")


def load_prompts() -> list[dict[str, str]]:
    return [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]


def anchor_samples(backend: Any, template: ChatTemplate, train_dir: Path, sha: str,
                   checkpoint: Callable[[], None]) -> list[Sample]:
    """One sample per anchor prompt: the prompt as the engine renders it, and the base weights'
    greedy answer (up to MAX_ANSWER tokens, through its end-of-turn token), reward 0."""
    digest = hashlib.sha256((sha + PROMPTS.read_text() + template.source).encode()).hexdigest()[:16]
    cache = train_dir / f"anchors-{digest}.json"
    if cache.is_file():
        pairs = json.loads(cache.read_text())
    else:
        stop = {backend.tokenizer.eos_token_id} | {ids[0] for c in template.control
                                                    if len(ids := backend.tokenizer.convert_tokens_to_ids([c])) == 1
                                                    and ids[0] is not None}
        pairs = []
        for p in load_prompts():
            checkpoint()  # a user's request goes first, as in scoring
            request = {"messages": [{"role": "user", "content": p["prompt"]}], "tools": [], "tool_choice": "none"}
            ids = backend.encode(render(template, request))
            pairs.append([ids, backend.greedy(ids, MAX_ANSWER, stop)])
        train_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(pairs))
        os.replace(tmp, cache)
        log.info("anchors: the base weights answered %d prompts (cached in %s)", len(pairs), cache)
    return [Sample(turn_id=-1, prompt_ids=ids, completion_ids=answer, reward=0.0) for ids, answer in pairs]
