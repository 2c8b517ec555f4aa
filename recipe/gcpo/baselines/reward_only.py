"""Reward-only baselines from the related work, registered in verl's estimator registry.

``algorithm.adv_estimator=copo`` (COPO, arXiv 2508.04138; its loss blend also needs the recipe's trainer, see
``recipe/gcpo/baselines/copo.py``) and ``algorithm.adv_estimator=mc_grpo`` (MC-GRPO, arXiv
2601.22582: median baseline, MAD scale, the pivot rollout left out; ``algorithm.mc_grpo.*``). They need no
embeddings, so verl's stock path serves them; rows with an all-zero response mask (verl's padding rows) are left
out of every group and of COPO's batch statistics.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from gcpo_core.baselines.copo import copo_advantages
from gcpo_core.baselines.mc_grpo import MAD_ZERO_RULES, median_centred_advantages
from gcpo_core.credit.grouping import layout_groups


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
    """COPO. ``algorithm.copo.blend=loss`` (default): ``w * A_local`` from the terms the recipe's trainer provides
    (:mod:`recipe.gcpo.baselines.copo`; the actor's loss adds the global term). ``blend=advantage``: GRPO's local advantage
    blended with the prompt's batch-standardised mean reward by the group's right/wrong entropy
    (:func:`gcpo_core.baselines.copo.copo_advantages`). Shapes: (bs, response_length)."""
    from recipe.gcpo.baselines.copo import copo_settings, provided_copo

    if config is not None and copo_settings(config).blend == "loss":
        step = provided_copo(index)
        local = torch.as_tensor(step.local, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
        out = local.unsqueeze(-1) * response_mask
        return out, out
    return _grouped(copo_advantages, token_level_rewards, response_mask, index, config, epsilon)


@dataclass(frozen=True)
class MCGRPOSettings:
    """``algorithm.mc_grpo.*``: ``mad_zero`` ``std`` (a group whose MAD is 0 -- every odd group of binary rewards --
    is divided by its std) or ``official`` (by 1e-3, as the official code: advantages of about 1000);
    ``rescale``: multiply a group's non-zero advantages by (G + 1) / their count (the official GSM8K trainer)."""

    mad_zero: str = "std"
    rescale: bool = True

    def __post_init__(self) -> None:
        if self.mad_zero not in MAD_ZERO_RULES:
            raise ValueError(f"algorithm.mc_grpo.mad_zero must be one of {list(MAD_ZERO_RULES)}, got {self.mad_zero!r}")
        if not isinstance(self.rescale, bool):
            raise ValueError(f"algorithm.mc_grpo.rescale must be true or false, got {self.rescale!r}")

    @classmethod
    def from_algorithm_config(cls, algorithm: Optional[Mapping[str, Any]]) -> "MCGRPOSettings":
        from recipe.gcpo.settings import _build, _plain

        block = _plain((algorithm or {}).get("mc_grpo")) if algorithm is not None else None
        return _build(cls, block or {}, "algorithm.mc_grpo")


@register_adv_est("mc_grpo")
def compute_mc_grpo_outcome_advantage(token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6, **kwargs):
    """MC-GRPO (see :func:`gcpo_core.baselines.mc_grpo.median_centred_advantages`): of each prompt's G + 1 rollouts the
    median one is the pivot (advantage 0), the others get (r - median) / (MAD + 1e-3), rescaled. verl's epsilon is
    not used (the paper's 1e-3 is). Shapes: (bs, response_length)."""
    settings = MCGRPOSettings.from_algorithm_config(config)
    advantage_fn = functools.partial(median_centred_advantages, mad_zero=settings.mad_zero, rescale=settings.rescale)

    def with_paper_epsilon(scores, mask, norm_by_std, epsilon):
        return advantage_fn(scores, mask, norm_by_std=norm_by_std)

    return _grouped(with_paper_epsilon, token_level_rewards, response_mask, index, config, epsilon)
