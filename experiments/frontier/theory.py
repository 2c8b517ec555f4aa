"""What each credit is the gradient of, by exact enumeration (``docs/method.md``, "What each credit optimises").

A prompt's policy is a softmax over a finite set of answers (logits θ), each answer with a fixed unit embedding
and a reward (±1); a group is G independent samples. Every multiset of G answers is enumerated with its
multinomial probability, so the expected policy-gradient step of a credit,

    E[ Σ_i c_i ∇_θ log p(a_i) ],     ∇_θ log p(a) = onehot(a) − p,

is computed exactly, with the credits ``c_i`` from the project's engine (:func:`experiments.frontier.arms.
scores_and_advantages`), and compared with the exact gradient (torch autograd, float64) of a claimed objective
such as ``E[V(k samples)]``, ``V(S) = log det(I + L_S)`` computed here independently of the engine
(:func:`team_value`).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch

from experiments.frontier.arms import Arm, scores_and_advantages


def multisets(n_answers: int, size: int) -> list[tuple[int, ...]]:
    """Every multiset of ``size`` answers out of ``n_answers``, as sorted tuples."""
    return list(itertools.combinations_with_replacement(range(n_answers), size))


def _log_coefficients(groups: list[tuple[int, ...]], n_answers: int) -> torch.Tensor:
    out = []
    for group in groups:
        counts = [group.count(a) for a in range(n_answers)]
        out.append(math.lgamma(len(group) + 1) - sum(math.lgamma(c + 1) for c in counts))
    return torch.tensor(out, dtype=torch.float64)


def group_probabilities(logits: torch.Tensor, groups: list[tuple[int, ...]]) -> torch.Tensor:
    """Multinomial probability of each multiset under softmax(logits); differentiable in ``logits``."""
    log_p = torch.log_softmax(logits.to(torch.float64), dim=-1)
    index = torch.tensor(groups, dtype=torch.long)
    return torch.exp(_log_coefficients(groups, logits.shape[-1]) + log_p[index].sum(dim=-1))


def team_value(group: tuple[int, ...], embeddings: torch.Tensor, quality: torch.Tensor) -> float:
    """``log det(I + L_S)``, ``L = diag(q) E Eᵀ diag(q)`` over the group's rows (float64, by ``slogdet``)."""
    rows = embeddings.to(torch.float64)[list(group)] * quality.to(torch.float64)[list(group)].unsqueeze(-1)
    sign, logdet = torch.linalg.slogdet(torch.eye(len(group), dtype=torch.float64) + rows @ rows.T)
    assert sign > 0
    return float(logdet)


def expected_team_value(logits: torch.Tensor, embeddings: torch.Tensor, quality: torch.Tensor, k: int) -> torch.Tensor:
    """``E[V(k samples)]``, exactly, differentiable in ``logits``."""
    groups = multisets(logits.shape[-1], k)
    values = torch.tensor([team_value(g, embeddings, quality) for g in groups], dtype=torch.float64)
    return (group_probabilities(logits, groups) * values).sum()


def objective_gradient(objective: Callable[[torch.Tensor], torch.Tensor], logits: torch.Tensor) -> torch.Tensor:
    """∇_θ objective(θ) at ``logits`` by autograd."""
    theta = logits.detach().to(torch.float64).clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(objective(theta), theta)
    return grad


def credit_gradient(
    arm: Arm,
    logits: torch.Tensor,
    embeddings: torch.Tensor,
    rewards: torch.Tensor,
    group_size: int,
    what: str = "credit",
    groups: str = "all",
) -> torch.Tensor:
    """``E[Σ_i c_i ∇_θ log p(a_i)]`` over every group of ``group_size``, exactly.

    ``what``: ``credit`` (the engine's φ, before mixing: the rewards for GRPO), ``score`` (what is normalised:
    ``r + λ·φ``), ``centred`` (the score centred per group, the engine with ``norm_by_std=False``) or
    ``advantage`` (the engine's normalised advantage). ``groups``: ``all``, or only the groups whose answers are
    ``all_correct`` (GRPO's advantage 0) or ``mixed`` (right and wrong): that part of the expected step, the
    others' terms left out.
    """
    n = logits.shape[-1]
    multiset = multisets(n, group_size)
    index = torch.tensor(multiset, dtype=torch.long)
    probability = group_probabilities(logits.detach(), multiset)
    r = rewards.to(torch.float64)[index]
    credit, score, advantage = scores_and_advantages(
        arm, r, embeddings.to(torch.float64)[index], norm_by_std=what != "centred"
    )
    correct = r > 0
    keep = {
        "all": torch.ones_like(probability, dtype=torch.bool),
        "all_correct": correct.all(dim=-1),
        "mixed": correct.any(dim=-1) & ~correct.all(dim=-1),
    }[groups]
    probability = probability * keep
    c = {"credit": credit, "score": score, "centred": advantage, "advantage": advantage}[what]
    p = torch.softmax(logits.detach().to(torch.float64), dim=-1)
    onehot = torch.nn.functional.one_hot(index, n).to(torch.float64)  # (B, G, n)
    return torch.einsum("b,bg,bgn->n", probability, c, onehot - p)
