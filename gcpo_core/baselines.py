"""Group baselines from the related work that need only the rewards (no embeddings).

Both take padded per-rollout scores ``(B, G)`` with a validity mask, like :func:`group_normalize`.
"""

from __future__ import annotations

import math

import torch

from gcpo_core.advantages import group_normalize, group_statistics


def median_centred_advantages(
    scores: torch.Tensor, mask: torch.Tensor, norm_by_std: bool = True, epsilon: float = 1e-6
) -> torch.Tensor:
    """MC-GRPO: the group's median as the baseline instead of its mean, ``(r - median) / (std + eps)``;
    robust to a few outlying rewards. A group of one gets baseline 0 and std 1, as in verl's GRPO.

    Args:
        scores: `(torch.Tensor)` (B, G). mask: `(torch.Tensor)` bool (B, G).
    Returns:
        `(torch.Tensor)` float64 (B, G), 0 at padding.
    """
    x = scores.to(torch.float64)
    m = mask.to(torch.bool)
    nan = torch.full_like(x, math.nan)
    median = torch.nanquantile(torch.where(m, x, nan), 0.5, dim=1, keepdim=True, interpolation="midpoint")
    median = torch.where(m.sum(dim=1, keepdim=True) > 1, median, torch.zeros_like(median))
    centred = (x - median) * m
    if not norm_by_std:
        return centred
    _, std = group_statistics(x, m)
    return centred / (std + epsilon)


def consistency_entropy(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Entropy of a group's outcomes (correct = score > 0, or not), divided by log 2: 0 when every rollout
    agrees, 1 for an even split. Shape (B,)."""
    m = mask.to(torch.bool)
    count = m.sum(dim=1).clamp_min(1).to(torch.float64)
    p = ((scores > 0) & m).sum(dim=1).to(torch.float64) / count
    terms = torch.stack([p, 1 - p], dim=-1)
    entropy = -torch.where(terms > 0, terms * torch.log(terms.clamp_min(1e-300)), torch.zeros_like(terms)).sum(-1)
    return entropy / math.log(2.0)


def copo_advantages(
    scores: torch.Tensor, mask: torch.Tensor, norm_by_std: bool = True, epsilon: float = 1e-6
) -> torch.Tensor:
    """COPO (Consistency-Aware Policy Optimization, arXiv 2508.04138), as read here: each rollout's GRPO
    (local) advantage, soft-blended with its prompt's global advantage -- the group's mean reward standardised
    across all groups of the batch -- by the group's consistency entropy H:
    ``A = H * A_local + (1 - H) * A_global``. A group whose rollouts all agree (all right or all wrong, H = 0)
    still gets the global signal, which GRPO zeroes.

    Args:
        scores: `(torch.Tensor)` (B, G). mask: `(torch.Tensor)` bool (B, G).
    Returns:
        `(torch.Tensor)` float64 (B, G), 0 at padding.
    """
    x = scores.to(torch.float64)
    m = mask.to(torch.bool)
    local = group_normalize(x, m, norm_by_std=norm_by_std, epsilon=epsilon)
    count = m.sum(dim=1).clamp_min(1)
    group_mean = (x * m).sum(dim=1) / count
    has_rows = m.any(dim=1)
    means = group_mean[has_rows]
    spread = means.std(unbiased=True) if means.numel() > 1 else torch.ones((), dtype=x.dtype)
    global_advantage = (group_mean - means.mean()) / (spread + epsilon) if norm_by_std else group_mean - means.mean()
    weight = consistency_entropy(x, m).unsqueeze(1)
    return (weight * local + (1 - weight) * global_advantage.unsqueeze(1)) * m
