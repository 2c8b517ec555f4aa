"""The recipe's baselines in verl, one module each: each registers its :class:`~recipe.gcpo.settings.Baseline` (its
block, its checks and its hooks in the trainer) as it is imported, and this package imports them all, so that
importing it registers every baseline (docs/training.md#adding-a-baseline). Neither the driver nor the trainer names
a baseline; each iterates the registry. Below: a batch's rows as the trainer and the baselines read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import transfer_queue as tq
from transfer_queue import KVBatchMeta

# ---- a batch's rows as the trainer and the baselines read them from TransferQueue


def valid_rows(batch: KVBatchMeta) -> np.ndarray:
    """bool (N,): False at verl's padding rows."""
    return np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)


@dataclass(frozen=True)
class BatchRows:
    """A batch's rows: ``uids`` object (N,), each row's prompt id; ``scores`` float64 (N,), the row sums of
    ``rm_scores`` (the verifier reward); ``valid`` bool (N,), False at verl's padding rows; ``fields``: the
    TransferQueue fields read (``uid``, ``rm_scores`` and those asked for)."""

    uids: np.ndarray
    scores: np.ndarray
    valid: np.ndarray
    fields: Any


def read_rows(batch: KVBatchMeta, *fields: str) -> BatchRows:
    """The batch's prompt ids, rewards and padding flags, and ``fields`` besides, in one TransferQueue read."""
    data = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "rm_scores", *fields]
    )
    return BatchRows(
        uids=np.array(list(data["uid"]), dtype=object),  # a LinkedList, NonTensorStack or array by backend
        scores=data["rm_scores"].to_padded_tensor(padding=0.0).sum(dim=-1).double().cpu().numpy(),
        valid=valid_rows(batch),
        fields=data,
    )


# every baseline, registered in this order (they import the helpers above)
from recipe.gcpo.baselines import diver, div_r1, copo, mc_grpo, group_contrastive  # noqa: E402, F401, I001
