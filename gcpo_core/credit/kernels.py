"""Similarity kernels between the rollouts of each group.

Every kernel works on L2-normalised embeddings, has a unit diagonal (so a lone correct rollout is worth
``log 2`` nats whatever the kernel) and is positive semi-definite. Computed in float64: the kernel feeds
log-determinants.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from gcpo_core.credit.grouping import identical_members
from gcpo_core.credit.registry import Registry

Kernel = Callable[..., torch.Tensor]
KERNELS: Registry[Kernel] = Registry("kernel")

# Norms between these are computed without over- or underflow in their squares (sqrt of the float64 range).
_SAFE_NORM = (1e-150, 1e150)


def normalize_embeddings(embeddings: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L2-normalise the valid rows, whatever their scale; invalid (padding) rows become 0.

    Each row is divided by its largest magnitude before its norm is taken, so that norms of 1e154 and more
    (whose squares overflow) and of 1e-162 and less (whose squares underflow) give the same direction as any
    other scale. Only rows with no direction at all (exactly zero) are rejected.

    Args:
        embeddings: `(torch.Tensor)` shape (B, G, d), real.
        mask: `(torch.Tensor)` bool, shape (B, G); False marks padding slots, whose values are ignored.
    Returns:
        `(torch.Tensor)` float64, shape (B, G, d).
    Raises:
        ValueError: wrong shapes, or a valid row is non-finite or exactly zero.
    """
    if embeddings.ndim != 3 or mask.shape != embeddings.shape[:2]:
        raise ValueError(
            f"embeddings must be (B, G, d) with mask (B, G); got {tuple(embeddings.shape)} and {tuple(mask.shape)}"
        )
    finite = torch.isfinite(embeddings).all(dim=-1)  # on the input dtype: half the bytes of float64
    if bool((mask & ~finite).any()):
        raise ValueError(f"embeddings contain NaN or inf in {int((mask & ~finite).sum())} rollout(s)")
    emb = embeddings.to(torch.float64)
    if not bool(mask.all()):  # padding slots may hold anything, NaN included
        emb = torch.where(mask.unsqueeze(-1), emb, torch.zeros((), dtype=emb.dtype, device=emb.device))
    norms = emb.norm(dim=-1, keepdim=True)
    # the plain norm is exact enough unless its square over- or underflowed
    if bool(((norms > _SAFE_NORM[0]) & (norms < _SAFE_NORM[1]) | ~mask.unsqueeze(-1)).all()):
        return emb / torch.where(mask.unsqueeze(-1), norms, torch.ones_like(norms))
    largest = emb.abs().amax(dim=-1, keepdim=True) if emb.shape[-1] else emb.new_zeros(*emb.shape[:2], 1)
    zero = mask & (largest.squeeze(-1) == 0)
    if bool(zero.any()):
        raise ValueError(
            f"embeddings have zero norm in {int(zero.sum())} rollout(s) (every entry exactly 0); a zero vector has "
            "no direction to compare"
        )
    emb = emb / torch.where(largest > 0, largest, torch.ones_like(largest))
    # a valid row now has an entry of magnitude 1, so its norm is in [1, sqrt(d)]; padding rows stay 0
    return emb / emb.norm(dim=-1, keepdim=True).clamp_min(1.0)


