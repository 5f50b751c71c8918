"""A GRPO group's answers read on their shared prompt (batches.shared_prompt, Backend.shared_logprobs):
one pass over the prompt instead of one per answer, the same numbers.

The helpers' tests are fast (no model). The rest run the real training backend on the bundled
SmolLM2 (conftest.py's fixtures): the shared pass against reading each answer whole, values and
gradients, and a whole round both ways.
"""

from __future__ import annotations

import os

import pytest
import torch
from rounds import add_turn, settings

from clawd.store.records import Rollout, RolloutGroup
from clawd.store.store import Store
from clawd.train.batches import micro_steps, shared_prompt, shared_tokens
from clawd.train.loop import run_round
from clawd.train.samples import Sample

fast = pytest.mark.fast


def answer(prompt: list[int], completion: list[int]) -> Sample:
    return Sample(turn_id=1, prompt_ids=prompt, completion_ids=completion, reward=0.0)


@fast
def test_which_groups_share_their_prompt_and_how_a_step_splits_by_hand():
    p = [1, 2, 3, 4]
    group = [answer(p, [5, 6]), answer(p, [7]), answer(p, [8, 9, 10])]
    assert shared_tokens(4, [2, 1, 3]) == 4 + 3 * 3  # the prompt once, each answer padded to the longest
    assert shared_prompt(group, limit=13) == p
    assert shared_prompt(group, limit=12) is None  # the micro-step would be longer than the plan allows
    assert shared_prompt([group[0], answer([1, 2, 3, 9], [5])], limit=100) is None  # cut differently: not one prompt
    assert shared_prompt(group[:1], limit=100) is None  # one answer: nothing to share
    assert shared_prompt([*group, answer(p, [])], limit=100) is None  # an answer of no token is read as before
    assert shared_prompt([answer([1], [5]), answer([1], [6])], limit=100) is None  # no prompt before the last token

    # turns 0-1, a shared group at 2-4, an unshared group at 5-6, an anchor at 7
    assert micro_steps([1, 0, 2, 3, 4, 5, 6, 7], {2: 3}) == [[1], [0], [2, 3, 4], [5], [6], [7]]
    assert micro_steps([5, 6, 2, 3, 4], {2: 3}) == [[5], [6], [2, 3, 4]]
    with pytest.raises(AssertionError):
        micro_steps([2, 4, 3], {2: 3})


def ids(backend, text: str) -> list[int]:
    out = backend.encode(text)
    return out[1:] if out and out[0] == backend.tokenizer.bos_token_id else out


def test_a_groups_answers_on_one_prompt_score_and_train_as_each_read_whole(backend):
    """Against `logprobs_at` on prompt + answer, per answer: the logprobs at two temperatures,
    adapter on (with gradient) and off, and the LoRA gradient of their sum. An adapter with
    nonzero weights, so that both LoRA factors get gradient. Measured differences here: 1.5e-5 nats
    and 9e-5 of a largest gradient element of 34, fp32 rounding of the same sums in another order."""
    assert backend.shares_prompts  # the probe at load passed on this model and this transformers
    prompt = backend.encode("<|im_start|>user\nName three fruits and say why each is good.<|im_end|>\n<|im_start|>assistant\n")
    answers = [ids(backend, t) for t in ("Apples, pears and plums.", "Kiwi.",
                                         "Bananas: they are rich in potassium and easy to carry around.")]
    temps = (0.7, 1.0)
    saved = backend.lora_state()
    torch.manual_seed(1)
    backend.set_lora_state({k: torch.randn_like(v) * 0.02 for k, v in saved.items()})
    try:
        got, want = [], []
        for out, read in ((got, lambda: backend.shared_logprobs(prompt, answers, temps)),
                          (want, lambda: [backend.logprobs_at(prompt + a, len(prompt), temps) for a in answers])):
            lps = read()
            torch.stack([x.sum() for x in lps]).sum().backward()
            out.append((lps, torch.cat([p.grad.flatten() for p in backend.lora])))
            backend.model.zero_grad(set_to_none=True)
        (shared, g_shared), (whole, g_whole) = got[0], want[0]
        assert [tuple(x.shape) for x in shared] == [(2, len(a)) for a in answers]
        for a, b in zip(shared, whole):
            torch.testing.assert_close(a.detach(), b.detach(), atol=1e-3, rtol=0)
        assert float((g_shared - g_whole).norm()) <= 1e-3 * float(g_whole.norm())
        with torch.no_grad():
            for a, b in zip(backend.shared_logprobs(prompt, answers, temps, adapter=False),
                            [backend.logprobs_at(prompt + x, len(prompt), temps, adapter=False) for x in answers]):
                torch.testing.assert_close(a, b, atol=1e-3, rtol=0)
    finally:
        backend.set_lora_state(saved)


