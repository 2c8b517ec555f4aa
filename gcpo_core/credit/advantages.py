"""From per-rollout credit to advantages.

A credit score per rollout (``shapley``: phi itself; ``mix``: ``r + lambda * phi``; ``dra``: DRA-GRPO's
``r / (1 + sum of similarities to the rest of the group)``; ``blend``: phi, blended after the normalisation, below)
is centred per group and scaled (:func:`normalize_credit`):

* ``all_correct_scale: group`` (the default): every group is divided by its own score std, GRPO's epsilon added:
  GRPO's normalisation applied to the credit, the paper's reading of GCPO as a drop-in replacement of the
  reward. Groups whose rewards are all equal (all correct: GRPO gives them nothing) then get pushes of GRPO's
  size: the rollouts that add a distinct route up, the redundant ones down. A group with exactly one correct
  rollout gets GRPO's advantage of its rewards up to epsilon's effect (within 2e-5 of it at every group size up
  to 128: epsilon is added to the credit's std, which is not the rewards');
* ``all_correct_scale: batch``: groups whose rewards differ are divided by their own score std with GRPO's
  epsilon applied in reward units (one correct rollout: GRPO's advantage to rounding, 1e-15, whatever the reward
  convention), and groups whose rewards are all equal by one batch-level scale -- the root-mean-square score
  std of the batch's reward-mixed groups -- so their advantages measure how much diversity is at stake against
  how much right-vs-wrong is at stake in the same batch (a push 20-30x smaller on real rollouts, and less of
  the encoder's rounding in it);
* no group is scaled by less than ``NOISE_FLOOR`` times its largest Monte-Carlo standard error (a difference
  of one standard error becomes an advantage of at most 1 / NOISE_FLOOR), nor by less than ``std_floor``;
* a group whose scores are all equal (all wrong) gets exactly 0; a group of one gets verl's convention
  (mean 0, std 1); ``norm_by_std: false`` only centres (Dr.GRPO).

``blend`` is the one mode that is not a score normalised once (:func:`blend_with_grpo`): its advantage is
``(1 - w) * A_GRPO + w * A_credit``, GRPO's advantage of the reward and the ``shapley`` mode's advantage of phi
(under every switch above), ``w = blend_weight``. ``mix`` cannot be turned down to GRPO: with
``all_correct_scale: group`` an all-correct group's ``r + lambda * phi`` is a constant plus ``lambda * phi``, which
its own std normalises to phi's advantage whatever lambda is (docs/method.md, section 6). ``blend`` weighs the
two advantages after the normalisation, so at ``w -> 0`` every group, all-correct ones included, tends to GRPO's
advantage, and the expected step moves linearly in ``w`` from GRPO's to the credit's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from gcpo_core.credit.registry import Registry


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


@ADVANTAGE_MODES.register("blend")
def blend_score(inputs: ScoreInputs) -> torch.Tensor:
    """The credit part of ``blend``: phi, normalised as ``shapley`` normalises it; :func:`blend_with_grpo` then
    weighs its advantage against GRPO's."""
    return inputs.shapley


# the mode whose advantage is a weighted sum of two normalised advantages (GRPO's and the credit's), not one score's
BLEND = "blend"


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


# A group's scale is at least this many of its largest Monte-Carlo standard errors.
NOISE_FLOOR = 4.0
ALL_CORRECT_SCALES = ("batch", "group")


