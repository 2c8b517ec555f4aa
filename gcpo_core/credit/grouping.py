"""Rollouts grouped by prompt id (never by position) into a padded (B, G) layout.

Groups may be uneven (a member dropped, or a dataset with varying n); padding slots carry ``mask = False``
and never enter a kernel, a Shapley game or a group statistic.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Hashable, Sequence

import torch


@dataclass
class GroupLayout:
    """Where each rollout sits in the padded batch.

    Attributes:
        index: `(torch.Tensor)` int64 (B, G): the flat row of each slot, -1 at padding.
        mask: `(torch.Tensor)` bool (B, G): True at real rollouts.
        keys: `(list)` length B: the group id of each group, in order of first appearance.
    """

    index: torch.Tensor
    mask: torch.Tensor
    keys: list

    @property
    def num_rollouts(self) -> int:
        return int(self.mask.sum())

    @property
    def group_sizes(self) -> torch.Tensor:
        return self.mask.sum(dim=1)

    def gather(self, values: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """(N, ...) rows -> (B, G, ...) slots, ``fill`` at padding."""
        index = self.index.to(values.device)
        out = values[index.clamp_min(0)]
        pad = ~self.mask.to(values.device)
        if pad.any():
            out = out.clone()
            out[pad] = fill
        return out

    def scatter(self, values: torch.Tensor) -> torch.Tensor:
        """(B, G, ...) slots -> (N, ...) rows (the inverse of :meth:`gather`)."""
        mask = self.mask.to(values.device)
        out = values.new_zeros((self.num_rollouts, *values.shape[2:]))
        out[self.index.to(values.device)[mask]] = values[mask]
        return out


def layout_groups(group_ids: Sequence[Hashable], device: torch.device | str | None = None) -> GroupLayout:
    """Lay out rollouts by group id.

    Args:
        group_ids: `(Sequence[Hashable])` length N, e.g. verl's ``uid`` array; members need not be adjacent.
            None and NaN are rejected.
        device: where the index tensors live.
    Returns:
        :class:`GroupLayout` with B = number of distinct ids, G = the largest group.
    """
    members: dict[Hashable, list[int]] = {}
    for row, key in enumerate(group_ids):
        key = _hashable(key)
        if key is None or (isinstance(key, float) and math.isnan(key)):
            # None / NaN ids would silently merge (or split) unrelated rollouts into one group
            raise ValueError(f"group id of row {row} is {key!r}; every rollout needs its prompt's id")
        members.setdefault(key, []).append(row)
    keys = list(members)
    width = max((len(rows) for rows in members.values()), default=0)
    index = torch.full((len(keys), width), -1, dtype=torch.long)
    for g, key in enumerate(keys):
        rows = members[key]
        index[g, : len(rows)] = torch.tensor(rows, dtype=torch.long)
    return GroupLayout(index=index.to(device), mask=(index >= 0).to(device), keys=keys)


def _hashable(key: Hashable) -> Hashable:
    # numpy scalars / 0-d arrays from verl's object arrays hash like their Python values
    item = getattr(key, "item", None)
    return item() if callable(item) and getattr(key, "ndim", 1) == 0 else key


def identical_members(
    rows: torch.Tensor, mask: torch.Tensor, return_fingerprints: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Classes of bit-for-bit identical valid rows within each group.

    Identical rollouts are symmetric players of the team game, so they must get identical credit; this finds
    them. The class ids are canonical: within each group they are ordered by a fingerprint of the content, so
    the same group gets the same ids whatever the order of its rows or of the groups in the batch.

    Rows are fingerprinted by a wrapping 64-bit integer sum of their bits times fixed odd weights (integer
    arithmetic, so identical rows get identical fingerprints whatever the reduction order), grouped by
    fingerprint, and every member is then compared with its class's first member in full; only if two different
    rows share a fingerprint does it fall back to sorting whole rows (5x slower on a CPU).

    Args:
        rows: `(torch.Tensor)` shape (B, G, k): what identifies a rollout (its embedding, its quality, ...).
        mask: `(torch.Tensor)` bool (B, G): False at padding.
        return_fingerprints: `(bool)` also return each slot's 64-bit fingerprint (B, G) (0 at padding).
    Returns:
        `(torch.Tensor)` int64 (B, G): the class of each valid slot, 0 .. (distinct rows in the group) - 1;
        -1 at padding.
    """
    num_groups, group_size = mask.shape
    classes = torch.full((num_groups, group_size), -1, dtype=torch.long, device=mask.device)
    fingerprints = torch.zeros((num_groups, group_size), dtype=torch.long, device=mask.device)
    if not bool(mask.any()):
        return (classes, fingerprints) if return_fingerprints else classes
    flat = rows.reshape(num_groups * group_size, -1)
    everyone = bool(mask.all())
    flat = flat if everyone else flat[mask.reshape(-1)]
    flat = flat if flat.dtype in _SAME_WIDTH_INT else flat.to(torch.float64)
    bits = flat.view(_SAME_WIDTH_INT[flat.dtype])
    group = torch.arange(num_groups, device=mask.device)
    group = group.repeat_interleave(group_size) if everyone else group.repeat_interleave(mask.sum(dim=1))
    # integer products and sums wrap modulo 2^64: exact, so identical rows get identical fingerprints
    fingerprint = (bits.to(torch.int64) * _fingerprint_weights(bits.shape[1], bits.device)).sum(dim=1)
    inverse = _sorted_class_index(group, fingerprint)
    representative = _first_index(inverse)[inverse]
    copies = torch.nonzero(representative != torch.arange(len(inverse), device=inverse.device)).squeeze(1)
    if not bool((bits[copies] == bits[representative[copies]]).all()):  # two different rows share a fingerprint
        keys = torch.cat([group.to(torch.float64).unsqueeze(1), flat.to(torch.float64)], dim=1)
        _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    # global class index -> index within the group: subtract the group's first class index
    lowest = torch.full((num_groups,), torch.iinfo(torch.long).max, dtype=torch.long, device=mask.device)
    lowest = lowest.scatter_reduce(0, group, inverse, reduce="amin")
    classes[mask] = inverse - lowest[group]
    if return_fingerprints:
        fingerprints[mask] = fingerprint
        return classes, fingerprints
    return classes


