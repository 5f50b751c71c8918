"""The policy loss on hand-built tensors: signs, clipping, advantages, masks, importance weights,
the KL-to-base term, OPD over the teacher's top-K; and the tempered token logprobs it is fed, against a hand computation."""

from __future__ import annotations

import math
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from clawd.train.backend import Backend, train_tokens
from clawd.train.loss import K3_MAX, group_advantages, grpo_loss, keep_floor, kl_k3, policy_loss, tis_weight, topk_kl

pytestmark = pytest.mark.fast  # no model, no daemon


def grad_of(logp, old, teacher, reward, mask, **w):
    logp = logp.clone().requires_grad_(True)
    loss = policy_loss(logp, old, teacher, reward, mask, **w)
    loss.backward()
    return loss.detach(), logp.grad


def test_binary_rl_signs():
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    mask = torch.ones(1, 3)
    for r in (1.0, -1.0):
        loss, g = grad_of(old, old, old, torch.tensor([r]), mask, w_opd=0.0)
        assert loss.item() == pytest.approx(-r)  # ratio 1: L = -A
        # gradient descent moves logp by -g: up for a positive reward, down for a negative one
        assert torch.all(-g * r > 0)
        assert g == pytest.approx(torch.full((1, 3), -r / 3))  # token mean: 1/3 each


def test_zero_reward_and_no_hint_gives_zero_gradient():
    old = torch.log(torch.tensor([[0.2, 0.7]]))
    logp = old + torch.tensor([[0.1, -0.3]])  # even away from π_old
    loss, g = grad_of(logp, old, old, torch.tensor([0.0]), torch.ones(1, 2))
    assert loss.item() == 0.0 and torch.all(g == 0)


def test_clipping_at_0_8_and_1_28():
    old = torch.zeros(1, 4)
    ratios = torch.tensor([[1.5, 1.1, 0.7, 0.9]])
    logp = torch.log(ratios)
    mask = torch.ones(1, 4)
    # A = +1: ratios above 1.28 are clipped (no gradient), below are not
    loss, g = grad_of(logp, old, old, torch.tensor([1.0]), mask, w_opd=0.0)
    expected = -(1.28 + 1.1 + 0.7 + 0.9) / 4
    assert loss.item() == pytest.approx(expected)
    assert g[0, 0] == 0 and torch.all(g[0, 1:] != 0)
    # A = -1: ratios below 0.8 are clipped (no gradient), above are not
    loss, g = grad_of(logp, old, old, torch.tensor([-1.0]), mask, w_opd=0.0)
    assert loss.item() == pytest.approx((1.5 + 1.1 + 0.8 + 0.9) / 4)
    assert g[0, 2] == 0 and torch.all(g[0, [0, 1, 3]] != 0)


def test_opd_advantage_is_teacher_minus_old():
    old = torch.log(torch.tensor([[0.25, 0.5, 0.1]]))
    teacher = torch.log(torch.tensor([[0.5, 0.25, 0.1]]))
    loss, g = grad_of(old, old, teacher, torch.tensor([0.0]), torch.ones(1, 3), w_rl=1.0, w_opd=1.0)
    adv = teacher - old  # (+log 2, -log 2, 0)
    assert loss.item() == pytest.approx(-adv.mean().item(), abs=1e-6)
    assert g == pytest.approx(-adv / 3)  # ratio 1: dL/dlogp = -A / T
    assert g[0, 0] < 0 < g[0, 1] and g[0, 2] == 0  # preferred token pushed up, dispreferred down


def test_combined_is_the_weighted_sum():
    old = torch.log(torch.tensor([[0.3, 0.6]]))
    teacher = torch.log(torch.tensor([[0.6, 0.3]]))
    r = torch.tensor([-1.0])
    mask = torch.ones(1, 2)
    _, g_rl = grad_of(old, old, teacher, r, mask, w_rl=1.0, w_opd=0.0)
    _, g_opd = grad_of(old, old, teacher, r, mask, w_rl=0.0, w_opd=1.0)
    _, g_both = grad_of(old, old, teacher, r, mask, w_rl=0.5, w_opd=2.0)
    assert g_both == pytest.approx(0.5 * g_rl + 2.0 * g_opd)
    assert g_opd[0, 0] == pytest.approx(-math.log(2) / 2)


