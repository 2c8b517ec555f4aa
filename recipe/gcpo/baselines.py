"""Reward-only baselines from the related work, registered in verl's estimator registry.

``algorithm.adv_estimator=copo`` (COPO, arXiv 2508.04138) and ``algorithm.adv_estimator=mc_grpo`` (median-centred
GRPO). They need no embeddings, so verl's stock path serves them; rows with an all-zero response mask (verl's
padding rows) are left out of every group and of COPO's batch statistics.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from gcpo_core.baselines import copo_advantages, median_centred_advantages
from gcpo_core.grouping import layout_groups


def _grouped(
    advantage_fn: Callable[..., torch.Tensor],
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[np.ndarray],
    config,
    epsilon: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    norm_by_std = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1).to(torch.float64).cpu()
        rows = np.flatnonzero((response_mask.sum(dim=-1) > 0).cpu().numpy())
        ids = np.arange(len(scores)) if index is None else np.asarray(index, dtype=object)
        layout = layout_groups([ids[i] for i in rows])
        padded = layout.gather(scores[rows])
        advantage = torch.zeros(len(scores), dtype=torch.float64)
        advantage[rows] = layout.scatter(advantage_fn(padded, layout.mask, norm_by_std=norm_by_std, epsilon=epsilon))
        out = advantage.to(token_level_rewards.device, token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return out, out


@register_adv_est("copo")
def compute_copo_outcome_advantage(token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6, **kwargs):
    """COPO: GRPO's local advantage blended with the prompt's batch-standardised mean reward by the group's
    consistency entropy (see :func:`gcpo_core.baselines.copo_advantages`). Shapes: (bs, response_length)."""
    return _grouped(copo_advantages, token_level_rewards, response_mask, index, config, epsilon)


@register_adv_est("mc_grpo")
def compute_mc_grpo_outcome_advantage(token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6, **kwargs):
    """MC-GRPO: GRPO with the group median as baseline (see :func:`gcpo_core.baselines.median_centred_advantages`).
    Shapes: (bs, response_length)."""
    return _grouped(median_centred_advantages, token_level_rewards, response_mask, index, config, epsilon)
