"""Hypothesis strategies for the Shapley tests: small games with planted symmetric players and null players.

Every planted case is built, not hoped for, so a property about copies or null players is checked on every
example (an ``if`` around the assertion could be false on all of them).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tests.gcpo_core.helpers import clustered_embeddings


class Game(NamedTuple):
    """L (n, n) float64, exactly symmetric; quality (n,); ``copy``: two players (i, j) that swap L onto itself
    exactly, both contributing (or None); ``null``: a player with q = 0 (or None)."""

    L: np.ndarray
    quality: np.ndarray
    copy: Optional[tuple[int, int]]
    null: Optional[int]


@st.composite
def games(draw, min_players=1, max_players=7, plant_copy=False, plant_null=False):
    """A weighted kernel L = diag(q) E E^T diag(q) with some duplicate rows and some q = 0 players; with
    ``plant_copy`` two contributing players are exact copies (their rows and columns of L identical bit for bit),
    with ``plant_null`` one player has q = 0 while another contributes."""
    least = max(min_players, 2 if plant_copy or plant_null else 1, 3 if plant_copy and plant_null else 1)
    n = draw(st.integers(least, max(least, max_players)))
    dim = draw(st.integers(1, 5))
    emb = draw(arrays(np.float64, (n, dim), elements=st.floats(-1, 1, allow_nan=False, width=32)))
    degenerate = np.linalg.norm(emb, axis=1) < 1e-3
    emb[degenerate] = np.eye(n, dim)[degenerate] + np.eye(1, dim)  # never the zero vector
    for i in range(1, n):
        if draw(st.booleans()) and draw(st.booleans()):
            emb[i] = emb[draw(st.integers(0, i - 1))]  # an exact duplicate
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    quality = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 1.0, 0.5]), min_size=n, max_size=n)))
    copy = null = None
    if plant_copy:
        i = draw(st.integers(0, n - 2))
        j = draw(st.integers(i + 1, n - 1))
        emb[j] = emb[i]
        quality[i] = quality[j] = draw(st.sampled_from([1.0, 0.5]))
        copy = (i, j)
    if plant_null:
        null = draw(st.sampled_from([k for k in range(n) if copy is None or k not in copy]))
        quality[null] = 0.0
        other = copy[0] if copy else (null + 1) % n
        quality[other] = quality[other] or 1.0  # someone contributes
    L = quality[:, None] * (emb @ emb.T) * quality[None, :]
    L = (L + L.T) / 2  # a matrix product need not be symmetric bit for bit
    if copy:  # nor give identical rows for identical embeddings: make the copies' rows and columns one
        i, j = copy
        L[j, :] = L[i, :]
        L[:, j] = L[:, i]
    return Game(L, quality, copy, null)


def batched(L: np.ndarray, quality: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """One game as a batch of one group: L (1, n, n) and contributing (1, n)."""
    return torch.from_numpy(L)[None], torch.from_numpy(quality > 0)[None]


@st.composite
def groups_with_copies(draw):
    """A batch of 1-3 groups of 2-9 rollouts with planted bit-identical copies and some q = 0 rollouts; every
    group holds at least one pair of identical contributing rollouts (returned as (group, i, j) triples)."""
    batch = draw(st.integers(1, 3))
    size = draw(st.integers(2, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    emb = clustered_embeddings(rng, batch, size, dim=6)
    quality = rng.choice([0.0, 1.0, 1.0, 1.0, 0.5], size=(batch, size))
    for b in range(batch):
        for i in range(1, size):
            if rng.random() < 0.4:  # a copy of an earlier rollout: same embedding and quality, bit for bit
                j = int(rng.integers(0, i))
                emb[b, i], quality[b, i] = emb[b, j], quality[b, j]
    planted = []
    for b in range(batch):  # the last rollout copies a contributing earlier one
        j = int(rng.integers(0, size - 1))
        quality[b, j] = quality[b, j] or 1.0
        emb[b, size - 1], quality[b, size - 1] = emb[b, j], quality[b, j]
        planted.append((b, j, size - 1))
    # elementwise products summed over the same axis: identical embeddings give identical rows, bit for bit
    L = quality[:, :, None] * (emb[:, :, None, :] * emb[:, None, :, :]).sum(-1) * quality[:, None, :]
    return torch.from_numpy(L), torch.from_numpy(quality > 0), planted
