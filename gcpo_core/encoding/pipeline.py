"""Texts + rewards + group ids -> embeddings -> Shapley credit -> advantages, with timings and diagnostics.

:func:`credit_rollouts` is the one call the credit actor, ``gcpo credit`` on text and ``gcpo demo`` share;
:func:`credit_encoded` is its second half, for embeddings made elsewhere (the sharded credit actors embed their
shares of a batch side by side, and one of them credits the whole batch). Rows marked invalid (verl's padding
rows) are left out of every group and get zeros.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Optional, Sequence

import numpy as np
import torch

from gcpo_core.credit.compute import compute_credit
from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.encoder import Encoded, RolloutEncoder

PER_ROLLOUT_FIELDS = ("quality", "shapley", "shapley_stderr", "score", "advantage")


@dataclass
class RolloutCredit:
    """Per-rollout results as float64 numpy arrays of length N (0 at invalid rows), plus batch metrics.

    Attributes:
        metrics: ``gcpo/*`` diagnostics and ``gcpo/encoder/*`` statistics.
        timings: seconds spent in ``embed``, ``shapley`` (kernel, credit, advantages) and ``total``.
        embeddings: float32 (N, d) when asked for, else None.
        texts: the texts credited, when the caller did not have them (the credit actors read and decode
            TransferQueue rows themselves) and asked for them; else None.
    """

    quality: np.ndarray
    shapley: np.ndarray
    shapley_stderr: np.ndarray
    score: np.ndarray
    advantage: np.ndarray
    metrics: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    embeddings: Optional[np.ndarray] = None
    texts: Optional[list[str]] = None


def rows_to_credit(
    n: int,
    group_ids: Sequence[Hashable],
    valid: Optional[Sequence[bool]] = None,
    expected_group_size: Optional[int] = None,
) -> tuple[np.ndarray, int]:
    """The rows to credit (not marked invalid) and the number of incomplete groups among them.

    Raises:
        ValueError: ``group_ids`` or ``valid`` of the wrong length, or a group larger than ``expected_group_size``
            (a grouping bug).
    """
    if len(group_ids) != n or (valid is not None and len(valid) != n):
        raise ValueError(f"texts, rewards, group ids and valid flags must have one entry per rollout (N={n})")
    keep = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    rows = np.flatnonzero(keep)
    sizes = Counter(group_ids[i] for i in rows)
    if expected_group_size is None:
        return rows, 0
    oversized = {g: s for g, s in sizes.items() if s > expected_group_size}
    if oversized:
        example = next(iter(oversized.items()))
        raise ValueError(
            f"{len(oversized)} group(s) have more than {expected_group_size} rollouts (e.g. {example[0]!r}: "
            f"{example[1]}); rollouts must be grouped by their prompt's uid"
        )
    return rows, sum(s < expected_group_size for s in sizes.values())


def credit_rollouts(
    texts: Sequence[str],
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    encoder: RolloutEncoder,
    config: CreditConfig = CreditConfig(),
    valid: Optional[Sequence[bool]] = None,
    expected_group_size: Optional[int] = None,
    return_embeddings: bool = False,
    seed: Optional[int] = None,
) -> RolloutCredit:
    """Credit a batch of rollout texts.

    Args:
        texts: `(Sequence[str])` length N, the decoded responses.
        rewards: `(Sequence[float])` length N, verifier rewards.
        group_ids: `(Sequence[Hashable])` length N, prompt ids (verl's ``uid``).
        encoder: `(RolloutEncoder)` the frozen sentence encoder.
        config: `(CreditConfig)` credit-engine settings.
        valid: `(Sequence[bool] | None)` False for rows to leave out (padding).
        expected_group_size: `(int | None)` rollouts per prompt; smaller groups are counted
            (``gcpo/incomplete_groups``), larger ones are an error (a grouping bug).
        return_embeddings: keep the embeddings in the result.
        seed: `(int | None)` overrides ``config.seed`` (the Monte-Carlo permutations) for this call.
    Returns:
        :class:`RolloutCredit`.
    """
    start = time.perf_counter()
    n = len(texts)
    if len(rewards) != n:
        raise ValueError(f"texts, rewards, group ids and valid flags must have one entry per rollout (N={n})")
    rows, _ = rows_to_credit(n, group_ids, valid, expected_group_size)  # before the embedding: fail fast
    encoded = encoder.encode([texts[i] for i in rows])
    _synchronize(encoded.embeddings.device)
    embed_seconds = time.perf_counter() - start
    result = credit_encoded(encoded, rewards, group_ids, config, valid, expected_group_size, return_embeddings, seed)
    result.timings["embed"] = embed_seconds
    result.timings["total"] = time.perf_counter() - start
    return result


def credit_encoded(
    encoded: Encoded,
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    config: CreditConfig = CreditConfig(),
    valid: Optional[Sequence[bool]] = None,
    expected_group_size: Optional[int] = None,
    return_embeddings: bool = False,
    seed: Optional[int] = None,
) -> RolloutCredit:
    """Credit a batch whose valid rows are already embedded (e.g. by several encoders, one per shard).

    Args:
        encoded: `(Encoded)` the embeddings of the rows to credit (``valid``), in row order, on the device the
            credit is computed on.
        rewards, group_ids, valid, expected_group_size, return_embeddings, seed: as in :func:`credit_rollouts`,
            length N.
    Returns:
        :class:`RolloutCredit`; ``timings`` holds ``shapley`` (kernel, credit, advantages) and ``total``.
    """
    start = time.perf_counter()
    if seed is not None:
        config = dataclasses.replace(config, seed=int(seed))
    n = len(rewards)
    rows, incomplete = rows_to_credit(n, group_ids, valid, expected_group_size)
    if len(encoded.embeddings) != len(rows):
        raise ValueError(f"{len(encoded.embeddings)} embeddings for {len(rows)} rows to credit")
    credit = compute_credit(
        torch.as_tensor(np.asarray([rewards[i] for i in rows], dtype=np.float64)),
        encoded.embeddings,
        [group_ids[i] for i in rows],
        config,
        contributes=~encoded.empty.to(encoded.embeddings.device),
    )
    columns = {name: getattr(credit, name).cpu().numpy() for name in PER_ROLLOUT_FIELDS}

    result = RolloutCredit(**{name: np.zeros(n, dtype=np.float64) for name in PER_ROLLOUT_FIELDS})
    for name, values in columns.items():
        getattr(result, name)[rows] = values
    if return_embeddings:
        result.embeddings = np.zeros((n, encoded.embeddings.shape[1]), dtype=np.float32)
        result.embeddings[rows] = encoded.embeddings.cpu().numpy()
    result.metrics = {
        **credit.metrics(),
        **encoded.stats.summary(),
        "gcpo/incomplete_groups": float(incomplete),
        "gcpo/excluded_rows": float(n - len(rows)),
    }
    seconds = time.perf_counter() - start
    result.timings = {"shapley": seconds, "total": seconds}
    return result


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