def normalize_credit(
    scores: torch.Tensor,
    mask: torch.Tensor,
    rewards: Optional[torch.Tensor] = None,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
    std_floor: float = 0.0,
    all_correct_scale: str = "group",
    stderr: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Group-normalised advantages of credit scores (see the module docstring for the rules).

    The one normalisation of the engine: :func:`credit_advantages` and the recipe's estimator both call it.

    Args:
        scores: `(torch.Tensor)` shape (B, G).
        mask: `(torch.Tensor)` bool (B, G); padding slots get advantage 0.
        rewards: `(torch.Tensor | None)` (B, G) verifier rewards: they decide which groups are reward-mixed and
            the units of epsilon; None: every group counts as reward-mixed with rewards = scores (GRPO).
        norm_by_std: `(bool)` scale (GRPO) or only centre (Dr.GRPO).
        epsilon: `(float)` > 0; keeps the scale of a group whose scores barely differ finite.
        std_floor: `(float)` no group's scale is below this.
        all_correct_scale: `(str)` ``batch`` or ``group`` (see the module docstring).
        stderr: `(torch.Tensor | None)` (B, G) Monte-Carlo standard errors of the scores (0 where exact).
    Returns:
        `(torch.Tensor)` float64 (B, G).
    """
    if all_correct_scale not in ALL_CORRECT_SCALES:
        raise ValueError(f"all_correct_scale must be one of {list(ALL_CORRECT_SCALES)}, got {all_correct_scale!r}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    mask = mask.to(torch.bool)
    x = scores.to(torch.float64)
    mean, std = group_statistics(x, mask)
    count = mask.sum(dim=1, keepdim=True)
    constant = _spread(x, mask) == 0
    # a constant group (all wrong) gets exactly 0, not (r - mean(r)) / scale with a rounded mean
    centred = torch.where(constant & (count > 1), torch.zeros_like(x), x - mean)
    if not norm_by_std:
        return centred * mask
    r = x if rewards is None else rewards.to(torch.float64)
    _, reward_std = group_statistics(r, mask)
    mixed = (_spread(r, mask) > 0) & (count > 1)
    noise = NOISE_FLOOR * _masked_max(stderr, mask) if stderr is not None else torch.zeros_like(std)
    floor = torch.maximum(noise, torch.full_like(noise, float(std_floor)))
    if all_correct_scale == "group":  # GRPO's normalisation of the score: every group by its own std, epsilon added
        scale = torch.maximum(std, floor) + epsilon
    else:
        # epsilon in reward units: (s - mean) / std * std_r / (std_r + eps), GRPO's exactly when s is affine in r
        mixed_scale = std * (1.0 + epsilon / reward_std.clamp_min(torch.finfo(torch.float64).tiny))
        scale = torch.where(mixed, mixed_scale, batch_scale(x, mask, mixed).expand_as(std))
        scale = torch.maximum(torch.maximum(scale, floor), torch.full_like(scale, float(epsilon)))
    scale = torch.where(count <= 1, torch.ones_like(scale) + epsilon, scale)  # verl: a group of one has std 1
    return centred / scale * mask


def batch_scale(scores: torch.Tensor, mask: torch.Tensor, mixed: torch.Tensor) -> torch.Tensor:
    """Root-mean-square score std of the reward-mixed groups, shape (1, 1); 1.0 when the batch has none (then
    equal-reward groups are only centred: there is no right-vs-wrong spread to measure them against).

    Args:
        scores: `(torch.Tensor)` (B, G); mask: bool (B, G); mixed: bool (B, 1), the reward-mixed groups.
    """
    _, std = group_statistics(scores.to(torch.float64), mask)
    weight = mixed.to(torch.float64)
    total = weight.sum()
    rms = ((std**2 * weight).sum() / total.clamp_min(1.0)).sqrt()
    return torch.where(total > 0, rms, torch.ones_like(rms)).reshape(1, 1)


def group_normalize(
    scores: torch.Tensor,
    mask: torch.Tensor,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
    std_floor: float = 0.0,
) -> torch.Tensor:
    """GRPO group normalisation over the valid slots of each group: ``(s - mean) / (max(std, std_floor) + eps)``
    (every group by its own std), or ``s - mean`` (Dr.GRPO). verl's GRPO advantage of rewards.

    Args:
        scores: `(torch.Tensor)` shape (B, G).
        mask: `(torch.Tensor)` bool (B, G); padding slots get advantage 0.
        norm_by_std: `(bool)` divide by the group's unbiased std (GRPO) or not (Dr.GRPO).
        epsilon: `(float)` added to the std.
        std_floor: `(float)` the std is taken as at least this.
    Returns:
        `(torch.Tensor)` float64 (B, G).
    """
    x = scores.to(torch.float64)
    mean, std = group_statistics(x, mask)
    centred = x - mean
    advantages = centred / (std.clamp_min(std_floor) + epsilon) if norm_by_std else centred
    return advantages * mask


def blend_with_grpo(
    credit_advantage: torch.Tensor,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    weight: float,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """``(1 - weight) * A_GRPO + weight * credit_advantage``: the ``blend`` mode's advantage.

    ``A_GRPO`` is verl's GRPO advantage of ``rewards`` (``(r - mean) / (std + epsilon)`` per group, or ``r - mean``
    without ``norm_by_std``; a group of one ``r / (1 + epsilon)``), with a group whose rewards are all equal at
    exactly 0 (verl's divides a rounded mean by epsilon there). ``weight = 0`` is GRPO, ``weight = 1`` the credit's
    advantage, each exactly (no rounding of the other term enters: it is multiplied by 0). The weight multiplies
    each group's advantage, so the expected policy-gradient step is linear in it in every group, all-correct ones
    included, whose GRPO advantage is 0.

    Args:
        credit_advantage: `(torch.Tensor)` (B, G) the credit's normalised advantage.
        rewards: `(torch.Tensor)` (B, G) the reward GRPO normalises (with verl's KL shaping when it is on).
        mask: `(torch.Tensor)` bool (B, G).
        weight: `(float)` in [0, 1].
        norm_by_std, epsilon: GRPO's normalisation (verl's ``norm_adv_by_std_in_grpo`` and epsilon).
    Returns:
        `(torch.Tensor)` float64 (B, G), 0 at padding.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"the blend weight must be in [0, 1], got {weight!r}")
    mask = mask.to(torch.bool)
    grpo = normalize_credit(rewards.to(torch.float64), mask, None, norm_by_std=norm_by_std, epsilon=epsilon)
    # at weight 0 or 1 the other term is multiplied by exactly 0, so each end is its advantage bit for bit
    return ((1.0 - weight) * grpo + weight * credit_advantage.to(torch.float64)) * mask


