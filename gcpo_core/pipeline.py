"""Texts + rewards + group ids -> embeddings -> Shapley credit -> advantages, with timings and diagnostics.

The one call the credit actor, ``gcpo credit`` on text and ``gcpo demo`` share. Rows marked invalid (verl's
padding rows) are left out of every group and get zeros.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Optional, Sequence

import numpy as np
import torch

from gcpo_core.config import CreditConfig
from gcpo_core.credit import compute_credit
from gcpo_core.encoder import RolloutEncoder

PER_ROLLOUT_FIELDS = ("quality", "shapley", "shapley_stderr", "score", "advantage")


@dataclass
class RolloutCredit:
    """Per-rollout results as float64 numpy arrays of length N (0 at invalid rows), plus batch metrics.

    Attributes:
        metrics: ``gcpo/*`` diagnostics and ``gcpo/encoder/*`` statistics.
        timings: seconds spent in ``embed``, ``shapley`` (kernel, credit, advantages) and ``total``.
        embeddings: float32 (N, d) when asked for, else None.
    """

    quality: np.ndarray
    shapley: np.ndarray
    shapley_stderr: np.ndarray
    score: np.ndarray
    advantage: np.ndarray
    metrics: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    embeddings: Optional[np.ndarray] = None


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
    if seed is not None:
        config = dataclasses.replace(config, seed=int(seed))
    n = len(texts)
    if len(rewards) != n or len(group_ids) != n or (valid is not None and len(valid) != n):
        raise ValueError(f"texts, rewards, group ids and valid flags must have one entry per rollout (N={n})")
    keep = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    rows = np.flatnonzero(keep)
    kept_groups = [group_ids[i] for i in rows]
    sizes = Counter(kept_groups)
    incomplete = 0
    if expected_group_size is not None:
        oversized = {g: s for g, s in sizes.items() if s > expected_group_size}
        if oversized:
            example = next(iter(oversized.items()))
            raise ValueError(
                f"{len(oversized)} group(s) have more than {expected_group_size} rollouts (e.g. {example[0]!r}: "
                f"{example[1]}); rollouts must be grouped by their prompt's uid"
            )
        incomplete = sum(s < expected_group_size for s in sizes.values())

    encoded = encoder.encode([texts[i] for i in rows])
    _synchronize(encoded.embeddings.device)
    embedded = time.perf_counter()
    credit = compute_credit(
        torch.as_tensor(np.asarray([rewards[i] for i in rows], dtype=np.float64)),
        encoded.embeddings,
        kept_groups,
        config,
        contributes=~encoded.empty.to(encoded.embeddings.device),
    )
    columns = {name: getattr(credit, name).cpu().numpy() for name in PER_ROLLOUT_FIELDS}
    credited = time.perf_counter()

    result = RolloutCredit(**{name: np.zeros(n, dtype=np.float64) for name in PER_ROLLOUT_FIELDS})
    for name, values in columns.items():
        getattr(result, name)[rows] = values
    if return_embeddings:
        result.embeddings = np.zeros((n, encoder.dimension), dtype=np.float32)
        result.embeddings[rows] = encoded.embeddings.cpu().numpy()
    result.metrics = {
        **credit.metrics(),
        **encoded.stats.summary(),
        "gcpo/incomplete_groups": float(incomplete),
        "gcpo/excluded_rows": float(n - len(rows)),
    }
    result.timings = {"embed": embedded - start, "shapley": credited - embedded, "total": time.perf_counter() - start}
    return result


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
