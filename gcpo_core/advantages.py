"""From per-rollout credit to advantages.

A credit score per rollout (``shapley``: phi itself; ``mix``: ``r + lambda * phi``) is group-normalised the way
verl's GRPO normalises rewards: ``(s - mean) / (std + eps)`` with the unbiased std, or ``s - mean`` (Dr.GRPO)
without std scaling; a group of one gets mean 0 and std 1, as in verl. Because the normalisation is
invariant to a group's affine rescaling, a group with exactly one correct rollout gets GRPO's advantages.
"""

from __future__ import annotations

from typing import Callable

import torch

from gcpo_core.registry import Registry

# (rewards [B, G], shapley [B, G], mix_coef) -> credit score [B, G]
CreditScore = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
ADVANTAGE_MODES: Registry[CreditScore] = Registry("advantage mode")


@ADVANTAGE_MODES.register("shapley")
def shapley_score(rewards: torch.Tensor, shapley: torch.Tensor, mix_coef: float) -> torch.Tensor:
    """The team reward redistributed: the Shapley credit itself (the GCPO reconstruction's default)."""
    return shapley


@ADVANTAGE_MODES.register("mix")
def mixed_score(rewards: torch.Tensor, shapley: torch.Tensor, mix_coef: float) -> torch.Tensor:
    """``r + lambda * phi``: the verifier reward with the credit as a bonus."""
    return rewards.to(shapley.dtype) + mix_coef * shapley


def group_normalize(
    scores: torch.Tensor,
    mask: torch.Tensor,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
    std_floor: float = 0.0,
) -> torch.Tensor:
    """GRPO group normalisation over the valid slots of each group.

    Args:
        scores: `(torch.Tensor)` shape (B, G).
        mask: `(torch.Tensor)` bool (B, G); padding slots get advantage 0.
        norm_by_std: `(bool)` divide by the group's unbiased std (GRPO) or not (Dr.GRPO).
        epsilon: `(float)` added to the std.
        std_floor: `(float)` the std is taken as at least this: a group whose scores barely differ (an
            all-correct group with near-equal credit) then gets small advantages instead of +-1.
    Returns:
        `(torch.Tensor)` float64 (B, G).
    """
    x = scores.to(torch.float64)
    m = mask.to(x.dtype)
    count = m.sum(dim=1, keepdim=True)
    singleton = count <= 1
    mean = (x * m).sum(dim=1, keepdim=True) / count.clamp_min(1)
    var = (((x - mean) * m) ** 2).sum(dim=1, keepdim=True) / (count - 1).clamp_min(1)
    mean = torch.where(singleton, torch.zeros_like(mean), mean)
    std = torch.where(singleton, torch.ones_like(var), var.sqrt().clamp_min(std_floor))
    centred = x - mean
    advantages = centred / (std + epsilon) if norm_by_std else centred
    return advantages * m


def credit_advantages(
    rewards: torch.Tensor,
    shapley: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "shapley",
    mix_coef: float = 1.0,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
    std_floor: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Credit score and its group-normalised advantage.

    Args:
        rewards: `(torch.Tensor)` raw verifier rewards (B, G).
        shapley: `(torch.Tensor)` credit phi (B, G).
        mask: `(torch.Tensor)` bool (B, G).
        mode: `(str)` one of ``ADVANTAGE_MODES.names()``.
    Returns:
        (score, advantage), each float64 (B, G), 0 at padding.
    """
    score = ADVANTAGE_MODES.get(mode)(rewards.to(torch.float64), shapley.to(torch.float64), mix_coef)
    score = score * mask
    return score, group_normalize(score, mask, norm_by_std=norm_by_std, epsilon=epsilon, std_floor=std_floor)
