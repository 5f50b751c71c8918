"""The policy loss on hand-built tensors: signs, clipping, advantages, masks."""

from __future__ import annotations

import math

import pytest
import torch

from clawd.train.loss import policy_loss


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
