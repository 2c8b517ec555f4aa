"""DIVER (arXiv 2509.26209) in verl 0.9.1: ``algorithm.adv_estimator=diver``.

Each step the GCPO trainer decodes the batch's responses and adds DIVER's shaping term (``gcpo_core/baselines/diver.py``:
lambda_t x the clipped diversity of a correct response within its group) to each response's reward; the ``diver``
estimator -- the same function as ``gcpo``'s -- then normalises the shaped reward per prompt exactly as verl's
GRPO normalises rewards (DIVER's ``compute_grpo_rs_outcome_advantage``). KL-in-reward, rollout correction and
the write-back are verl's, unchanged. The diversity needs the response texts, hence the recipe's trainer; it
runs on the driver (no GPU, no encoder): ``scripts/bench_diver.py`` times it.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.core_algos import register_adv_est

from gcpo_core.baselines.diver import DiverConfig, diver_bonus
from recipe.gcpo.estimator import StepCredit, compute_gcpo_outcome_advantage
from recipe.gcpo.settings import SYNC_TRAINER_MODE, _build, _plain, needs_gcpo_trainer

DIVER_ESTIMATOR = "diver"

register_adv_est(DIVER_ESTIMATOR)(compute_gcpo_outcome_advantage)


def validate_diver_config(config: DictConfig) -> Optional[DiverConfig]:
    """Start-up checks of ``algorithm.diver`` (always parsed, so a typo fails even when DIVER is not selected);
    the settings when ``algorithm.adv_estimator=diver``, else None.

    Raises:
        ValueError: a bad ``algorithm.diver`` value, ``diver`` without the GCPO trainer, fewer than two rollouts
            per prompt, or a multi-turn agent loop.
    """
    settings = _build(DiverConfig, _plain(config.algorithm.get("diver")), "algorithm.diver")
    if config.algorithm.adv_estimator != DIVER_ESTIMATOR:
        return None
    mode = OmegaConf.select(config, "trainer.v1.trainer_mode")
    if not config.trainer.get("use_v1", True) or mode != SYNC_TRAINER_MODE:
        raise ValueError(needs_gcpo_trainer(
            f"trainer.use_v1={config.trainer.get('use_v1')}, trainer.v1.trainer_mode={mode}", DIVER_ESTIMATOR))
    n = config.actor_rollout_ref.rollout.n
    if n < 2:
        raise ValueError(f"diver compares the rollouts of a prompt: actor_rollout_ref.rollout.n must be >= 2, got {n}")
    if OmegaConf.select(config, "actor_rollout_ref.rollout.multi_turn.enable"):
        raise ValueError("algorithm.adv_estimator=diver scores one output per rollout; multi-turn agent loops are not "
                         "supported")
    return settings


def diver_credit(batch: KVBatchMeta, texts: Sequence[str], settings: DiverConfig, step: int
                 ) -> tuple[StepCredit, dict[str, float]]:
    """The step's shaped rewards for the ``diver`` estimator.

    Args:
        batch: the balanced batch (its rows' ``uid``, ``rm_scores`` and ``response_mask`` are read from
            TransferQueue).
        texts: the decoded responses, row-aligned ("" at verl's padding rows).
        step: verl's ``global_steps`` (lambda's schedule).
    Returns:
        (credit whose ``score`` is reward + bonus, ``diver/*`` metrics).
    """
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                           select_fields=["uid", "rm_scores", "response_mask"])
    uids = np.array(list(data["uid"]), dtype=object)
    valid = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
    reward = data["rm_scores"].to_padded_tensor(padding=0.0).sum(dim=-1).double().cpu().numpy()
    lengths = data["response_mask"].to_padded_tensor(padding=0).sum(dim=-1).cpu().numpy()
    result = diver_bonus(list(texts), reward, uids.tolist(), step=step, config=settings,
                         response_lengths=lengths, valid=valid)
    # DIVER normalises its shaped reward as GRPO does: every group by its own std
    credit = StepCredit(uids=uids, reward=reward, score=reward + result.bonus, valid=valid, all_correct_scale="group")
    return credit, result.metrics