def mode_advantage(
    score: torch.Tensor,
    mask: torch.Tensor,
    rewards: torch.Tensor,
    mode: str,
    blend_weight: float = 0.5,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
    std_floor: float = 0.0,
    all_correct_scale: str = "group",
    stderr: Optional[torch.Tensor] = None,
    grpo_rewards: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The advantage of a mode's ``score``: :func:`normalize_credit`, then for ``blend`` :func:`blend_with_grpo`. The
    one path of the credit engine (:func:`credit_advantages`) and of the recipe's estimator.

    Args:
        score, mask, norm_by_std, epsilon, std_floor, all_correct_scale, stderr: see :func:`normalize_credit`
            (``stderr``: the score's, :func:`score_stderr`).
        rewards: `(torch.Tensor)` (B, G) the verifier rewards: which groups are reward-mixed.
        mode: `(str)` the advantage mode.
        blend_weight: `(float)` ``blend``'s weight of the credit.
        grpo_rewards: `(torch.Tensor | None)` (B, G) the reward ``blend``'s GRPO part normalises; None: ``rewards``
            (the estimator passes the reward with verl's KL shaping, as verl's GRPO sees it).
    Returns:
        `(torch.Tensor)` float64 (B, G).
    """
    advantage = normalize_credit(
        score,
        mask,
        rewards,
        norm_by_std=norm_by_std,
        epsilon=epsilon,
        std_floor=std_floor,
        all_correct_scale=all_correct_scale,
        stderr=stderr,
    )
    if mode != BLEND:
        return advantage
    return blend_with_grpo(
        advantage,
        rewards if grpo_rewards is None else grpo_rewards,
        mask,
        blend_weight,
        norm_by_std=norm_by_std,
        epsilon=epsilon,
    )


def _spread(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """max - min over each group's valid slots, (B, 1); 0 for empty groups."""
    if values.shape[1] == 0:
        return values.new_zeros(values.shape[0], 1)
    big = torch.finfo(torch.float64).max
    high = torch.where(mask, values, torch.full_like(values, -big)).amax(dim=1, keepdim=True)
    low = torch.where(mask, values, torch.full_like(values, big)).amin(dim=1, keepdim=True)
    return torch.where(mask.any(dim=1, keepdim=True), high - low, torch.zeros_like(high))


def _masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    values = values.to(torch.float64)
    return (
        torch.where(mask, values, torch.zeros_like(values)).amax(dim=1, keepdim=True)
        if values.shape[1]
        else values.new_zeros(values.shape[0], 1)
    )


def group_statistics(scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased std of each group's valid slots, shapes (B, 1); a group of one (or none) gets mean 0
    and std 1, verl's GRPO convention."""
    x = scores.to(torch.float64)
    m = mask.to(x.dtype)
    count = m.sum(dim=1, keepdim=True)
    singleton = count <= 1
    mean = (x * m).sum(dim=1, keepdim=True) / count.clamp_min(1)
    var = (((x - mean) * m) ** 2).sum(dim=1, keepdim=True) / (count - 1).clamp_min(1)
    return (
        torch.where(singleton, torch.zeros_like(mean), mean),
        torch.where(singleton, torch.ones_like(var), var.sqrt()),
    )


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
    all_correct_scale: str = "group",
    stderr: Optional[torch.Tensor] = None,
    blend_weight: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Credit score and its group-normalised advantage (:func:`mode_advantage`: :func:`normalize_credit`, and for
    ``blend`` the weighted sum with GRPO's advantage).

    Args:
        rewards: `(torch.Tensor)` raw verifier rewards (B, G).
        shapley: `(torch.Tensor)` credit phi (B, G).
        mask: `(torch.Tensor)` bool (B, G).
        mode: `(str)` one of ``ADVANTAGE_MODES.names()``.
        kernel: `(torch.Tensor | None)` (B, G, G) rollout similarity, for modes that use it (``dra``).
        all_correct_scale, stderr, norm_by_std, epsilon, std_floor: see :func:`normalize_credit`; ``stderr``
            is phi's Monte-Carlo standard error (scaled by ``mix_coef`` in the ``mix`` mode).
        blend_weight: `(float)` in [0, 1], ``blend``'s weight of the credit's advantage against GRPO's.
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
    advantage = mode_advantage(
        score,
        mask,
        inputs.rewards,
        mode,
        blend_weight=blend_weight,
        norm_by_std=norm_by_std,
        epsilon=epsilon,
        std_floor=std_floor,
        all_correct_scale=all_correct_scale,
        stderr=score_stderr(stderr, mode, mix_coef),
    )
    return score, advantage


def score_stderr(stderr: Optional[torch.Tensor], mode: str, mix_coef: float = 1.0) -> Optional[torch.Tensor]:
    """The Monte-Carlo standard error of a mode's score from phi's: phi's itself (``shapley``, and ``blend``, whose
    score is phi), times ``|mix_coef|`` (``mix``), none (``dra`` does not use phi)."""
    if stderr is None:
        return None
    factor = {"shapley": 1.0, BLEND: 1.0, "mix": abs(mix_coef)}.get(mode, 0.0)
    return stderr.to(torch.float64) * factor
