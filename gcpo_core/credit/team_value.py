"""The team value of a set of rollouts: ``V(S) = log det(I + L_S)`` with ``L = diag(q) K diag(q)``.

Only correct (q > 0), non-redundant rollouts add volume: a wrong rollout has a zero row in L and adds
``log 1 = 0``; ``m`` copies of one solution are worth ``log(1 + m)``, not ``m log 2``.
"""

from __future__ import annotations

import torch


def quality_weighted_kernel(kernel: torch.Tensor, quality: torch.Tensor) -> torch.Tensor:
    """``L_ij = q_i K_ij q_j``.

    Args:
        kernel: `(torch.Tensor)` shape (B, G, G).
        quality: `(torch.Tensor)` shape (B, G), values in [0, 1] (0 at padding slots).
    Returns:
        `(torch.Tensor)` float64, shape (B, G, G).
    """
    q = quality.to(torch.float64)
    return q.unsqueeze(-1) * kernel.to(torch.float64) * q.unsqueeze(-2)


def team_value(weighted_kernel: torch.Tensor) -> torch.Tensor:
    """``log det(I + L)`` of each group (zero rows / columns contribute 0).

    Args:
        weighted_kernel: `(torch.Tensor)` L, shape (..., G, G), PSD.
    Returns:
        `(torch.Tensor)` float64, shape (...).
    """
    L = weighted_kernel.to(torch.float64)
    eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device)
    chol = torch.linalg.cholesky(eye + L)
    return 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
