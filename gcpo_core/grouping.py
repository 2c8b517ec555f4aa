"""Rollouts grouped by prompt id (never by position) into a padded (B, G) layout.

Groups may be uneven (a member dropped, or a dataset with varying n); padding slots carry ``mask = False``
and never enter a kernel, a Shapley game or a group statistic.
"""

from __future__ import annotations

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
        device: where the index tensors live.
    Returns:
        :class:`GroupLayout` with B = number of distinct ids, G = the largest group.
    """
    members: dict[Hashable, list[int]] = {}
    for row, key in enumerate(group_ids):
        members.setdefault(_hashable(key), []).append(row)
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
