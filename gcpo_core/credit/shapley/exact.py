"""Exact Shapley values of ``V(S) = log det(I + L_S)``: every coalition valued by one sweep, then one matrix product.

A class of ``m`` identical players is collapsed into one player with multiplicity ``m``: the value of a
coalition depends only on how many copies of each class it holds (``V = log det(I + D^1/2 L_cls D^1/2)`` with
D the copy counts), so all ``prod(m_k + 1)`` count vectors are valued by one sweep over the classes
(Schur-complement recursion, see :func:`class_team_values`) and the Shapley value of a class member is one
matrix product with combinatorial weights (:func:`shapley_from_class_values`). Without duplicates this is the
``2^c``-coalition sweep.
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

import torch

# Most players solved exactly: 2^c coalitions of ~50 bytes of work space each is ~200 MB per group at c = 22.
EXACT_LIMIT = 22


def class_team_values(weighted_kernel: torch.Tensor, multiplicities: Optional[Sequence[int]] = None) -> torch.Tensor:
    """``log det(I + L_S)`` for every coalition S of copies of the classes, in mixed-radix order.

    Class k has ``m_k`` identical players; a coalition is a count vector ``n`` (``0 <= n_k <= m_k``) and its
    index is ``sum_k n_k * prod_{l<k} (m_l + 1)`` (class 0 the least significant digit; with every ``m_k = 1``
    this is bitmask order). Classes are added in turn. For every coalition ``P`` of the earlier classes the
    sweep keeps the Schur complement ``R_P = L - L[:, P] (I + L_P)^-1 L[P, :]`` restricted to the classes still
    to come. Adding ``j`` copies of class ``m`` multiplies the determinant by ``1 + j R_P[m, m]`` and updates
    ``R`` by ``- j / (1 + j r) R[:, m] R[m, :]`` (Sherman-Morrison with a rank-one block of j equal rows), so a
    count vector costs O(w^2) for the w classes still to come: O(prod(m_k + 1)) work per group.

    The sweep goes level by level: all coalitions of the first m classes are one tensor, so adding class m is
    a handful of batched operations per copy count (O(sum m_k) kernel launches in all, where keeping one block
    per earlier level took O(K^2): on a GPU the launches, not the arithmetic, are what costs).

    Args:
        weighted_kernel: `(torch.Tensor)` L between one representative of each class, shape (n, K, K), PSD.
        multiplicities: `(Sequence[int] | None)` copies per class, length K; None: all 1 (every subset).
    Returns:
        `(torch.Tensor)` float64, shape (n, prod(m_k + 1)).
    """
    L = weighted_kernel.to(torch.float64)
    n, k, _ = L.shape
    counts = [1] * k if multiplicities is None else [int(m) for m in multiplicities]
    if len(counts) != k or min(counts, default=1) < 1:
        raise ValueError(f"need one multiplicity >= 1 per class ({k}); got {counts}")
    # every coalition of the classes added so far (mixed-radix order): its log-det and its Schur complement on
    # the classes still to come (index 0 = the next class)
    values = L.new_zeros(n, 1)
    residual = L.unsqueeze(1)
    for m in range(k):
        r = residual[:, :, 0, 0]
        column = residual[:, :, 1:, 0]
        rest = residual[:, :, 1:, 1:]
        grown_values, grown_residuals = [values], [rest]  # 0 copies of class m: the lowest digit block
        for copies in range(1, counts[m] + 1):
            pivot = 1.0 + copies * r
            grown_values.append(values + torch.log(pivot))
            scaled = (column * (-copies / pivot).unsqueeze(-1)).unsqueeze(-2)
            grown_residuals.append(torch.addcmul(rest, column.unsqueeze(-1), scaled))
        values = torch.cat(grown_values, dim=1)
        residual = torch.cat(grown_residuals, dim=1)
    return values


def subset_team_values(weighted_kernel: torch.Tensor) -> torch.Tensor:
    """``log det(I + L_S)`` for every subset ``S`` of the players, in bitmask order (bit i = player i); see
    :func:`class_team_values` (every class a single player).

    Args:
        weighted_kernel: `(torch.Tensor)` L, shape (n, c, c), PSD.
    Returns:
        `(torch.Tensor)` float64, shape (n, 2^c).
    """
    return class_team_values(weighted_kernel)


# Coalitions per block of the Shapley weight matrix: (2^16, c) float64 is at most ~3 MB for c <= 22.
WEIGHT_BLOCK = 2**16


@functools.lru_cache(maxsize=64)
def _weight_block_cpu(profile: tuple[int, ...], start: int, rows: int) -> torch.Tensor:
    """Rows ``start .. start + rows`` of W, (rows, K), with ``phi = v @ W`` for count-vector values v in
    mixed-radix order (see :func:`class_team_values`); ``phi_k`` is the credit of one member of class k.

    A member of class k is preceded by a set holding ``n_j`` copies of class j with probability
    ``A(n) (m_k - n_k) / m_k * w(s)``, ``A(n) = prod_j C(m_j, n_j)``, ``s = sum n``, ``w(s) = s! (N-1-s)! / N!``,
    so ``W[n, k] = A(n) / m_k * (n_k w(s - 1) - (m_k - n_k) w(s))``. Without duplicates this is
    ``W[S, i] = w(|S| - 1)`` if i is in S, else ``-w(|S|)``, computed from exact factorials; with duplicates the
    weights are exponentials of logarithms of exact integers (relative error ~1e-16 times N).
    """
    counts = torch.tensor(profile, dtype=torch.int64)
    k = len(profile)
    total = int(counts.sum())
    radix = counts + 1
    strides = torch.cumprod(torch.cat([torch.ones(1, dtype=torch.int64), radix[:-1]]), dim=0)
    index = torch.arange(start, start + rows, dtype=torch.int64)
    digits = (index[:, None] // strides[None, :]) % radix[None, :]  # (rows, K): copies of each class
    size = digits.sum(dim=1)
    if all(m == 1 for m in profile):
        per_size = torch.tensor(
            [math.factorial(s) * math.factorial(total - 1 - s) / math.factorial(total) for s in range(total)] + [0.0],
            dtype=torch.float64,
        )
        members = digits.bool()
        with_i = per_size[(size - 1).clamp_min(0)]
        without_i = per_size[size]
        return torch.where(members, with_i[:, None], -without_i[:, None])
    # log w(s) = -log(N * C(N - 1, s)), from exact integers; log C(m_j, n_j) likewise
    log_w = torch.tensor(
        [-math.log(total * math.comb(total - 1, s)) for s in range(total)] + [-math.inf], dtype=torch.float64
    )
    widest = max(profile) + 1
    log_comb = torch.full((k, widest), -math.inf, dtype=torch.float64)
    for j, m in enumerate(profile):
        log_comb[j, : m + 1] = torch.tensor([math.log(math.comb(m, t)) for t in range(m + 1)], dtype=torch.float64)
    log_a = log_comb[torch.arange(k)[None, :], digits].sum(dim=1)  # (rows,)
    before = torch.exp(log_a + log_w[(size - 1).clamp_min(0)])  # w(s - 1) A(n); unused where s = 0
    after = torch.exp(log_a + log_w[size])  # w(s) A(n); 0 where s = N
    m = counts.to(torch.float64)[None, :]
    n_k = digits.to(torch.float64)
    return (n_k * before[:, None] - (m - n_k) * after[:, None]) / m


def shapley_from_class_values(values: torch.Tensor, multiplicities: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Shapley value of one member of each class from the values of all count vectors (mixed-radix order):
    ``phi = v @ W``, with W built block by block so that its memory stays bounded however many there are.

    Args:
        values: `(torch.Tensor)` float64 (n, prod(m_k + 1)).
        multiplicities: `(Sequence[int] | None)` copies per class; None: all 1 (then values has 2^c columns).
    Returns:
        `(torch.Tensor)` float64 (n, K).
    """
    n, coalitions = values.shape
    profile = (1,) * (coalitions.bit_length() - 1) if multiplicities is None else tuple(int(m) for m in multiplicities)
    if math.prod(m + 1 for m in profile) != coalitions:
        raise ValueError(f"{coalitions} coalition values do not match multiplicities {profile}")
    phi = values.new_zeros(n, len(profile))
    for start in range(0, coalitions, WEIGHT_BLOCK):
        rows = min(WEIGHT_BLOCK, coalitions - start)
        phi += values[:, start : start + rows] @ _weight_block_cpu(profile, start, rows).to(values.device)
    return phi