def test_masks_and_batch_mean():
    # two samples, the second padded to length 3: its padding gets no gradient and does not dilute its mean
    old = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    logp = torch.tensor([[0.0, 0.0, 0.0], [0.0, 5.0, -5.0]])  # garbage in the padding
    loss, g = grad_of(logp, old, old, torch.tensor([1.0, 1.0]), mask, w_opd=0.0)
    assert loss.item() == pytest.approx(-1.0)  # (mean over 3 tokens of -1) and (mean over 1 token of -1), averaged
    assert torch.all(g[1, 1:] == 0)
    assert g[0, 0] == pytest.approx(-1 / 3 / 2) and g[1, 0] == pytest.approx(-1 / 2)


def test_importance_weight_scales_each_token_and_is_capped():
    # a stale turn: the serving policy gave its tokens e^-1, 0.5 and 0.05; π_old gives 0.5, 0.5, 0.5
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    rollout = torch.log(torch.tensor([[math.exp(-1), 0.5, 0.05]]))
    w = tis_weight(old, rollout, cap=2.0)
    assert w == pytest.approx(torch.tensor([[0.5 * math.e, 1.0, 2.0]]), rel=1e-5)  # 10 capped at 2
    _, g_plain = grad_of(old, old, old, torch.tensor([1.0]), torch.ones(1, 3), w_opd=0.0)
    logp = old.clone().requires_grad_(True)
    policy_loss(logp, old, old, torch.tensor([1.0]), torch.ones(1, 3), w_opd=0.0, weight=w).backward()
    assert logp.grad == pytest.approx(w * g_plain)  # per token, not per sample
    assert not w.requires_grad


def test_kl_k3_by_hand_and_its_pull_toward_the_base():
    base = torch.log(torch.tensor([[0.5, 0.2, 0.3]]))
    logp = torch.log(torch.tensor([[0.5, 0.4, 0.1]])).requires_grad_(True)
    k3 = kl_k3(logp, base)
    by_hand = [r - math.log(r) - 1 for r in (0.5 / 0.5, 0.2 / 0.4, 0.3 / 0.1)]  # r = π_base / π_θ
    assert k3.detach()[0] == pytest.approx(torch.tensor(by_hand), rel=1e-5)
    assert k3[0, 0].item() == 0 and torch.all(k3 >= 0)
    k3.sum().backward()
    # gradient 1 − π_base/π_θ: none where they agree, descent lowers a token the adapter overrates, raises one it underrates
    assert logp.grad[0] == pytest.approx(torch.tensor([0.0, 0.5, -2.0]), abs=1e-5)
    assert kl_k3(torch.tensor([[-30.0]]), torch.tensor([[0.0]])).item() == K3_MAX  # capped


def test_keep_floor_by_hand_pulls_only_what_fell_below_the_base():
    base = torch.log(torch.tensor([[0.5, 0.2, 0.3]]))
    logp = torch.log(torch.tensor([[0.5, 0.4, 0.1]])).requires_grad_(True)
    floor = keep_floor(logp, base)
    assert floor.detach()[0] == pytest.approx(torch.tensor([0.0, 0.0, math.log(3)]), abs=1e-6)
    floor.sum().backward()
    # −∇log π_θ on the token that fell (from the first nat, unlike k3's 1 − π_base/π_θ); nothing on the rest
    assert logp.grad[0] == pytest.approx(torch.tensor([0.0, 0.0, -1.0]), abs=1e-6)
    assert base.grad is None


def test_kl_term_adds_to_the_surrogate():
    old = torch.log(torch.tensor([[0.5, 0.5]]))
    base = torch.log(torch.tensor([[0.25, 0.5]]))
    mask, r = torch.ones(1, 2), torch.tensor([1.0])
    loss0, g0 = grad_of(old, old, old, r, mask, w_opd=0.0, base_logp=base, kl_coef=0.0)
    loss1, g1 = grad_of(old, old, old, r, mask, w_opd=0.0, base_logp=base, kl_coef=0.1)
    k3 = kl_k3(old, base)
    assert loss1.item() == pytest.approx(loss0.item() + 0.1 * k3.mean().item(), rel=1e-5)
    assert g1 == pytest.approx(g0 + 0.1 * torch.tensor([[1 - 0.5, 0.0]]) / 2, abs=1e-6)


class _Fixed(torch.nn.Module):
    """A "model" whose logits are given: position t of any input gets row t of `z`."""

    def __init__(self, z: torch.Tensor):
        super().__init__()
        self.z = z  # (T, V)

    def forward(self, input_ids, logits_to_keep, use_cache):
        return SimpleNamespace(logits=self.z[None, -logits_to_keep:])

    def disable_adapter(self):
        return nullcontext()


