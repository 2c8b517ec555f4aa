"""MC-GRPO's median-centred advantage (arXiv 2601.22582): a group baseline that needs only the rewards.

It takes padded per-rollout scores ``(B, G)`` with a validity mask, like :func:`group_normalize`.
"""

from __future__ import annotations

import torch

from gcpo_core.credit.advantages import group_statistics

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