def _unit_diagonal(kernel: torch.Tensor, mask: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """Exactly 1 between a valid rollout and itself or a bit-identical copy (dot products of unit vectors round
    to 1 +- 1e-16), exactly 0 at padding."""
    pair = mask.unsqueeze(-1) & mask.unsqueeze(-2)
    kernel = torch.where(same & pair, torch.ones((), dtype=kernel.dtype, device=kernel.device), kernel)
    return torch.where(pair, kernel, torch.zeros((), dtype=kernel.dtype, device=kernel.device))


def _same_rows(embeddings: torch.Tensor, mask: torch.Tensor, classes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(B, G, G) bool: both slots valid and their embeddings bit-for-bit identical (or the same slot)."""
    classes = identical_members(embeddings, mask) if classes is None else classes
    return (classes.unsqueeze(-1) == classes.unsqueeze(-2)) & (classes.unsqueeze(-1) >= 0)


@KERNELS.register("cosine")
def cosine_kernel(
    embeddings: torch.Tensor, mask: torch.Tensor, classes: Optional[torch.Tensor] = None, **_: object
) -> torch.Tensor:
    """``K_ij = <e_i, e_j>`` of normalised embeddings (a Gram matrix, hence PSD; negatives kept).

    Args:
        embeddings: `(torch.Tensor)` shape (B, G, d).
        mask: `(torch.Tensor)` bool, shape (B, G).
        classes: `(torch.Tensor | None)` (B, G) ids of bit-identical embeddings (see
            :func:`gcpo_core.credit.grouping.identical_members`); None: found here.
    Returns:
        `(torch.Tensor)` float64, shape (B, G, G); zero rows / columns at padding slots.
    """
    emb = normalize_embeddings(embeddings, mask)
    return _unit_diagonal(emb @ emb.transpose(-1, -2), mask, _same_rows(embeddings, mask, classes))


@KERNELS.register("rbf")
def rbf_kernel(
    embeddings: torch.Tensor,
    mask: torch.Tensor,
    bandwidth: Optional[float] = None,
    classes: Optional[torch.Tensor] = None,
    **_: object,
) -> torch.Tensor:
    """``K_ij = exp(-||e_i - e_j||^2 / (2 sigma^2))`` of normalised embeddings.

    Args:
        embeddings: `(torch.Tensor)` shape (B, G, d).
        mask: `(torch.Tensor)` bool, shape (B, G).
        bandwidth: `(float | None)` sigma; None uses the median heuristic: sigma is the median distance over
            the within-group pairs of distinct valid rollouts in the batch (one sigma for the batch, so that a
            group of near-identical rollouts is not rescaled to look diverse).
        classes: `(torch.Tensor | None)` (B, G) ids of bit-identical embeddings; None: found here.
    Returns:
        `(torch.Tensor)` float64, shape (B, G, G); zero rows / columns at padding slots.
    """
    emb = normalize_embeddings(embeddings, mask)
    same = _same_rows(embeddings, mask, classes)
    cos = emb @ emb.transpose(-1, -2)
    # identical rollouts are at distance exactly 0, not the 1e-8 that 2 - 2 cos rounds to
    zero = torch.zeros((), dtype=cos.dtype, device=cos.device)
    distance = torch.where(same, zero, (2.0 - 2.0 * cos).clamp_min(0.0).sqrt())
    sigma = median_bandwidth(distance**2, mask, distinct=~same) if bandwidth is None else float(bandwidth)
    if not sigma > 0:
        raise ValueError(f"rbf bandwidth must be > 0, got {sigma}")
    # distance / sigma, not distance^2 / sigma^2: sigma^2 underflows to 0 for sigma < 1e-162 (then 0 / 0 = NaN
    # on the diagonal); an overflowing ratio is inf and its kernel value exactly 0
    kernel = torch.exp(-0.5 * (distance / sigma) ** 2)
    return _unit_diagonal(kernel, mask, same)


def median_bandwidth(sq_dist: torch.Tensor, mask: torch.Tensor, distinct: Optional[torch.Tensor] = None) -> float:
    """Median pairwise distance over the batch's within-group pairs of distinct valid rollouts.

    Pairs of identical rollouts are left out: in a batch where most rollouts are copies they would make the
    median a rounding error, and every distinct pair would then look orthogonal. 1.0 when no distinct pair
    exists (only copies: any sigma gives them similarity 1).

    Args:
        sq_dist: `(torch.Tensor)` squared distances, (B, G, G).
        mask: `(torch.Tensor)` bool (B, G).
        distinct: `(torch.Tensor | None)` bool (B, G, G): pairs that are not copies; None: pairs at a distance > 0.
    """
    group_size = mask.shape[-1]
    upper = torch.triu(torch.ones(group_size, group_size, dtype=torch.bool, device=mask.device), diagonal=1)
    pairs = mask.unsqueeze(-1) & mask.unsqueeze(-2) & upper & (sq_dist > 0 if distinct is None else distinct)
    distances = sq_dist[pairs].sqrt()
    if distances.numel() == 0:
        return 1.0
    median = float(distances.median())
    return median if median > 0 else 1.0


def compute_kernel(name: str, embeddings: torch.Tensor, mask: torch.Tensor, **options: object) -> torch.Tensor:
    """Dispatch to the kernel registered under ``name`` (see ``KERNELS.names()``)."""
    return KERNELS.get(name)(embeddings, mask, **options)