def shapley_from_subset_values(values: torch.Tensor) -> torch.Tensor:
    """Shapley values from the values of all subsets (bitmask order); see :func:`shapley_from_class_values`."""
    return shapley_from_class_values(values)


def coalition_count(multiplicities: Sequence[int]) -> int:
    """Count vectors the exact sweep values: ``prod(m_k + 1)`` (``2^c`` without duplicates)."""
    return math.prod(int(m) + 1 for m in multiplicities)


def exact_shapley(
    weighted_kernel: torch.Tensor, multiplicities: Optional[Sequence[int]] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact Shapley values, batched; with ``multiplicities``, of the game in which class k has m_k copies.

    Args:
        weighted_kernel: `(torch.Tensor)` L, shape (n, K, K): one representative per class (every one
            contributing).
        multiplicities: `(Sequence[int] | None)` copies per class; None: every class a single player.
    Returns:
        phi `(torch.Tensor)` float64 (n, K), the credit of one member of each class, and a zero stderr.
    """
    n, k, _ = weighted_kernel.shape
    profile = (1,) * k if multiplicities is None else tuple(multiplicities)
    if coalition_count(profile) > 2**EXACT_LIMIT:
        raise ValueError(
            f"exact Shapley of {sum(profile)} players in {k} classes needs {coalition_count(profile)} "
            f"coalitions; at most 2^{EXACT_LIMIT} (= {EXACT_LIMIT} distinct players) are solved exactly "
            "(use method auto or mc)"
        )
    phi = shapley_from_class_values(class_team_values(weighted_kernel, profile), profile)
    return phi, torch.zeros_like(phi)


def exact_work_bytes(profile: tuple[int, ...]) -> int:
    """float64 work space of the exact sweep for one group of class profile ``profile`` (copies per class), which
    sizes the batches the dispatch solves: the largest level of the sweep (its residuals and the next level's,
    pieces and concatenation) and the values (pieces, concatenation, one block of their product). The weight
    block itself (at most ``WEIGHT_BLOCK`` x K) is shared by the batch."""
    k = len(profile)
    stride, peak = 1, 0
    for m, copies in enumerate(profile):
        width = k - m
        grown = stride * (copies + 1)
        peak = max(peak, stride * width * width + 2 * grown * (width - 1) ** 2)
        stride = grown
    return 8 * (peak + 3 * stride)
