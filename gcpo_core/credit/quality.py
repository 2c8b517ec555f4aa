"""Rollout quality q in [0, 1] from verifier rewards.

Quality weights the kernel, ``L = diag(q) K diag(q)``. A wrong rollout must get ``q = 0`` so it adds no volume;
squaring a signed reward (DAPO's -1 for wrong) would make a wrong rollout count as much as a correct one, so
every GCPO mapping here first sends non-positive rewards to 0. (``none`` ignores rewards on purpose: an
ablation and a baseline, never GCPO.)
"""

from __future__ import annotations

from typing import Callable

import torch

from gcpo_core.credit.registry import Registry

QualityMap = Callable[[torch.Tensor], torch.Tensor]
QUALITY_MAPS: Registry[QualityMap] = Registry("quality mapping")


@QUALITY_MAPS.register("binary")
def binary_quality(rewards: torch.Tensor) -> torch.Tensor:
    """Correct iff the reward is positive: {0, 1} and DAPO's {-1, +1} both map to {0, 1}.

    Args:
        rewards: `(torch.Tensor)` shape (...), finite.
    Returns:
        `(torch.Tensor)` shape (...), values in {0., 1.}, dtype of ``rewards`` (floating).
    """
    return (rewards > 0).to(_float_dtype(rewards))


@QUALITY_MAPS.register("clip")
def clipped_quality(rewards: torch.Tensor) -> torch.Tensor:
    """The reward clipped to [0, 1] (the default): {0, 1} and DAPO's {-1, +1} map to {0, 1} exactly, while a
    shaped reward keeps its size -- a correct answer that DAPO's overlong penalty brings to 0.535 has q = 0.535,
    so GCPO sees the same length shaping as every baseline trained on that reward."""
    return rewards.to(_float_dtype(rewards)).clamp(0.0, 1.0)


@QUALITY_MAPS.register("sqrt")
def sqrt_quality(rewards: torch.Tensor) -> torch.Tensor:
    """``sqrt(clip(r, 0, 1))``, so that ``L_ii = r``: the DPP quality convention with the reward as quality."""
    return clipped_quality(rewards).sqrt()


@QUALITY_MAPS.register("none")
def no_quality(rewards: torch.Tensor) -> torch.Tensor:
    """Every rollout has quality 1: the kernel is not reward-weighted (the "no quality coupling" ablation, and
    DQO's diversity term, which does not look at correctness)."""
    return torch.ones_like(rewards, dtype=_float_dtype(rewards))


def quality_from_rewards(rewards: torch.Tensor, mapping: str = "clip") -> torch.Tensor:
    """Map rewards to quality with the named mapping; rejects NaN / inf rewards.

    Args:
        rewards: `(torch.Tensor)` shape (...).
        mapping: `(str)` one of ``QUALITY_MAPS.names()``.
    Returns:
        `(torch.Tensor)` shape (...), values in [0, 1].
    """
    check_finite(rewards, "rewards")
    return QUALITY_MAPS.get(mapping)(rewards)


# The largest reward size the group normalisation takes: a group's std squares differences of its rewards (or of
# scores r + lambda phi), and (2 * 1e150)^2 summed over the largest group (4096) is still within float64 (1.8e308);
# beyond it the std overflows and every advantage of the group silently becomes 0.
REWARD_LIMIT = 1e150


def check_rewards(rewards: torch.Tensor) -> None:
    """Rewards the engine can normalise: finite and at most :data:`REWARD_LIMIT` in size.

    Raises:
        ValueError: naming how many are not and the first one's index and value.
    """
    check_finite(rewards, "rewards")
    large = rewards.abs() > REWARD_LIMIT
    if bool(large.any()):
        first = torch.nonzero(large)[0].tolist()
        raise ValueError(
            f"rewards must be at most {REWARD_LIMIT:g} in size (the group normalisation squares them); "
            f"{int(large.sum())} value(s) are larger (first at index {first}: {float(rewards[tuple(first)]):g})"
        )


def check_finite(values: torch.Tensor, name: str) -> None:
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        first = torch.nonzero(bad)[0].tolist()
        raise ValueError(f"{name} must be finite; {int(bad.sum())} value(s) are NaN or inf (first at index {first})")


def _float_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.float64
