"""How much float64 work space one batched step of a Shapley estimator may use.

The exact sweep and the Monte-Carlo Choleskys are batched over groups (and permutations); a bound on each
batch keeps 2^16-coalition groups, big Monte-Carlo batches and single groups of thousands of rollouts in
bounded memory.
"""

from __future__ import annotations

import torch

# On a GPU, larger chunks mean fewer kernel launches (the exact sweep launches O(c^2) small kernels per chunk).
CHUNK_BYTES = 256 * 2**20
GPU_CHUNK_BYTES = 2 * 2**30


def work_budget(device: torch.device) -> int:
    """The work-space budget of one batched step on ``device``: ``GPU_CHUNK_BYTES`` on a GPU, else ``CHUNK_BYTES``
    (read at call time, so that a test may shrink it)."""
    return GPU_CHUNK_BYTES if device.type == "cuda" else CHUNK_BYTES
