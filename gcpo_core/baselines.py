"""Group baselines from the related work that need only the rewards (no embeddings).

Both take padded per-rollout scores ``(B, G)`` with a validity mask, like :func:`group_normalize`.
"""

from __future__ import annotations

import math

import torch

from gcpo_core.advantages import group_normalize, group_statistics


MC_GRPO_EPSILON = 1e-3  # the official code's: added to the MAD
MAD_ZERO_RULES = ("std", "official")


def median_centred_advantages(
    scores: torch.Tensor,
    mask: torch.Tensor,
    norm_by_std: bool = True,
    epsilon: float = MC_GRPO_EPSILON,
    mad_zero: str = "std",
    rescale: bool = True,
) -> torch.Tensor:
    """MC-GRPO (arXiv 2601.22582; official code ``lotusroot-kim/MC-GRPO``, ``grpo_trainer_gsm.py``): each prompt
    has G + 1 rollouts; the group's median reward is the baseline and its median absolute deviation (MAD) the
    scale, ``A = (r - median) / (MAD + 1e-3)``; the *pivot* -- the rollout whose reward is the median (the first
    such, in group order) -- gets advantage 0 (the official code drops it from the loss); then the non-zero
    advantages of a group are multiplied by ``(G + 1) / (number of non-zero ones)``.

    With binary rewards the MAD of an odd group is always 0, and the official form gives the minority rollouts
    advantages of +-1000 x the reward gap. ``mad_zero="std"`` (the default) divides such a group by its std (+ the
    same epsilon) instead; ``mad_zero="official"`` keeps the official form. ``norm_by_std=False`` (Dr.GRPO) only
    centres. The median of an even count is the lower middle value (``torch.median``'s). A group of one gets 0.

    Args:
        scores: `(torch.Tensor)` (B, G + 1). mask: `(torch.Tensor)` bool (B, G + 1).
    Returns:
        `(torch.Tensor)` float64 (B, G + 1), 0 at padding and at each group's pivot.
    """
    if mad_zero not in MAD_ZERO_RULES:
        raise ValueError(f"mad_zero must be one of {list(MAD_ZERO_RULES)}, got {mad_zero!r}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    x = scores.to(torch.float64)
    m = mask.to(torch.bool)
    count = m.sum(dim=1, keepdim=True)
    median = _lower_median(x, m)
    centred = (x - median) * m
    first_at_median = (m & (x == median)).to(torch.int64).cumsum(dim=1) == 1
    pivot = first_at_median & m & (x == median)
    if norm_by_std:
        mad = _lower_median((x - median).abs(), m)
        _, std = group_statistics(x, m)
        guarded = (mad == 0) if mad_zero == "std" else torch.zeros_like(mad, dtype=torch.bool)
        scale = torch.where(guarded, std, mad) + epsilon
        centred = centred / scale
    advantage = torch.where(pivot | (count <= 1), torch.zeros_like(centred), centred)
    if rescale:
        nonzero = (advantage.abs() > 1e-6) & m
        k = nonzero.sum(dim=1, keepdim=True)
        factor = torch.where(k > 0, count.to(torch.float64) / k.clamp_min(1), torch.ones_like(median))
        advantage = torch.where(nonzero, advantage * factor, advantage)
    return advantage * m


def _lower_median(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each group's median over its valid slots (the lower middle value for an even count), (B, 1); 0 if empty."""
    big = torch.finfo(torch.float64).max
    ordered = torch.where(mask, values, torch.full_like(values, big)).sort(dim=1).values
    count = mask.sum(dim=1, keepdim=True)
    index = ((count - 1).clamp_min(0) // 2).to(torch.int64)
    if values.shape[1] == 0:
        return values.new_zeros(values.shape[0], 1)
    return torch.where(count > 0, ordered.gather(1, index), torch.zeros_like(index, dtype=values.dtype))


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
    """COPO (Consistency-Aware Policy Optimization, arXiv 2508.04138) as an advantage blend, the reading before its
    official code was read (``algorithm.copo.blend=advantage``; the default follows the code: ``gcpo_core/copo.py``):
    each rollout's GRPO
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