def test_logprobs_are_taken_at_the_temperature():
    z = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 0.5, -1.0], [9.0, 9.0, 9.0, 9.0]])  # (T=3, V=4)
    b = object.__new__(Backend)
    b.model, b.device, b.name = _Fixed(z), torch.device("cpu"), "fixed"
    ids = [2, 0, 2]  # prompt [2]; completion tokens 0 (given row 0) and 2 (given row 1)

    def by_hand(row, token, t):
        return z[row, token].item() / t - math.log(sum(math.exp(v / t) for v in z[row].tolist()))

    for t in (1.0, 0.8, 0.5):
        expected = [by_hand(0, 0, t), by_hand(1, 2, t)]
        assert b.logprobs(ids, 1, temperature=t).tolist() == pytest.approx(expected, rel=1e-5)
    both = b.logprobs_at(ids, 1, (0.8, 1.0))
    assert both.shape == (2, 2) and both[1].tolist() == pytest.approx([by_hand(0, 0, 1.0), by_hand(1, 2, 1.0)])
    assert math.exp(by_hand(0, 0, 0.8)) == pytest.approx(0.7183, abs=1e-4)  # p0.8 of the top token, sharper than p1's 0.6439


def test_max_train_tokens_by_device():
    assert train_tokens(0, cuda=False) == 8192 and train_tokens(0, cuda=True) == 16384
    assert train_tokens(4096, cuda=True) == 4096
    with pytest.raises(ValueError, match="at least 128"):
        train_tokens(64, cuda=False)


# -- GRPO ----------------------------------------------------------------------------------------
def test_group_advantages_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0],   # two of four accepted: ±0.5
                            [0.9, 0.9, 0.9, 0.9],   # all alike: nothing to learn
                            [0.2, 0.4, 0.6, 0.8]])
    assert group_advantages(rewards) == pytest.approx(torch.tensor([[0.5, -0.5, -0.5, 0.5],
                                                                    [0.0, 0.0, 0.0, 0.0],
                                                                    [-0.3, -0.1, 0.1, 0.3]]))
    # not divided by the group's spread: judge noise stays noise-sized
    noisy = group_advantages(torch.tensor([[0.90, 0.91, 0.90, 0.90]]))
    assert noisy.abs().max().item() == pytest.approx(0.0075)


def test_group_advantages_in_units_of_the_spread_by_hand():
    """grpo_spread_norm: best and worst answers 2 apart, as an accepted and a rejected turn."""
    rewards = torch.tensor([[0.53, 0.33, 0.29, 0.25],   # spread 0.28: mean 0.35, × 2 / 0.28
                            [1.0, 0.0, 0.0, 0.0],       # spread 1: just doubled
                            [0.6, 0.6, 0.6, 0.6]])      # all alike: still nothing, not 0/0
    got = group_advantages(rewards, spread=True)
    assert got == pytest.approx(torch.tensor([[0.18 / 0.14, -0.02 / 0.14, -0.06 / 0.14, -0.10 / 0.14],
                                              [1.5, -0.5, -0.5, -0.5],
                                              [0.0, 0.0, 0.0, 0.0]]), abs=1e-5)
    assert (got.max(-1).values - got.min(-1).values)[:2] == pytest.approx(torch.tensor([2.0, 2.0]))
    assert got.sum(-1) == pytest.approx(torch.zeros(3), abs=1e-5)  # still centered: the group's sum is 0


def test_group_advantages_less_what_length_explains_by_hand():
    """grpo_length_neutral: the slope of the advantages on the answers' token counts, within each
    group, taken out. Group 1: centered rewards (+0.4, -0.4, +0.1, -0.1), lengths centered
    (-10, +10, 0, 0): slope (-4 - 4) / 200 = -0.04, so the short/long pair is all length (0, 0) and
    the two of equal length keep their ±0.1. Group 2: equal lengths, nothing to take out."""
    rewards = torch.tensor([[0.9, 0.1, 0.6, 0.4], [0.9, 0.1, 0.6, 0.4]])
    lengths = torch.tensor([[10, 30, 20, 20], [20, 20, 20, 20]])
    got = group_advantages(rewards, lengths=lengths)
    assert got == pytest.approx(torch.tensor([[0.0, 0.0, 0.1, -0.1], [0.4, -0.4, 0.1, -0.1]]), abs=1e-6)
    # with the spread: the rewards' own factor (2 / 0.8), not the remainder's (which would make ±0.1 into ±1)
    assert group_advantages(rewards, spread=True, lengths=lengths)[0] == pytest.approx(
        torch.tensor([0.0, 0.0, 0.25, -0.25]), abs=1e-6)
    assert (got * (lengths - lengths.float().mean(-1, keepdim=True))).sum(-1) == pytest.approx(torch.zeros(2), abs=1e-5)


