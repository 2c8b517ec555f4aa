"""COPO (Consistency-Aware Policy Optimization, arXiv 2508.04138) as its official code computes it
(``hijih/copo-code``, ``verl/trainer/ppo/core_algos.py``: ``compute_score_global``,
``compute_grpo_outcome_advantage_with_global``, ``compute_policy_loss_with_global``; ``run_copo.sh``).

Each response has two PPO-clip losses: a *local* one on GRPO's advantage within its group, and a *global* one on
its prompt's consistency score standardised over the batch's prompts. They are blended per token,
``w * L(A_local) + (1 - w) * L(A_global)``, with the local weight ``w = sigmoid(k (H - b))`` of the group's answer
entropy H (base 2, over the distinct final answers its responses give), then aggregated once. A group that agrees
on one answer (H = 0) learns mostly from the global loss, a split group mostly from GRPO's.

This module gives the three per-response terms (local advantage, global advantage, local weight); the recipe
turns them into the loss. The PPO-clip loss is positively homogeneous in the advantage (``L(c A) = c L(A)`` for
``c >= 0``, dual clip included) and every verl aggregation is linear in the token losses, so the blend equals the
sum of two ordinary PPO losses on the advantages ``w A_local`` and ``(1 - w) A_global``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gcpo_core.credit.advantages import group_normalize

# how the local weight w is gated, by the official code's names ('soft with zero' is the released script's)
COPO_GATES = {
    "soft_with_zero": "sigmoid(k (H - b)) for correct responses, 0 for wrong ones (global loss only)",
    "soft": "sigmoid(k (H - b)) for every response",
    "soft_with_forced": "sigmoid(k (H - b)) where the local advantage is non-zero, else 0",
    "only_zero": "1 for correct responses, 0 for wrong ones",
    "only_forced": "1 where the local advantage is non-zero, else 0",
    "global_only": "0: the global loss alone",
    "local_only": "1: GRPO's loss alone",
}


@dataclass(frozen=True)
class CopoTerms:
    """Per-response COPO terms, each float64 (B, G), 0 at padding.

    Attributes:
        local_advantage: GRPO's ``(r - mean) / (std + eps)`` within the group.
        global_advantage: the group's consistency score standardised over the batch's groups (one per prompt).
        local_weight: w in ``w L(A_local) + (1 - w) L(A_global)``.
        answer_entropy: the group's answer entropy H in bits, repeated on its rows.
    """

    local_advantage: torch.Tensor
    global_advantage: torch.Tensor
    local_weight: torch.Tensor
    answer_entropy: torch.Tensor


def answer_entropy(answer_codes: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each group's entropy in bits of its responses' final answers: 0 when all give one answer, log2 G when all
    differ. Equal codes are equal answers (a missing answer is one answer of its own, as the official code counts
    its empty extraction).

    Args:
        answer_codes: `(torch.Tensor)` int (B, G). mask: `(torch.Tensor)` bool (B, G).
    Returns:
        `(torch.Tensor)` float64 (B,).
    """
    entropy = torch.zeros(answer_codes.shape[0], dtype=torch.float64)
    for row in range(answer_codes.shape[0]):
        codes = answer_codes[row][mask[row].to(torch.bool)]
        if codes.numel() == 0:
            continue
        _, counts = torch.unique(codes, return_counts=True)
        p = counts.to(torch.float64) / codes.numel()
        entropy[row] = -(p * torch.log2(p)).sum()
    return entropy


def copo_terms(
    scores: torch.Tensor,
    correct: torch.Tensor,
    answer_codes: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: float = 5.0,
    b: float = 1.0,
    gate: str = "soft_with_zero",
    reward_coef: bool = False,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> CopoTerms:
    """COPO's local and global advantages and the local weight of every response.

    - local: GRPO's advantage of ``scores`` in each group (unbiased std; a group of one: mean 0, std 1).
    - global: each group's score ``g = accuracy * c``, with ``c = 1 - lambda H``,
      ``lambda = (1 - 1/G) / log2 G`` when ``reward_coef`` (the official ``reward_coef_flg``; the released script
      sets it false: ``c = 1``), standardised over the batch's groups, ``(g - mean) / (std + eps)`` (unbiased std;
      a batch of one group gets 0). The accuracy is the share of correct responses: the official code averages its
      0/1 reward, so with this project's +-1 shaped scores the correctness verdict stands in for it.
    - weight: ``w = sigmoid(k (H - b))`` gated by ``gate`` (:data:`COPO_GATES`); the official code's default names
      it ``global_loss_weight`` and gives it to the local loss.

    Args:
        scores: `(torch.Tensor)` (B, G) the rewards GRPO normalises. correct: `(torch.Tensor)` bool (B, G).
        answer_codes: `(torch.Tensor)` int (B, G), equal codes = equal final answers within a group.
        mask: `(torch.Tensor)` bool (B, G).
    Returns:
        :class:`CopoTerms`.
    Raises:
        ValueError: an unknown gate, a non-finite k or b, epsilon <= 0, non-finite scores.
    """
    if gate not in COPO_GATES:
        raise ValueError(f"gate must be one of {list(COPO_GATES)}, got {gate!r}")
    for name, value in (("k", k), ("b", b)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    m = mask.to(torch.bool)
    x = scores.to(torch.float64)
    if not torch.isfinite(x[m]).all():
        raise ValueError("COPO needs finite rewards; got NaN or inf")
    right = correct.to(torch.bool) & m

    local = group_normalize(x, m, norm_by_std=norm_by_std, epsilon=epsilon)
    entropy = answer_entropy(answer_codes, m)
    count = m.sum(dim=1)
    accuracy = right.sum(dim=1).to(torch.float64) / count.clamp_min(1)
    if reward_coef:
        size = count.to(torch.float64)
        lam = torch.where(size > 1, (1 - 1 / size.clamp_min(1)) / torch.log2(size.clamp_min(2)), torch.zeros_like(size))
        accuracy = accuracy * (1 - lam * entropy)
    groups = accuracy[count > 0]
    if groups.numel() > 1:
        centred = accuracy - groups.mean()
        global_score = centred / (groups.std(unbiased=True) + epsilon) if norm_by_std else centred
    else:
        global_score = torch.zeros_like(accuracy)

    soft = torch.sigmoid(k * (entropy - b)).unsqueeze(1).expand_as(x)
    moving = local != 0
    weight = {
        "soft_with_zero": soft * right,
        "soft": soft,
        "soft_with_forced": soft * moving,
        "only_zero": right.to(torch.float64),
        "only_forced": moving.to(torch.float64),
        "global_only": torch.zeros_like(x),
        "local_only": torch.ones_like(x),
    }[gate]
    return CopoTerms(
        local_advantage=local * m,
        global_advantage=global_score.unsqueeze(1) * m,
        local_weight=weight * m,
        answer_entropy=entropy.unsqueeze(1) * m,
    )


# The reading before the official code was read: an advantage blend (``algorithm.copo.blend=advantage``).


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
    official code was read (``algorithm.copo.blend=advantage``; the default follows the code: ``gcpo_core/baselines/copo.py``):
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
