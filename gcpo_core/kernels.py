"""Similarity kernels between the rollouts of each group.

Every kernel works on L2-normalised embeddings, has a unit diagonal (so a lone correct rollout is worth
``log 2`` nats whatever the kernel) and is positive semi-definite. Computed in float64: the kernel feeds
log-determinants.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from gcpo_core.registry import Registry

Kernel = Callable[..., torch.Tensor]
KERNELS: Registry[Kernel] = Registry("kernel")

_MIN_NORM = 1e-12


def normalize_embeddings(embeddings: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L2-normalise the valid rows; invalid (padding) rows become 0.

    Args:
        embeddings: `(torch.Tensor)` shape (B, G, d).
        mask: `(torch.Tensor)` bool, shape (B, G); False marks padding slots, whose values are ignored.
    Returns:
        `(torch.Tensor)` float64, shape (B, G, d).
    Raises:
        ValueError: a valid row is non-finite or has (near) zero norm.
    """
    if embeddings.ndim != 3 or mask.shape != embeddings.shape[:2]:
        raise ValueError(f"embeddings must be (B, G, d) with mask (B, G); got {tuple(embeddings.shape)} and {tuple(mask.shape)}")
    finite = torch.isfinite(embeddings).all(dim=-1)  # on the input dtype: half the bytes of float64
    if bool((mask & ~finite).any()):
        raise ValueError(f"embeddings contain NaN or inf in {int((mask & ~finite).sum())} rollout(s)")
    emb = embeddings.to(torch.float64)
    if not bool(mask.all()):  # padding slots may hold anything, NaN included
        emb = torch.where(mask.unsqueeze(-1), emb, torch.zeros((), dtype=emb.dtype, device=emb.device))
    norms = emb.norm(dim=-1)
    if bool((mask & (norms < _MIN_NORM)).any()):
        raise ValueError(
            f"embeddings have zero norm in {int((mask & (norms < _MIN_NORM)).sum())} rollout(s); "
            "a zero vector has no direction to compare"
        )
    return emb / norms.clamp_min(_MIN_NORM).unsqueeze(-1)


@KERNELS.register("cosine")
def cosine_kernel(embeddings: torch.Tensor, mask: torch.Tensor, **_: object) -> torch.Tensor:
    """``K_ij = <e_i, e_j>`` of normalised embeddings (a Gram matrix, hence PSD; negatives kept).

    Args:
        embeddings: `(torch.Tensor)` shape (B, G, d).
        mask: `(torch.Tensor)` bool, shape (B, G).
    Returns:
        `(torch.Tensor)` float64, shape (B, G, G); zero rows / columns at padding slots.
    """
    emb = normalize_embeddings(embeddings, mask)
    return emb @ emb.transpose(-1, -2)


@KERNELS.register("rbf")
def rbf_kernel(
    embeddings: torch.Tensor, mask: torch.Tensor, bandwidth: Optional[float] = None, **_: object
) -> torch.Tensor:
    """``K_ij = exp(-||e_i - e_j||^2 / (2 sigma^2))`` of normalised embeddings.

    Args:
        embeddings: `(torch.Tensor)` shape (B, G, d).
        mask: `(torch.Tensor)` bool, shape (B, G).
        bandwidth: `(float | None)` sigma; None uses the median heuristic: sigma is the median distance over
            all within-group pairs of valid rollouts in the batch (one sigma for the batch, so that a group of
            near-identical rollouts is not rescaled to look diverse).
    Returns:
        `(torch.Tensor)` float64, shape (B, G, G); zero rows / columns at padding slots.
    """
    emb = normalize_embeddings(embeddings, mask)
    cos = emb @ emb.transpose(-1, -2)
    sq_dist = (2.0 - 2.0 * cos).clamp_min(0.0)
    sigma = median_bandwidth(sq_dist, mask) if bandwidth is None else float(bandwidth)
    if not sigma > 0:
        raise ValueError(f"rbf bandwidth must be > 0, got {sigma}")
    pair = mask.unsqueeze(-1) & mask.unsqueeze(-2)
    kernel = torch.exp(-sq_dist / (2.0 * sigma * sigma))
    return torch.where(pair, kernel, torch.zeros((), dtype=kernel.dtype, device=kernel.device))


def median_bandwidth(sq_dist: torch.Tensor, mask: torch.Tensor) -> float:
    """Median pairwise distance over distinct valid pairs; 1.0 when there is none or all are 0 (duplicates only:
    any sigma gives them similarity 1)."""
    group_size = mask.shape[-1]
    upper = torch.triu(torch.ones(group_size, group_size, dtype=torch.bool, device=mask.device), diagonal=1)
    pairs = mask.unsqueeze(-1) & mask.unsqueeze(-2) & upper
    distances = sq_dist[pairs].sqrt()
    if distances.numel() == 0:
        return 1.0
    median = float(distances.median())
    return median if median > 0 else 1.0


def compute_kernel(name: str, embeddings: torch.Tensor, mask: torch.Tensor, **options: object) -> torch.Tensor:
    """Dispatch to the kernel registered under ``name`` (see ``KERNELS.names()``)."""
    return KERNELS.get(name)(embeddings, mask, **options)
