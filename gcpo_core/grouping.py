"""Rollouts grouped by prompt id (never by position) into a padded (B, G) layout.

Groups may be uneven (a member dropped, or a dataset with varying n); padding slots carry ``mask = False``
and never enter a kernel, a Shapley game or a group statistic.
"""

from __future__ import annotations

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


def identical_members(rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Classes of bit-for-bit identical valid rows within each group.

    Identical rollouts are symmetric players of the team game, so they must get identical credit; this finds
    them. The class ids are canonical: they order each group's distinct rows by content (lexicographically),
    so the same group gets the same ids whatever the order of its rows or of the groups in the batch.

    Args:
        rows: `(torch.Tensor)` shape (B, G, k): what identifies a rollout (its embedding, its quality, ...).
        mask: `(torch.Tensor)` bool (B, G): False at padding.
    Returns:
        `(torch.Tensor)` int64 (B, G): the class of each valid slot, 0 .. (distinct rows in the group) - 1,
        ordered by content within the group; -1 at padding.
    """
    num_groups, group_size = mask.shape
    classes = torch.full((num_groups, group_size), -1, dtype=torch.long, device=mask.device)
    if not bool(mask.any()):
        return classes
    flat = rows.reshape(num_groups * group_size, -1)[mask.reshape(-1)].to(torch.float64)
    group = torch.arange(num_groups, device=mask.device).repeat_interleave(mask.sum(dim=1))
    # the group index first: unique's lexicographic order sorts by group, then by content
    keys = torch.cat([group.to(torch.float64).unsqueeze(1), flat], dim=1)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    # global class index -> index within the group: subtract the group's first class index
    first = torch.full((num_groups,), torch.iinfo(torch.long).max, dtype=torch.long, device=mask.device)
    first = first.scatter_reduce(0, group, inverse, reduce="amin")
    classes[mask] = inverse - first[group]
    return classes