def test_grpo_normalizes_over_the_batchs_tokens():
    """Two answers, of 1 and 3 tokens, advantages +1 and -1, at ratio 1: the loss is the token mean
    over all 4 tokens, so every token's gradient is ∓1/4 whatever its answer's length."""
    old = torch.log(torch.tensor([[0.5, 1.0, 1.0], [0.5, 0.5, 0.5]]))
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    logp = old.clone().requires_grad_(True)
    loss = grpo_loss(logp, old, torch.tensor([1.0, -1.0]), mask)
    loss.backward()
    assert loss.item() == pytest.approx(-(1 - 3) / 4)  # -(Σ A over tokens) / tokens
    assert logp.grad == pytest.approx(torch.tensor([[-0.25, 0.0, 0.0], [0.25, 0.25, 0.25]]))
    # the per-answer mean would have given the lone token 3 times the weight of each of the others
    per_answer = old.clone().requires_grad_(True)
    policy_loss(per_answer, old, old, torch.tensor([1.0, -1.0]), mask, w_opd=0.0).backward()
    assert per_answer.grad[0, 0] / per_answer.grad[1, 0] == pytest.approx(-3.0)


def test_what_a_groups_answers_share_is_pushed_only_under_the_token_mean():
    """A group of a short favoured answer (1 token, A = +1) and a long one (3 tokens, A = -1), and
    one parameter θ that raises every token's logprob alike: what the answers share. At ratio 1,
    dL/dθ = -Σ_b Σ_t w_bt A_b. Under the token mean the long answer's 3 tokens outweigh the short
    one's 1, so θ is pushed down: (3 - 1) / 4 = +0.5. Under the per-answer mean each answer
    weighs alike and the advantages sum to 0: no push. Each token inside one answer still gets
    A_b / L_b."""
    old = torch.log(torch.tensor([[0.5, 1.0, 1.0], [0.5, 0.5, 0.5]]))
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -1.0])
    for answer_mean, push in ((False, 0.5), (True, 0.0)):
        theta = torch.zeros((), requires_grad=True)
        grpo_loss(old + theta, old, adv, mask, answer_mean=answer_mean).backward()
        assert theta.grad.item() == pytest.approx(push, abs=1e-7)
    logp = old.clone().requires_grad_(True)
    loss = grpo_loss(logp, old, adv, mask, answer_mean=True)
    loss.backward()
    assert loss.item() == pytest.approx(-(1 / 1 - 3 / 3) / 2)
    assert logp.grad == pytest.approx(torch.tensor([[-0.5, 0.0, 0.0], [1 / 6, 1 / 6, 1 / 6]]))


def test_the_clip_acts_in_the_second_epoch():
    """Epoch 1 at ratio 1 moves the answer's logprobs; after a large enough step the ratio passes
    1 + 0.28 and epoch 2's gradient on those tokens is zero (the clip stops a positive advantage
    from pushing further), while a token still inside the clip keeps its gradient."""
    old = torch.log(torch.tensor([[0.2, 0.2]]))
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2)
    theta = old.clone().requires_grad_(True)
    grpo_loss(theta, old, adv, mask).backward()  # epoch 1: ratio 1, both tokens pushed up
    assert torch.all(theta.grad < 0)
    with torch.no_grad():
        theta += torch.tensor([[0.4, 0.1]])  # the update: token 0 past the clip (e^0.4 = 1.49), token 1 not
    theta.grad = None
    loss = grpo_loss(theta, old, adv, mask)  # epoch 2, same group, same π_old
    loss.backward()
    assert theta.grad[0, 0] == 0 and theta.grad[0, 1] < 0
    assert loss.item() == pytest.approx(-(1.28 + math.exp(0.1)) / 2)


