"""DIVER (arXiv 2509.26209) in verl 0.9.1: ``algorithm.adv_estimator=diver``.

Each step the GCPO trainer decodes the batch's responses and adds DIVER's shaping term (``gcpo_core/baselines/diver.py``:
lambda_t x the clipped diversity of a correct response within its group) to each response's reward; the ``diver``
estimator -- the same function as ``gcpo``'s -- then normalises the shaped reward per prompt exactly as verl's
GRPO normalises rewards (DIVER's ``compute_grpo_rs_outcome_advantage``). KL-in-reward, rollout correction and
the write-back are verl's, unchanged. The diversity needs the response texts, hence the recipe's trainer; it
runs on the driver (no GPU, no encoder): ``scripts/bench_diver.py`` times it.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
import transfer_queue as tq
from omegaconf import DictConfig
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.core_algos import register_adv_est

from gcpo_core.baselines.diver import DiverConfig, diver_bonus
from gcpo_core.credit.config import CreditConfig
from recipe.gcpo.config import (
    DIVER_ESTIMATOR,
    algorithm_block,
    build_section,
    check_rollout_groups,
    credit_config,
)
from recipe.gcpo.estimator import StepCredit, compute_gcpo_outcome_advantage

register_adv_est(DIVER_ESTIMATOR)(compute_gcpo_outcome_advantage)


def diver_settings(config: DictConfig) -> Optional[DiverConfig]:
    """``algorithm.diver`` (always parsed, so a typo fails even when DIVER is not selected) when
    ``algorithm.adv_estimator=diver``, else None."""
    settings = build_section(DiverConfig, algorithm_block(config.algorithm, "diver"), "algorithm.diver")
    return settings if config.algorithm.adv_estimator == DIVER_ESTIMATOR else None


def diver_normalisation(algorithm: DictConfig) -> CreditConfig:
    """How the ``diver`` estimator normalises the shaped reward: as GRPO normalises a reward, every group by its own
    std (``all_correct_scale=group``), with ``algorithm.gcpo.credit``'s epsilon and floor and verl's
    ``norm_adv_by_std_in_grpo``."""
    gcpo = algorithm_block(algorithm, "gcpo") or {}
    return dataclasses.replace(credit_config(algorithm, gcpo.get("credit"), {}), all_correct_scale="group")


def check_diver(config: DictConfig) -> None:
    """Start-up check of DIVER (``algorithm.adv_estimator=diver``): its bonus compares the rollouts of a prompt.

    Raises:
        ConfigError: fewer than two rollouts a prompt, or a multi-turn agent loop.
    """
    check_rollout_groups(config, DIVER_ESTIMATOR)


def diver_credit(
    batch: KVBatchMeta, texts: Sequence[str], settings: DiverConfig, normalisation: CreditConfig, step: int
) -> tuple[StepCredit, dict[str, float]]:
    """The step's shaped rewards for the ``diver`` estimator.

    Args:
        batch: the balanced batch (its rows' ``uid``, ``rm_scores`` and ``response_mask`` are read from
            TransferQueue).
        texts: the decoded responses, row-aligned ("" at verl's padding rows).
        normalisation: :func:`diver_normalisation` of the run's ``algorithm`` config.
        step: verl's ``global_steps`` (lambda's schedule).
    Returns:
        (credit whose ``score`` is reward + bonus, ``diver/*`` metrics).
    """
    data = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "rm_scores", "response_mask"]
    )
    uids = np.array(list(data["uid"]), dtype=object)
    valid = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
    reward = data["rm_scores"].to_padded_tensor(padding=0.0).sum(dim=-1).double().cpu().numpy()
    lengths = data["response_mask"].to_padded_tensor(padding=0).sum(dim=-1).cpu().numpy()
    result = diver_bonus(
        list(texts), reward, uids.tolist(), step=step, config=settings, response_lengths=lengths, valid=valid
    )
    credit = StepCredit(uids=uids, reward=reward, score=reward + result.bonus, valid=valid, config=normalisation)
    return credit, result.metrics
