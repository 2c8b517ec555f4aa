"""GCPO credit assignment end to end: rewards + embeddings + group ids -> Shapley credit and advantages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Optional, Sequence

import numpy as np
import torch

from gcpo_core.credit.advantages import credit_advantages
from gcpo_core.credit.config import CreditConfig
from gcpo_core.credit.diagnostics import GroupDiagnostics, group_diagnostics
from gcpo_core.credit.grouping import GroupLayout, group_content_keys, identical_members, layout_groups
from gcpo_core.credit.kernels import compute_kernel
from gcpo_core.credit.quality import check_rewards, quality_from_rewards
from gcpo_core.credit.shapley.dispatch import shapley_values
from gcpo_core.credit.team_value import quality_weighted_kernel


@dataclass
class GroupCredit:
    """Credit of a padded batch; every tensor is (B, G) float64, 0 at padding slots.

    Attributes:
        quality: q of each rollout.
        shapley: phi (exactly 0 for q = 0).
        shapley_stderr: Monte-Carlo standard error of phi (0 where exact).
        score: the credit score that is normalised (phi, or r + lambda phi; ``blend``: phi, whose advantage is
            then weighed against GRPO's).
        advantage: the group-normalised score (``blend``: the weighted sum of GRPO's advantage and phi's).
        groups: per-group diagnostics.
    """

    quality: torch.Tensor
    shapley: torch.Tensor
    shapley_stderr: torch.Tensor
    score: torch.Tensor
    advantage: torch.Tensor
    groups: GroupDiagnostics


@dataclass
class CreditResult:
    """Credit of flat rollouts; every tensor is (N,) float64 in input order."""

    quality: torch.Tensor
    shapley: torch.Tensor
    shapley_stderr: torch.Tensor
    score: torch.Tensor
    advantage: torch.Tensor
    groups: GroupDiagnostics
    layout: GroupLayout

    def metrics(self, prefix: str = "gcpo/") -> dict[str, float]:
        return self.groups.summary(prefix)


def _real_tensor(values, name: str, allow_bool: bool, device=None) -> torch.Tensor:
    """``values`` as a detached real tensor (credit is not differentiated), or one clear error. A list of Python
    floats becomes float64, as numpy reads it (torch would read it as float32: a reward of 0.1 would become
    0.10000000149 and one of 1e308 infinity)."""
    try:
        if not isinstance(values, (torch.Tensor, np.ndarray)):
            values = np.asarray(values)
        tensor = torch.as_tensor(values, device=device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} must be real numbers (a tensor, array or list of floats); got {err}") from None
    if tensor.is_complex() or (tensor.dtype == torch.bool and not allow_bool):
        raise ValueError(f"{name} must be real numbers; got dtype {tensor.dtype}")
    return tensor.detach()


def compute_group_credit(
    rewards: torch.Tensor,
    embeddings: torch.Tensor,
    mask: torch.Tensor,
    config: CreditConfig = CreditConfig(),
    contributes: Optional[torch.Tensor] = None,
) -> GroupCredit:
    """Credit every rollout of a padded batch of groups.

    Args:
        rewards: `(torch.Tensor)` shape (B, G), finite at valid slots.
        embeddings: `(torch.Tensor)` shape (B, G, d), finite and non-zero at valid slots.
        mask: `(torch.Tensor)` bool (B, G), True at real rollouts.
        config: `(CreditConfig)` engine settings.
        contributes: `(torch.Tensor | None)` bool (B, G); False forces q = 0 (e.g. an empty response).
    Returns:
        :class:`GroupCredit`.
    """
    if rewards.shape != mask.shape or embeddings.shape[:2] != mask.shape:
        raise ValueError(
            f"rewards (B, G), embeddings (B, G, d) and mask (B, G) disagree: "
            f"{tuple(rewards.shape)}, {tuple(embeddings.shape)}, {tuple(mask.shape)}"
        )
    if mask.shape[1] > config.max_group_size:
        raise ValueError(
            f"a group has {int(mask.sum(1).max())} rollouts, more than max_group_size={config.max_group_size}; "
            "check that rollouts are grouped by prompt id, or raise max_group_size"
        )
    if contributes is not None and contributes.shape != mask.shape:
        raise ValueError(f"contributes must be (B, G) like mask {tuple(mask.shape)}; got {tuple(contributes.shape)}")
    mask = mask.to(torch.bool)
    rewards = torch.where(mask, rewards.to(torch.float64), torch.zeros((), dtype=torch.float64, device=rewards.device))
    check_rewards(rewards)
    quality = quality_from_rewards(rewards, config.quality).to(torch.float64) * mask
    if contributes is not None:
        quality = quality * contributes.to(torch.bool)
    # identical rollouts (same embedding and quality, bit for bit) are one class of symmetric players; classes
    # and the groups' random streams depend on content only, never on the order of rows
    same_embedding, fingerprints = identical_members(embeddings, mask, return_fingerprints=True)
    classes = identical_members(torch.stack([same_embedding.to(torch.float64), quality], dim=-1), mask)
    player_keys = fingerprints * 1000003 + quality.view(torch.int64)  # wraps: exact
    keys = group_content_keys(player_keys, mask & (quality > 0))
    return _credit(rewards, embeddings, mask, quality, same_embedding, classes, keys, config)


def _credit(
    rewards: torch.Tensor,
    embeddings: torch.Tensor,
    mask: torch.Tensor,
    quality: torch.Tensor,
    same_embedding: torch.Tensor,
    classes: torch.Tensor,
    group_keys: torch.Tensor,
    config: CreditConfig,
) -> GroupCredit:
    kernel = compute_kernel(config.kernel, embeddings, mask, bandwidth=config.rbf_bandwidth, classes=same_embedding)
    L = quality_weighted_kernel(kernel, quality)
    contributing = mask & (quality > 0)
    shapley = shapley_values(
        L,
        contributing,
        method=config.method,
        exact_max_contributors=config.exact_max_contributors,
        permutations=config.permutations,
        antithetic=config.antithetic,
        stratified=config.stratified,
        seed=config.seed,
        classes=classes,
        group_keys=group_keys,
    )
    score, advantage = credit_advantages(
        rewards,
        shapley.values,
        mask,
        mode=config.advantage,
        mix_coef=config.mix_coef,
        norm_by_std=config.norm_by_std,
        epsilon=config.epsilon,
        std_floor=config.std_floor,
        kernel=kernel,
        all_correct_scale=config.all_correct_scale,
        stderr=shapley.stderr,
        blend_weight=config.blend_weight,
    )
    diagnostics = group_diagnostics(
        L, mask, contributing, rewards, shapley.values, shapley.stderr, shapley.methods, advantage=advantage
    )
    return GroupCredit(
        quality=quality,
        shapley=shapley.values,
        shapley_stderr=shapley.stderr,
        score=score,
        advantage=advantage,
        groups=diagnostics,
    )


def compute_credit(
    rewards: Sequence[float] | torch.Tensor,
    embeddings: torch.Tensor,
    group_ids: Sequence[Hashable],
    config: CreditConfig = CreditConfig(),
    contributes: Optional[Sequence[bool] | torch.Tensor] = None,
) -> CreditResult:
    """Credit flat rollouts grouped by id (any order; groups may be uneven).

    Args:
        rewards: `(torch.Tensor | Sequence[float])` shape (N,).
        embeddings: `(torch.Tensor)` shape (N, d).
        group_ids: `(Sequence[Hashable])` length N; rollouts of one prompt share an id.
        config: `(CreditConfig)` engine settings.
        contributes: `(Sequence[bool] | None)` length N; False forces q = 0.
    Returns:
        :class:`CreditResult` with (N,) tensors in input order. An empty batch gives empty results.

    Example:
        Prompt ``a``: two copies of one solution, a different correct one and a wrong one; prompt ``b``: all
        wrong. The copies share the volume they add, so the distinct solution gets the most credit; the wrong
        rollouts get none, and an all-wrong group gets no advantage at all.

        >>> import torch
        >>> embeddings = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.3, 0.9], [0.9, 0.3]])
        >>> result = compute_credit([1, 1, 1, 0, 0, 0], embeddings, ["a", "a", "a", "a", "b", "b"])
        >>> [round(v, 4) for v in result.shapley.tolist()]  # phi: (log 2 + log 1.5) / 2 twice, log 2, 0
        [0.5493, 0.5493, 0.6931, 0.0, 0.0, 0.0]
        >>> [round(v, 3) for v in result.advantage.tolist()]
        [0.331, 0.331, 0.801, -1.463, 0.0, 0.0]
    """
    embeddings = _real_tensor(embeddings, "embeddings", allow_bool=False)
    device = embeddings.device
    rewards = _real_tensor(rewards, "rewards", allow_bool=True, device=device).to(torch.float64)
    n = rewards.shape[0] if rewards.ndim else -1
    if rewards.ndim != 1 or embeddings.ndim != 2 or embeddings.shape[0] != n or len(group_ids) != n:
        raise ValueError(
            f"need rewards (N,), embeddings (N, d) and N group ids; got {tuple(rewards.shape)}, "
            f"{tuple(embeddings.shape)} and {len(group_ids)} ids"
        )
    padded_contributes = None
    if contributes is not None:
        contributes = _real_tensor(contributes, "contributes", allow_bool=True, device=device)
        if contributes.shape != (n,):
            raise ValueError(
                f"contributes must have one flag per rollout, shape ({n},); got {tuple(contributes.shape)}"
            )
        contributes = contributes.to(torch.bool)
    check_rewards(rewards)
    layout = layout_groups(group_ids, device=device)
    if contributes is not None:
        padded_contributes = layout.gather(contributes, fill=False)
    credit = compute_group_credit(
        layout.gather(rewards),
        layout.gather(embeddings, fill=1.0),
        layout.mask,
        config=config,
        contributes=padded_contributes,
    )
    return CreditResult(
        quality=layout.scatter(credit.quality),
        shapley=layout.scatter(credit.shapley),
        shapley_stderr=layout.scatter(credit.shapley_stderr),
        score=layout.scatter(credit.score),
        advantage=layout.scatter(credit.advantage),
        groups=credit.groups,
        layout=layout,
    )
