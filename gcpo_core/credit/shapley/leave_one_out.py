"""Leave-one-out credit ``V(all) - V(all \\ i) = -log [(I + L)^-1]_ii``: an ablation, not a Shapley value.

It is the marginal at the last position only: redundant rollouts are undercounted (two copies each get
``log 1.5``, not ``(log 2 + log 1.5) / 2``) and the credit does not sum to ``V(all)``.
"""

from __future__ import annotations

from typing import Optional

import torch

from gcpo_core.credit.classes import class_mean


def leave_one_out_credit(
    weighted_kernel: torch.Tensor, classes: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``V(all) - V(all \\ i)``: the marginal at the last position only (ablation; does not sum to V(all)).

    Args:
        weighted_kernel: `(torch.Tensor)` L, shape (n, c, c).
        classes: `(torch.Tensor | None)` (n, c) classes of identical players (they get their mean, bit for bit).
    Returns:
        credit `(torch.Tensor)` float64 (n, c), and a zero stderr.
    """
    L = weighted_kernel.to(torch.float64)
    system = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device) + L
    inverse = torch.cholesky_inverse(torch.linalg.cholesky(system))
    credit = class_mean(-torch.log(torch.diagonal(inverse, dim1=-2, dim2=-1)), classes)
    return credit, torch.zeros_like(credit)