def group_content_keys(fingerprints: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
    """One 64-bit key per group from its members' fingerprints, independent of their order (a wrapping sum of
    a mixed fingerprint per member, so copies count): the same group content gives the same key, exactly.

    Args:
        fingerprints: `(torch.Tensor)` int64 (B, G), e.g. from :func:`identical_members`.
        members: `(torch.Tensor)` bool (B, G): the slots that count.
    Returns:
        `(torch.Tensor)` int64 (B,).
    """
    x = fingerprints.to(torch.int64)
    # splitmix64's finaliser (arithmetic shifts instead of logical ones: still a fixed bijection-like mix)
    x = (x ^ (x >> 30)) * -4658895280553007687
    x = (x ^ (x >> 27)) * -7723592293110705685
    x = x ^ (x >> 31)
    return torch.where(members, x, torch.zeros_like(x)).sum(dim=1)


_SAME_WIDTH_INT = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.int64: torch.int64,
    torch.int32: torch.int32,
}


def _sorted_class_index(group: torch.Tensor, fingerprint: torch.Tensor) -> torch.Tensor:
    """Dense ids of the distinct (group, fingerprint) pairs, in lexicographic order (two stable 1-D sorts:
    far cheaper than a row-wise unique)."""
    order = torch.argsort(fingerprint, stable=True)
    order = order[torch.argsort(group[order], stable=True)]
    g, f = group[order], fingerprint[order]
    new = torch.ones_like(g, dtype=torch.bool)
    new[1:] = (g[1:] != g[:-1]) | (f[1:] != f[:-1])
    inverse = torch.empty_like(order)
    inverse[order] = torch.cumsum(new, dim=0) - 1
    return inverse


@functools.lru_cache(maxsize=16)
def _fingerprint_weights_cpu(width: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0x9E3779B97F4A7C15 & (2**63 - 1))
    return torch.randint(-(2**62), 2**62, (width,), generator=generator, dtype=torch.int64) * 2 + 1


def _fingerprint_weights(width: int, device: torch.device) -> torch.Tensor:
    return _fingerprint_weights_cpu(width).to(device)


def _first_index(inverse: torch.Tensor) -> torch.Tensor:
    """For each class id, the first row that has it."""
    rows = torch.arange(len(inverse), device=inverse.device)
    first = torch.full((int(inverse.max()) + 1,), len(inverse), dtype=torch.long, device=inverse.device)
    return first.scatter_reduce(0, inverse, rows, reduce="amin")
