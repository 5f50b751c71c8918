"""What the training tests share (test_train_round, test_train_child, test_grpo, test_train_qlora):
turns put in a real store as the engine would have served them, judged, and read back. Their
fixtures (the dequantized base, the loaded backend, the engine's template, a home) are conftest.py's.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import torch

from clawd.config import Settings, bundled_model_path
from clawd.store.records import Judgment, NextState, Turn
from clawd.store.store import Store
from clawd.train import samples as S

MODEL = bundled_model_path()


def settings(home: Path, **kw) -> Settings:
    return Settings(home=home, threads=1, **kw)


def add_turn(store: Store, engine, user: str, completion: str, kind: str = "main", logprobs=None,
             adapter_version: int | None = None) -> Turn:
    """A served turn. Its completion was not sampled by the engine, so by default it has no recorded
    logprobs (importance weight 1); pass them to play a turn the engine served."""
    template, encode = engine
    sid = store.open_session(f"s-{user}")
    req = {"messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": user}],
           "tools": [], "tool_choice": "none", "temperature": 0.8}
    turn = Turn(session_id=sid, index=store.next_index(sid), kind=kind, completion_id=f"chatcmpl-{user}-{completion}"[:60],
                request=req, prompt_ids=encode(S.render(template, req)), adapter_version=adapter_version)
    store.insert_turn(turn)
    turn.completion_ids = encode(completion, bos=False)
    turn.logprobs = [] if logprobs is None else logprobs(turn)
    turn.text, turn.status, turn.finish_reason = completion, "ok", "stop"
    store.finish_turn(turn)
    store.add_next_state(NextState(turn.id, "user", "thanks", [{"role": "user", "content": "thanks"}]))
    return turn


def judge(store: Store, turn: Turn, score: int, hint: str | None = None) -> None:
    store.add_judgment(Judgment(turn_id=turn.id, method="vote", score=score, judge_model="test", hint=hint))


def logprob(backend, turn: Turn, adapter_dir: Path | None) -> float:
    """Sum of the completion's logprobs under a saved adapter (None: the base weights)."""
    backend.load_lora(adapter_dir) if adapter_dir else backend.reset_lora()
    with torch.no_grad():
        return float(backend.logprobs(turn.prompt_ids + turn.completion_ids, len(turn.prompt_ids)).sum())


def lora_b(adapter_dir: Path) -> list[torch.Tensor]:
    """A saved adapter's LoRA B matrices (zero at the start, so all zero = the round moved nothing)."""
    from safetensors.torch import load_file

    return [v for k, v in load_file(str(adapter_dir / "adapter_model.safetensors")).items() if "lora_B" in k]


def rows(home: Path, sql: str) -> list[sqlite3.Row]:
    con = sqlite3.connect(home / "clawd.db")
    con.row_factory = sqlite3.Row
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def served_logprobs(backend, shift: float = 0.0):
    """The engine's record of a turn served by the base weights, at T = 1 (what it logs), plus `shift`:
    as if the policy that served it found every token e^shift likelier than the base does."""
    def record(turn: Turn) -> list[float]:
        backend.reset_lora()
        with torch.no_grad():
            lp = backend.logprobs(turn.prompt_ids + turn.completion_ids, len(turn.prompt_ids))
        return [float(x) + shift for x in lp]
    return record
