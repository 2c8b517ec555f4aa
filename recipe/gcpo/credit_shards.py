"""Where the credit actors run and which rows each one embeds.

:func:`shard_rows` splits a batch between encoder shards so that each reads about as many word pieces, whatever
the mix of short and long responses; :func:`credit_placements` picks the placement-group bundles (one per GPU or
one per node) the shard actors are created in.

Word pieces are estimated from each text's characters (capped at what the encoder reads of one text): counting
them exactly would tokenise the batch twice, once in the driver on the critical path. The pieces each shard did
read are reported (``gcpo/encoder/shard_pieces_max_over_mean``), so a poor estimate shows in the metrics.
"""

from __future__ import annotations

import heapq
from typing import Optional, Sequence

import numpy as np

from gcpo_core.credit.config import Rule

SHARD_MODES = ("auto", "per_gpu", "per_node")

# characters per BERT word piece on English and LaTeX math (MiniLM's uncased vocabulary); only the ratio between
# texts matters for balancing, this scales the cap below
CHARS_PER_PIECE = 4.0


def estimated_pieces(texts: Sequence[str], max_pieces: Optional[int] = None) -> np.ndarray:
    """Word pieces the encoder will read of each text, estimated from its length.

    Args:
        texts: `(Sequence[str])` length N.
        max_pieces: the most the encoder reads of one text (max_chunks x piece length), None: no cap.
    Returns:
        float64 (N,), 0 for empty texts.
    """
    estimate = np.fromiter((len(t.strip()) / CHARS_PER_PIECE for t in texts), dtype=np.float64, count=len(texts))
    if max_pieces is not None:
        np.minimum(estimate, float(max_pieces), out=estimate)
    return estimate


def shard_rows(costs: np.ndarray, shards: int) -> list[np.ndarray]:
    """Split rows between ``shards`` workers so that their summed costs are as even as greedy allows.

    Longest-first greedy (each row to the least-loaded shard), which is within 4/3 of the best split and, for
    many rows of a few thousand pieces, within one row's cost of it. Deterministic: ties go to the lower shard
    and the lower row, so the same batch always gets the same split (a prefetch and the credit call agree).

    Args:
        costs: `(np.ndarray)` float (N,), non-negative.
        shards: `(int)` >= 1.
    Returns:
        ``shards`` int64 arrays of row indices, each ascending; together they hold every row exactly once.
    """
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    costs = np.asarray(costs, dtype=np.float64)
    if costs.ndim != 1 or (costs < 0).any() or not np.isfinite(costs).all():
        raise ValueError("costs must be a 1-D array of finite non-negative numbers")
    order = np.lexsort((np.arange(len(costs)), -costs))  # cost descending, then row ascending
    heap = [(0.0, s) for s in range(shards)]
    owned: list[list[int]] = [[] for _ in range(shards)]
    for row in order:
        load, s = heapq.heappop(heap)
        owned[s].append(int(row))
        heapq.heappush(heap, (load + float(costs[row]), s))
    return [np.sort(np.asarray(rows, dtype=np.int64)) for rows in owned]


SHARDS = Rule(
    lambda v: not isinstance(v, bool) and (isinstance(v, int) and v >= 1 or v in SHARD_MODES),
    f"an integer >= 1 or one of {list(SHARD_MODES)}",
)


def parse_shards(value) -> int | str:
    """``algorithm.gcpo.actor.shards``: an integer >= 1, or one of auto, per_gpu, per_node."""
    SHARDS.check("credit actor", "shards", value)
    return value


def credit_placements(placement_groups: Sequence, shards: int | str) -> list[tuple[object, int]]:
    """The (placement group, bundle index) of each credit shard actor.

    Args:
        placement_groups: verl's global pool, one placement group per node, one bundle per GPU.
        shards: ``auto`` / ``per_gpu`` (one actor per GPU bundle), ``per_node`` (bundle 0 of each node), or a
            count: that many bundles, taken node by node in turn (node 0 GPU 0, node 1 GPU 0, node 0 GPU 1, ...)
            so that a few shards spread over the nodes.
    Returns:
        One (placement group, bundle index) per shard actor, the first being node 0's bundle 0.
    """
    parse_shards(shards)
    if not placement_groups:
        raise ValueError("no placement group to place the credit actors in")
    if shards == "per_node":
        return [(pg, 0) for pg in placement_groups]
    interleaved = []
    depth = max(pg.bundle_count for pg in placement_groups)
    for index in range(depth):
        interleaved.extend((pg, index) for pg in placement_groups if index < pg.bundle_count)
    if shards in ("auto", "per_gpu"):
        return interleaved
    if shards > len(interleaved):
        raise ValueError(
            f"credit actor: shards={shards} but the global pool has {len(interleaved)} GPU bundles; "
            "use at most one shard per GPU (or auto)"
        )
    return interleaved[:shards]
