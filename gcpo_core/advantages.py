"""From per-rollout credit to advantages.

A credit score per rollout (``shapley``: phi itself; ``mix``: ``r + lambda * phi``; ``dra``: DRA-GRPO's
``r / (1 + sum of similarities to the rest of the group)``) is group-normalised the way
verl's GRPO normalises rewards: ``(s - mean) / (std + eps)`` with the unbiased std, or ``s - mean`` (Dr.GRPO)
without std scaling; a group of one gets mean 0 and std 1, as in verl. Because the normalisation is
invariant to a group's affine rescaling, a group with exactly one correct rollout gets GRPO's advantages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from gcpo_core.registry import Registry


@dataclass
class ScoreInputs:
    """What a credit-score mode may use; every tensor (B, G) except ``kernel`` (B, G, G), float64.

    ``kernel`` is the similarity of the rollouts before any quality weighting.
    """

    rewards: torch.Tensor
    shapley: torch.Tensor
    mask: torch.Tensor
    mix_coef: float = 1.0
    kernel: Optional[torch.Tensor] = None


CreditScore = Callable[[ScoreInputs], torch.Tensor]
ADVANTAGE_MODES: Registry[CreditScore] = Registry("advantage mode")


@ADVANTAGE_MODES.register("shapley")
def shapley_score(inputs: ScoreInputs) -> torch.Tensor:
    """The team reward redistributed: the Shapley credit itself (the GCPO reconstruction's default)."""
    return inputs.shapley


@ADVANTAGE_MODES.register("mix")
def mixed_score(inputs: ScoreInputs) -> torch.Tensor:
    """``r + lambda * phi``: the verifier reward with the credit as a bonus."""
    return inputs.rewards + inputs.mix_coef * inputs.shapley


@ADVANTAGE_MODES.register("dra")
def diversity_adjusted_score(inputs: ScoreInputs) -> torch.Tensor:
    """DRA-GRPO (arXiv 2505.09655): ``r_i / (1 + sum_{j != i} s_ij)``, s the cosine similarity of the completions
    (graph-cut mutual information with the rest of the group); redundant completions are down-weighted."""
    if inputs.kernel is None:
        raise ValueError("the dra advantage mode needs the rollouts' similarity kernel")
    pair = inputs.mask.unsqueeze(-1) & inputs.mask.unsqueeze(-2)
    similarity = torch.where(pair, inputs.kernel, torch.zeros_like(inputs.kernel))
    others = similarity.sum(dim=-1) - torch.diagonal(similarity, dim1=-2, dim2=-1)
    return inputs.rewards / (1.0 + others)


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
    mean, std = group_statistics(x, mask)
    centred = x - mean
    advantages = centred / (std.clamp_min(std_floor) + epsilon) if norm_by_std else centred
    return advantages * mask


def group_statistics(scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased std of each group's valid slots, shapes (B, 1); a group of one (or none) gets mean 0
    and std 1, verl's GRPO convention."""
    x = scores.to(torch.float64)
    m = mask.to(x.dtype)
    count = m.sum(dim=1, keepdim=True)
    singleton = count <= 1
    mean = (x * m).sum(dim=1, keepdim=True) / count.clamp_min(1)
    var = (((x - mean) * m) ** 2).sum(dim=1, keepdim=True) / (count - 1).clamp_min(1)
    return (torch.where(singleton, torch.zeros_like(mean), mean), torch.where(singleton, torch.ones_like(var), var.sqrt()))


def credit_advantages(
    rewards: torch.Tensor,
    shapley: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "shapley",
    mix_coef: float = 1.0,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
    std_floor: float = 0.0,
    kernel: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Credit score and its group-normalised advantage.

    Args:
        rewards: `(torch.Tensor)` raw verifier rewards (B, G).
        shapley: `(torch.Tensor)` credit phi (B, G).
        mask: `(torch.Tensor)` bool (B, G).
        mode: `(str)` one of ``ADVANTAGE_MODES.names()``.
        kernel: `(torch.Tensor | None)` (B, G, G) rollout similarity, for modes that use it (``dra``).
    Returns:
        (score, advantage), each float64 (B, G), 0 at padding.
    """
    inputs = ScoreInputs(
        rewards=rewards.to(torch.float64) * mask,
        shapley=shapley.to(torch.float64),
        mask=mask.to(torch.bool),
        mix_coef=mix_coef,
        kernel=None if kernel is None else kernel.to(torch.float64),
    )
    score = ADVANTAGE_MODES.get(mode)(inputs) * mask
    return score, group_normalize(score, mask, norm_by_std=norm_by_std, epsilon=epsilon, std_floor=std_floor)
