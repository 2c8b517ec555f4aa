"""The control variate of the Monte-Carlo estimator: the exact mean marginal of each player by position.

A player's marginal depends mostly on how many players precede it. The exact mean marginal is cheap at the
first two and the last two positions of a random order (:func:`position_control`); between them it is
interpolated (:func:`control_curve`). Subtracting ``g(position)`` from each sampled marginal and adding back its
exact mean over positions (:func:`control_mean`) leaves an unbiased estimate whose variance is that of which
players precede a player, not where it stands.
"""

from __future__ import annotations

import math

import torch


def position_control(weighted_kernel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact mean marginals at the first two and the last two positions of a random order.

    Position 0: ``log(1 + L_ii)``. Position 1: the mean over j of ``V({i, j}) - V({j})`` (2 x 2 determinants).
    Position c-1: ``-log A_ii`` with ``A = (I + L)^-1``. Position c-2: the mean over j of ``V(all \\ j) -
    V(all \\ {i, j}) = log A_jj - log det A_{ij, ij}`` (Jacobi's identity). O(c^2) per group after one inverse.

    Args:
        weighted_kernel: `(torch.Tensor)` L, (n, c, c) with c >= 2.
    Returns:
        four (n, c) float64 tensors: the mean marginal of each player at positions 0, 1, c-2, c-1.
    """
    L = weighted_kernel.to(torch.float64)
    n, c, _ = L.shape
    d = torch.diagonal(L, dim1=-2, dim2=-1)
    first = torch.log1p(d)
    others = ~torch.eye(c, dtype=torch.bool, device=L.device)
    zero = torch.zeros((), dtype=L.dtype, device=L.device)
    pair = torch.log(((1.0 + d).unsqueeze(-1) * (1.0 + d).unsqueeze(-2) - L * L).clamp_min(1.0))
    second = torch.where(others, pair - first.unsqueeze(-2), zero).sum(-1) / (c - 1)
    inverse = torch.cholesky_inverse(torch.linalg.cholesky(torch.eye(c, dtype=L.dtype, device=L.device) + L))
    a = torch.diagonal(inverse, dim1=-2, dim2=-1)
    last = -torch.log(a)
    minor = (a.unsqueeze(-1) * a.unsqueeze(-2) - inverse * inverse).clamp_min(torch.finfo(L.dtype).tiny)
    before_last = torch.where(others, torch.log(a).unsqueeze(-2) - torch.log(minor), zero).sum(-1) / (c - 1)
    return first, second, before_last, last


def control_curve(anchors: tuple[torch.Tensor, ...], positions: torch.Tensor, c: int) -> torch.Tensor:
    """The control variate g(player, position): exact at positions 0, 1, c-2, c-1; between 1 and c-2 the
    marginal is interpolated linearly in log(marginal) against log(position + 1) (marginals of log det(I + L)
    decay like a power of the coalition size). Any g keeps the estimate unbiased, since its exact mean over
    positions is added back; a g close to the true mean marginal removes the variance due to position.

    Args:
        anchors: the four (n, c) tensors of :func:`position_control`.
        positions: int64 (n, ..., c): the position of each player (players in the last dimension).
    Returns:
        float64, the shape of ``positions``.
    """
    first, second, before_last, last = (a.view(a.shape[0], *([1] * (positions.ndim - 2)), c) for a in anchors)
    p = positions.to(torch.float64)
    low, high = second.clamp_min(1e-300).log(), before_last.clamp_min(1e-300).log()
    span = math.log(c - 1) - math.log(2.0) if c > 3 else 1.0
    middle = torch.exp(low + (high - low) * (torch.log1p(p) - math.log(2.0)) / span)
    g = torch.where(positions == 1, second.expand_as(middle), middle)
    g = torch.where(positions == c - 2, before_last.expand_as(g), g)
    g = torch.where(positions == 0, first.expand_as(g), g)
    return torch.where(positions == c - 1, last.expand_as(g), g)


def control_mean(anchors: tuple[torch.Tensor, ...], c: int, budget: int) -> torch.Tensor:
    """Exact mean of the control curve over the c positions, (n, c), in blocks of positions."""
    n = anchors[0].shape[0]
    total = anchors[0].new_zeros(n, c)
    step = max(1, budget // max(1, 8 * n * c * 4))
    for start in range(0, c, step):
        positions = torch.arange(start, min(c, start + step), device=anchors[0].device)
        grid = positions.view(1, -1, 1).expand(n, -1, c)  # (n, positions, players)
        total += control_curve(anchors, grid, c).sum(dim=1)
    return total / c
