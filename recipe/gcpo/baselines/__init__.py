"""The recipe's baselines in verl, one module each, and the one interface through which each reaches the driver's
start-up checks and the GCPO trainer: :class:`Baseline`, registered in :data:`BASELINES` (one line each, in
:mod:`recipe.gcpo.settings`; docs/training.md#adding-a-baseline). Neither the driver nor the trainer names a
baseline; each iterates the registry."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import numpy as np
import transfer_queue as tq
from transfer_queue import KVBatchMeta

from recipe.gcpo.config import Check, Facts, TrainerNeed, algorithm_block, build_section


@dataclass(frozen=True)
class Baseline:
    """A baseline: its block ``algorithm.<name>`` and what it adds to the driver and the trainer.

    Attributes:
        name: the block's name; the block is parsed into ``settings``, a frozen dataclass that validates itself
            (:func:`recipe.gcpo.config.build_section`), under every estimator, so a typo fails in any run.
        settings: that dataclass (its defaults are the only ones in code; the YAML writes them out for readers).
        estimator: the ``algorithm.adv_estimator`` that selects it (its module registers that estimator with
            verl's ``register_adv_est``); None: selected by the block's ``enable``.
        needs_trainer: ``(settings) -> TrainerNeed | None``: the setting only the GCPO trainer serves.
        checks: its start-up checks when selected (:class:`~recipe.gcpo.config.Check` entries reading the facts of
            :data:`recipe.gcpo.preflight.recipe_blocks.FACTS`, and its own).
        facts: readers of the facts only its own code computes, each named ``<name>_...``.
        loss_fn: ``(config, settings) -> loss | None``: the actor workers' loss (verl's ``set_loss_fn``).
        before_balance: ``(trainer, settings, batch, metrics) -> batch``: before verl balances the batch and
            computes the old log-probabilities.
        advantage: ``(trainer, settings, batch, metrics, verl_step) -> batch``: the advantage step, around
            ``verl_step()``, verl's own; only a baseline selected by its estimator has one (one per run).
    """

    name: str
    settings: type
    estimator: Optional[str] = None
    needs_trainer: Callable[[Any], Optional[TrainerNeed]] = lambda settings: None
    checks: tuple[Check, ...] = ()
    facts: Mapping[str, Callable[[Facts], Any]] = field(default_factory=dict)
    loss_fn: Optional[Callable[[Any, Any], Optional[Callable]]] = None
    before_balance: Optional[Callable[..., KVBatchMeta]] = None
    advantage: Optional[Callable[..., KVBatchMeta]] = None

    @property
    def block(self) -> str:
        return f"algorithm.{self.name}"

    def parse(self, algorithm: Any) -> Any:
        """Parse ``algorithm.<name>`` (absent, or no ``algorithm`` at all: the defaults)."""
        settings = build_section(self.settings, algorithm_block(algorithm, self.name), self.block)
        if algorithm is not None:
            try:  # remembered for the estimator's per-step look-up (block_settings), for as long as the node lives
                ref = weakref.ref(algorithm, lambda _, key=(id(algorithm), self.name): _parsed.pop(key, None))
            except TypeError:  # a plain dict: nothing to remember it by
                return settings
            _parsed[(id(algorithm), self.name)] = (ref, settings)
        return settings

    def selected(self, estimator: str, settings: Any) -> bool:
        """Whether a run with ``algorithm.adv_estimator=estimator`` and these settings uses the baseline."""
        return estimator == self.estimator if self.estimator is not None else bool(settings.enable)


BASELINES: dict[str, Baseline] = {}
BASELINE_FACTS: dict[str, Callable[[Facts], Any]] = {}  # every registered baseline's facts (recipe_blocks.FACTS)
_parsed: dict[tuple[int, str], tuple[weakref.ref, Any]] = {}


def register(baseline: Baseline) -> Baseline:
    """Add ``baseline`` to :data:`BASELINES` (its name once) and its facts to :data:`BASELINE_FACTS`."""
    if baseline.name in BASELINES:
        raise ValueError(f"a baseline named {baseline.name!r} is registered already")
    if baseline.advantage is not None and baseline.estimator is None:
        raise ValueError(f"baseline {baseline.name!r}: an advantage step needs the estimator that selects it")
    unprefixed = sorted(name for name in baseline.facts if not name.startswith(f"{baseline.name}_"))
    if unprefixed:  # the facts of every baseline and of the recipe share one namespace
        raise ValueError(f"baseline {baseline.name!r}: facts {unprefixed} are not named {baseline.name}_...")
    BASELINES[baseline.name] = baseline
    BASELINE_FACTS.update(baseline.facts)
    return baseline


def block_settings(baseline: Baseline, algorithm: Any) -> Any:
    """``baseline``'s settings for this ``algorithm`` config, as :meth:`Baseline.parse` parsed them for it (in a
    run, once, as the trainer was built); parsed here for a config nothing parsed yet. verl hands a registered
    estimator the same ``algorithm`` node every step, and nothing changes it after start-up."""
    hit = _parsed.get((id(algorithm), baseline.name))
    if hit is not None and hit[0]() is algorithm:
        return hit[1]
    return baseline.parse(algorithm)


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
