"""MC-GRPO (arXiv 2601.22582), registered in verl's estimator registry as ``mc_grpo``: median baseline, MAD scale,
the pivot rollout left out (``algorithm.mc_grpo.*``). It needs no embeddings, so verl's stock path serves it; rows
with an all-zero response mask (verl's padding rows) are left out of every group.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from verl.trainer.ppo.core_algos import register_adv_est

from gcpo_core.baselines.mc_grpo import MAD_ZERO_RULES, median_centred_advantages
from gcpo_core.credit.config import TRUE_FALSE, check_fields, one_of
from recipe.gcpo.estimator import grouped_outcome_advantage
from recipe.gcpo.settings import Baseline, block_settings, check_rollout_groups, register

MC_GRPO_ESTIMATOR = "mc_grpo"


@dataclass(frozen=True)
class MCGRPOSettings:
    """``algorithm.mc_grpo.*``: ``mad_zero`` ``std`` (a group whose MAD is 0 -- every odd group of binary rewards --
    is divided by its std) or ``official`` (by 1e-3, as the official code: advantages of about 1000);
    ``rescale``: multiply a group's non-zero advantages by (G + 1) / their count (the official GSM8K trainer)."""

    mad_zero: str = "std"
    rescale: bool = True

    def __post_init__(self) -> None:
        check_fields(self, "mc_grpo", mad_zero=one_of(MAD_ZERO_RULES), rescale=TRUE_FALSE)


@register_adv_est(MC_GRPO_ESTIMATOR)
def compute_mc_grpo_outcome_advantage(
    token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6, **kwargs
):
    """MC-GRPO (see :func:`gcpo_core.baselines.mc_grpo.median_centred_advantages`): of each prompt's G + 1 rollouts the
    median one is the pivot (advantage 0), the others get (r - median) / (MAD + 1e-3), rescaled. verl's epsilon is
    not used (the paper's 1e-3 is). Shapes: (bs, response_length)."""
    settings = block_settings(BASELINE, config)
    advantage_fn = functools.partial(median_centred_advantages, mad_zero=settings.mad_zero, rescale=settings.rescale)

    def with_paper_epsilon(scores, mask, norm_by_std, epsilon):
        return advantage_fn(scores, mask, norm_by_std=norm_by_std)

    return grouped_outcome_advantage(with_paper_epsilon, token_level_rewards, response_mask, index, config, epsilon)


BASELINE = register(
    Baseline(
        "mc_grpo",
        MCGRPOSettings,
        estimator=MC_GRPO_ESTIMATOR,
        check=lambda config, settings, recipe: check_rollout_groups(config, MC_GRPO_ESTIMATOR),
    )
)
