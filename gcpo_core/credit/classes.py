"""Classes of identical players in a padded batch of games: who they are, how many, and one value per class.

Identical rollouts (the same embedding and quality, bit for bit) are symmetric players of the team game, so
every Shapley method must give them the same credit exactly. The estimators see a group's players in a
canonical order (by class, so by content) and share one value per class; this module holds that bookkeeping:
the class ids read off L (:func:`classes_of_game`), dense per-row ranks, the per-group class sizes and
representatives that the exact solver collapses copies with, a class mean for sampled estimates, and the
broadcast of each class's first value to every member (bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from gcpo_core.credit.grouping import identical_members


def classes_of_game(weighted_kernel: torch.Tensor, contributing: torch.Tensor) -> torch.Tensor:
    """Classes of identical players read off L itself: players whose rows are identical bit for bit (for a
    symmetric L that makes them interchangeable). The ids are ordered by a key that does not depend on the
    order of the rows (the diagonal entry, then the row's sorted entries), so a group whose rows come in
    another order gets the same canonical order (up to ties between different players with equal keys).

    Args:
        weighted_kernel: `(torch.Tensor)` L, (B, G, G).
        contributing: `(torch.Tensor)` bool (B, G).
    Returns:
        `(torch.Tensor)` int64 (B, G), -1 where not contributing.
    """
    L = weighted_kernel.to(torch.float64)
    identical = identical_members(L, contributing)
    masked = torch.where(contributing.unsqueeze(-2), L, torch.zeros((), dtype=L.dtype, device=L.device))
    invariant = torch.cat(
        [torch.diagonal(L, dim1=-2, dim2=-1).unsqueeze(-1), masked.sort(dim=-1, descending=True).values], dim=-1
    )
    order_key = identical_members(invariant, contributing)
    # rank by (order key, identity class): the order key first, so that row order only breaks exact ties
    group_size = L.shape[-1]
    combined = torch.where(
        contributing, order_key * (group_size + 1) + identical, torch.full_like(identical, (group_size + 1) ** 2)
    )
    return torch.where(contributing, dense_ranks(combined), torch.full_like(identical, -1))


def dense_ranks(classes: torch.Tensor) -> torch.Tensor:
    """Class ids (n, c) -> 0 .. (distinct - 1) per row, keeping their order (for scatter-based class means)."""
    sorted_ids, _ = classes.sort(dim=1)
    new = torch.ones_like(sorted_ids, dtype=torch.bool)
    new[:, 1:] = sorted_ids[:, 1:] != sorted_ids[:, :-1]
    rank_of_sorted = new.cumsum(dim=1) - 1
    # position of each id in the sorted row: ids are small integers, so search
    positions = torch.searchsorted(sorted_ids.contiguous(), classes.contiguous())
    return torch.gather(rank_of_sorted, 1, positions)


@dataclass
class ClassStatistics:
    """Per group (B, G): ``sizes[b, k]`` copies in class k; ``rank[b, k]`` the position of class k when the
    group's classes are sorted by size (largest first), then content; ``representative[b, r]`` the slot of one
    member of the class at rank r (0 where there is none)."""

    sizes: torch.Tensor
    rank: torch.Tensor
    representative: torch.Tensor


def class_statistics(classes: torch.Tensor, contributing: torch.Tensor) -> ClassStatistics:
    """Sizes, size ranks and representatives of each group's classes (see :class:`ClassStatistics`): the exact
    solver plays one representative per class with its size, and groups of one size profile share a batch.

    Args:
        classes: `(torch.Tensor)` int64 (B, G): class ids 0 .. G - 1 of the contributing slots.
        contributing: `(torch.Tensor)` bool (B, G).
    Returns:
        :class:`ClassStatistics` of three int64 (B, G) tensors.
    """
    num_groups, group_size = classes.shape
    key = torch.where(contributing, classes, torch.zeros_like(classes))
    sizes = torch.zeros_like(classes).scatter_add_(1, key, contributing.to(classes.dtype))
    present = sizes > 0
    ids = torch.arange(group_size, device=classes.device).expand(num_groups, -1)
    order_key = torch.where(
        present, (group_size + 1 - sizes) * (group_size + 1) + ids, torch.full_like(sizes, (group_size + 2) ** 2)
    )
    by_rank = torch.argsort(order_key, dim=1, stable=True)  # rank -> class id
    rank = torch.argsort(by_rank, dim=1)  # class id -> rank
    first_slot = torch.full_like(classes, group_size).scatter_reduce(
        1, key, torch.where(contributing, ids, torch.full_like(ids, group_size)), reduce="amin"
    )
    representative = torch.gather(first_slot, 1, by_rank).clamp_max(group_size - 1) if group_size else first_slot
    return ClassStatistics(sizes=sizes, rank=rank, representative=representative)


def class_mean(values: torch.Tensor, classes: Optional[torch.Tensor]) -> torch.Tensor:
    """Replace each player's value (last dim) by the mean over its class (members of a class are identical
    players: averaging keeps every estimate unbiased and makes theirs equal bit for bit).

    Args:
        values: `(torch.Tensor)` (n, ..., c): players in the last dimension.
        classes: `(torch.Tensor | None)` int64 (n, c), dense ids 0 .. c - 1 (see :func:`dense_ranks`); None:
            every player its own class (values returned as they are).
    Returns:
        `(torch.Tensor)` the shape of ``values``.
    """
    if classes is None:
        return values
    n, c = classes.shape
    index = classes.view(n, *([1] * (values.ndim - 2)), c).expand_as(values)
    sums = torch.zeros_like(values).scatter_add_(-1, index, values)
    sizes = torch.zeros(n, c, dtype=values.dtype, device=values.device).scatter_add_(
        -1, classes, torch.ones_like(classes, dtype=values.dtype)
    )
    sizes = sizes.view(n, *([1] * (values.ndim - 2)), c)
    return (sums / sizes.clamp_min(1.0)).gather(-1, index)


def first_of_class(values: torch.Tensor, classes: torch.Tensor, contributing: torch.Tensor) -> torch.Tensor:
    """Every member of a class gets the value of its class's first member, bit for bit: reductions over
    columns (a mean over units, a matrix product) may round columns differently, so equal inputs alone do
    not guarantee equal outputs.

    Args:
        values: `(torch.Tensor)` (B, G).
        classes: `(torch.Tensor)` int64 (B, G); read only where ``contributing``.
        contributing: `(torch.Tensor)` bool (B, G): other slots keep their own value.
    Returns:
        `(torch.Tensor)` (B, G).
    """
    num_groups, group_size = values.shape
    slot = torch.arange(group_size, device=values.device).expand(num_groups, -1)
    key = torch.where(contributing, classes, torch.zeros_like(classes))
    first = torch.full_like(slot, group_size).scatter_reduce(
        1, key, torch.where(contributing, slot, group_size), reduce="amin"
    )
    source = torch.where(contributing, torch.gather(first, 1, key), slot)
    return torch.gather(values, 1, source)