def test_a_round_on_shared_prompts_trains_what_reading_each_answer_whole_trains(tmp_path, base, backend, engine,
                                                                                monkeypatch):
    """The same group, the same settings (the KL term on, so the base is scored too; the engine's
    logprobs recorded, so the importance weights are taken), two rounds: the group read on its
    shared prompt, then each answer whole. The same losses step by step and the same adapter."""
    _, encode = engine
    texts = ["A pear.", "Banana banana banana banana.", "A plum, which is sweet.", "Kiwi kiwi kiwi kiwi."]
    results = []
    for share in (True, False):
        monkeypatch.setattr(backend, "shares_prompts", share)
        home = tmp_path / f"home-{share}"
        (home / "train").mkdir(parents=True)
        os.symlink(base[1], home / "train" / base[1].name)
        store = Store(home / "clawd.db")
        t = add_turn(store, engine, "Name a fruit.", "Apple.")
        backend.reset_lora()
        with torch.no_grad():  # as the engine would record a sample from the base weights, at T = 1
            served = [backend.logprobs(t.prompt_ids + encode(a, bos=False), len(t.prompt_ids)).tolist() for a in texts]
        store.add_group(RolloutGroup(t.id, "sampled", None, 0.8, [
            Rollout(encode(a, bos=False), a, lp, r) for a, lp, r in zip(texts, served, [0.9, 0.1, 0.8, 0.2])],
            scorer="trusted"))
        s = settings(home, lr=5e-4, train_method="grpo", grpo_k=4, train_kl_coef=0.05)
        result = run_round(s, store=store, backend=backend)
        store.close()
        backend.load_lora(result.path)
        with torch.no_grad():
            after = [float(backend.logprobs(t.prompt_ids + encode(a, bos=False), len(t.prompt_ids)).sum()) for a in texts]
        results.append((result.metrics, after))
    (shared, after_shared), (whole, after_whole) = results
    assert shared["shared_prompt_groups"] == 1 and whole["shared_prompt_groups"] == 0
    assert shared["steps"] == whole["steps"] == 2
    assert shared["losses"] == pytest.approx(whole["losses"], rel=1e-3, abs=1e-6)
    assert shared["kl_to_base"] == pytest.approx(whole["kl_to_base"], rel=1e-3, abs=1e-7)
    assert shared["tis_weight_mean"] == pytest.approx(whole["tis_weight_mean"], rel=1e-4)
    assert after_shared == pytest.approx(after_whole, abs=1e-3)
    assert after_shared[0] != pytest.approx(after_whole[1], abs=1e-3)  # it did train: the answers differ


def test_the_probe_at_load_refuses_a_shared_pass_that_loses_its_prompt(backend, monkeypatch):
    """Without the switch that lets the blocks keep the cache under gradient checkpointing,
    transformers drops it and each answer is read with no prompt at all: the failure the probe at
    load is there to catch, on this very transformers."""
    import contextlib

    import clawd.train.backend as B
    from clawd.train.prompt_cache import probe_shared_prompts

    assert probe_shared_prompts(backend)
    monkeypatch.setattr(B, "cache_under_checkpointing", lambda model: contextlib.nullcontext())
    assert not probe_shared_prompts(backend)
    assert all(p.grad is None for p in backend.lora)  # the probe leaves no gradient behind
