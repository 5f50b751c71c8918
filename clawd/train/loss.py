"""The policy loss: Binary RL, On-Policy Distillation, or both, in one PPO clipped surrogate.

Design §7. Written out so it can be checked by eye; no KL term, no entropy bonus, no critic.
"""

from __future__ import annotations

import torch

CLIP_LOW, CLIP_HIGH = 0.2, 0.28  # ratio clipped to [1 - 0.2, 1 + 0.28] (asymmetric, as in OpenClaw-RL)


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, teacher_logp: torch.Tensor, reward: torch.Tensor,
                mask: torch.Tensor, w_rl: float = 1.0, w_opd: float = 1.0) -> torch.Tensor:
    """Mean over samples of the token-mean clipped surrogate loss.

    For completion token t of sample b (mask[b, t] = 1 on real tokens, 0 on padding):

        A_t     = w_rl · r_b  +  w_opd · (log π_teacher(a_t) − log π_old(a_t))
        ρ_t     = exp(log π_θ(a_t) − log π_old(a_t))
        L_t     = −min(ρ_t · A_t,  clip(ρ_t, 1 − 0.2, 1 + 0.28) · A_t)
        L_b     = Σ_t m_t L_t / Σ_t m_t            (token mean per sample)
        loss    = (1/B) Σ_b L_b                    (mean over the batch)

    - Binary RL is w_opd = 0: A_t = r on every token (one sample per prompt, so no group
      normalization). OPD is w_rl = 0. Combined uses both.
    - π_old is the trainer's own logprob at the start of the update (not the rollout's), so the
      first step has ρ = 1 and clipping only bites on later steps over the same samples.
    - The teacher is the base model (adapter off) with the judge's hint in its prompt, at the
      student's temperature (1: raw logits on both sides). A sample without a hint passes
      teacher_logp = old_logp, so its OPD term is zero and it contributes its reward alone.
    - Only `logp` carries gradient; A_t is a constant. r = 0 with no hint gives zero gradient.

    Shapes: logp, old_logp, teacher_logp, mask: (B, T) float; reward: (B,) float. Returns a scalar.
    """
    old_logp, teacher_logp = old_logp.detach(), teacher_logp.detach()
    adv = w_rl * reward[:, None] + w_opd * (teacher_logp - old_logp)  # (B, T)
    ratio = torch.exp(logp - old_logp)  # (B, T)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - CLIP_LOW, 1 + CLIP_HIGH) * adv)  # (B, T)
    per_sample = -(surrogate * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
    return per_sample.mean()
