"""The policy loss: Binary RL, On-Policy Distillation, or both, in one PPO clipped surrogate,
importance-corrected for turns another policy served, with a KL-to-base penalty.

Design §7. Written out so it can be checked by eye; no entropy bonus, no critic.
"""

from __future__ import annotations

import torch

CLIP_LOW, CLIP_HIGH = 0.2, 0.28  # ratio clipped to [1 - 0.2, 1 + 0.28] (asymmetric, as in OpenClaw-RL)
K3_MAX = 10.0  # per-token KL estimate cap (as slime's low_var_kl): one token the base finds far likelier cannot swamp a round


def tis_weight(old_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance weight w_t = min(π_old(a_t) / π_rollout(a_t), cap), as slime's TIS.

    The tokens were sampled by the policy that served the turn (an older adapter, or the weights
    before a merge); the surrogate's expectation is over π_old. The cap bounds the variance a
    token the serving policy found unlikely would add. Shapes: (B, T) → (B, T), no gradient."""
    return torch.exp(old_logp.detach() - rollout_logp).clamp(max=cap)


def kl_k3(logp: torch.Tensor, base_logp: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_base) on the sampled tokens: k3 = e^δ − δ − 1, δ = log π_base − log π_θ.

    k3 rather than the log-ratio k1 = −δ: both estimate the KL without bias on tokens sampled
    from π_θ, but k3 is never negative, and its gradient (1 − π_base/π_θ)·∇log π_θ is zero where
    π_θ agrees with the base and grows with the gap; in expectation it is the gradient of
    KL(π_base ‖ π_θ), a real pull toward the base. k1's gradient is ∇log π_θ on every token
    whatever the gap, zero in expectation: as a loss it only adds noise. Shapes: (B, T) → (B, T)."""
    delta = base_logp.detach() - logp
    return (torch.exp(delta) - delta - 1).clamp(max=K3_MAX)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, teacher_logp: torch.Tensor, reward: torch.Tensor,
                mask: torch.Tensor, w_rl: float = 1.0, w_opd: float = 1.0, weight: torch.Tensor | None = None,
                base_logp: torch.Tensor | None = None, kl_coef: float = 0.0) -> torch.Tensor:
    """Mean over samples of the token-mean clipped surrogate loss plus the KL-to-base penalty.

    For completion token t of sample b (mask[b, t] = 1 on real tokens, 0 on padding):

        A_t     = w_rl · r_b  +  w_opd · (log π_teacher(a_t) − log π_old(a_t))
        ρ_t     = exp(log π_θ(a_t) − log π_old(a_t))
        L_t     = −w_t · min(ρ_t · A_t,  clip(ρ_t, 1 − 0.2, 1 + 0.28) · A_t)  +  β · k3_t
        L_b     = Σ_t m_t L_t / Σ_t m_t            (token mean per sample)
        loss    = (1/B) Σ_b L_b                    (mean over the batch)

    - Binary RL is w_opd = 0: A_t = r on every token (one sample per prompt, so no group
      normalization). OPD is w_rl = 0. Combined uses both.
    - π_old is the trainer's own logprob at the start of the update (not the rollout's), so the
      first step has ρ = 1 and clipping only bites on later steps over the same samples.
    - w_t (`weight`, default 1) is the truncated importance weight `tis_weight`, correcting for the
      policy that actually sampled the turn; β = `kl_coef`, k3 = `kl_k3` against the base weights.
    - Every logprob is taken at the turn's sampling temperature. The teacher is the base model
      (adapter off) with the judge's hint in its prompt. A sample without a hint passes
      teacher_logp = old_logp, so its OPD term is zero and it contributes its reward alone.
    - Only `logp` carries gradient; A_t and w_t are constants. r = 0 with no hint and β = 0 gives
      zero gradient.

    Shapes: logp, old_logp, teacher_logp, mask, weight, base_logp: (B, T) float; reward: (B,) float.
    Returns a scalar.
    """
    old_logp, teacher_logp = old_logp.detach(), teacher_logp.detach()
    adv = w_rl * reward[:, None] + w_opd * (teacher_logp - old_logp)  # (B, T)
    ratio = torch.exp(logp - old_logp)  # (B, T)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - CLIP_LOW, 1 + CLIP_HIGH) * adv)  # (B, T)
    per_token = -surrogate if weight is None else -weight.detach() * surrogate  # (B, T)
    if kl_coef:
        assert base_logp is not None, "the KL term needs the base weights' logprobs"
        per_token = per_token + kl_coef * kl_k3(logp, base_logp)  # (B, T)
    per_sample = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
    return per_sample.mean()
