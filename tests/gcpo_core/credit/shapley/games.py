"""Hypothesis strategies for the Shapley tests: small games with duplicate rollouts and null players."""

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tests.gcpo_core.helpers import clustered_embeddings


@st.composite
def games(draw, min_players=1, max_players=7):
    """A weighted kernel L = diag(q) E E^T diag(q) with some duplicate rows and some q = 0 players."""
    n = draw(st.integers(min_players, max_players))
    dim = draw(st.integers(1, 5))
    emb = draw(arrays(np.float64, (n, dim), elements=st.floats(-1, 1, allow_nan=False, width=32)))
    degenerate = np.linalg.norm(emb, axis=1) < 1e-3
    emb[degenerate] = np.eye(n, dim)[degenerate] + np.eye(1, dim)  # never the zero vector
    for i in range(1, n):
        if draw(st.booleans()) and draw(st.booleans()):
            emb[i] = emb[draw(st.integers(0, i - 1))]  # an exact duplicate
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    quality = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 1.0, 0.5]), min_size=n, max_size=n)))
    L = quality[:, None] * (emb @ emb.T) * quality[None, :]
    return L, quality


def batched(L: np.ndarray, quality: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """One game as a batch of one group: L (1, n, n) and contributing (1, n)."""
    return torch.from_numpy(L)[None], torch.from_numpy(quality > 0)[None]


@st.composite
def groups_with_copies(draw):
    """A batch of 1-3 groups of up to 9 rollouts with planted bit-identical copies and some q = 0 rollouts."""
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
    L = quality[:, :, None] * np.einsum("bid,bjd->bij", emb, emb) * quality[:, None, :]
    return torch.from_numpy(L), torch.from_numpy(quality > 0)