def test_grpo_kl_term():
    old = torch.log(torch.tensor([[0.5, 0.5]]))
    base = torch.log(torch.tensor([[0.25, 0.5]]))
    loss = grpo_loss(old, old, torch.tensor([0.0]), torch.ones(1, 2), base, kl_coef=0.5)
    k3 = math.exp(math.log(0.5)) - math.log(0.5) - 1  # δ = log 0.25 − log 0.5 on token 0, 0 on token 1
    assert loss.item() == pytest.approx(0.5 * k3 / 2)


def test_topk_kl_by_hand():
    # the teacher's two likeliest tokens at 0.3 and 0.1: renormalized q = (0.75, 0.25)
    teacher = torch.log(torch.tensor([[[0.3, 0.1]]]))  # (B=1, T=1, K=2)
    student = torch.log(torch.tensor([[[0.5, 0.25]]])).requires_grad_(True)
    kl = topk_kl(student, teacher)
    assert kl.shape == (1, 1)
    # 0.75·log(0.75/0.5) + 0.25·log(0.25/0.25)
    assert kl.item() == pytest.approx(0.75 * math.log(1.5), abs=1e-6)
    kl.sum().backward()
    assert student.grad[0, 0].tolist() == pytest.approx([-0.75, -0.25])  # each of the K pushed up by its q
    q = torch.tensor([[[0.75, 0.25]]])
    assert topk_kl(q.log(), teacher).item() == pytest.approx(0.0, abs=1e-6)  # the student is q: nothing to learn
    assert topk_kl((0.5 * q).log(), teacher).item() == pytest.approx(math.log(2), abs=1e-6)  # mass outside the K costs


def test_topk_opd_replaces_the_sampled_tokens_advantage():
    old = torch.log(torch.tensor([[0.25, 0.5]]))  # (B=1, T=2)
    teacher = torch.log(torch.tensor([[0.5, 0.25]]))  # would give advantages (+log 2, -log 2)
    at = torch.log(torch.tensor([[[0.5, 0.25], [0.5, 0.25]]]))  # (1, 2, K=2), the student at the teacher's top-2
    top = torch.log(torch.tensor([[[0.3, 0.1], [0.1, 0.3]]]))
    for w_rl, reward in ((0.0, 0.0), (1.0, 1.0)):
        at_ = at.clone().requires_grad_(True)
        logp = old.clone().requires_grad_(True)
        loss = policy_loss(logp, old, teacher, torch.tensor([reward]), torch.ones(1, 2), w_rl=w_rl, w_opd=2.0,
                           topk=(at_, top))
        loss.backward()
        kl = topk_kl(at, top)  # (1, 2): 0.75·log 1.5 and 0.25·log(0.25/0.5) + 0.75·log(0.75/0.25)
        assert kl[0].tolist() == pytest.approx([0.75 * math.log(1.5), 0.25 * math.log(0.5) + 0.75 * math.log(3)])
        # the surrogate holds the reward alone (the teacher's rating of the sampled token is not in it),
        # and the KL is added with weight w_opd, token-mean per sample
        assert loss.item() == pytest.approx(-w_rl * reward + 2.0 * kl.mean().item(), abs=1e-6)
        assert logp.grad[0].tolist() == pytest.approx([-w_rl * reward / 2] * 2)
        assert at_.grad[0, 0].tolist() == pytest.approx([-2.0 * 0.75 / 2, -2.0 * 0.25 / 2])


def test_teacher_topk_and_the_students_logprobs_at_it():
    z = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 0.5, -1.0], [9.0, 9.0, 9.0, 9.0]])  # (T=3, V=4)
    b = object.__new__(Backend)
    b.model, b.device, b.name = _Fixed(z), torch.device("cpu"), "fixed"
    ids = [2, 0, 2]  # prompt [2]; completion tokens 0 (given row 0) and 2 (given row 1)
    lp, top_ids, top_lp = b.teacher_topk(ids, 1, 2, temperature=0.8)
    full = torch.log_softmax(z[:2] / 0.8, -1)  # (C=2, V)
    assert top_ids.tolist() == [[0, 1], [1, 2]]  # row 0: logits 3, 2; row 1: logits 1, 0.5
    assert top_lp.flatten().tolist() == pytest.approx(full[[0, 0, 1, 1], [0, 1, 1, 2]].tolist())
    assert lp.tolist() == pytest.approx(b.logprobs(ids, 1, temperature=0.8).tolist())
    own, at = b.logprobs_and_at(ids, 1, 0.8, top_ids)
    assert own.tolist() == pytest.approx(lp.tolist()) and at.flatten().tolist() == pytest.approx(top_lp.flatten().tolist())
