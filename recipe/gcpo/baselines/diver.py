"""DIVER (arXiv 2509.26209) in verl 0.9.1: ``algorithm.adv_estimator=diver``.

Each step the GCPO trainer decodes the batch's responses and adds DIVER's shaping term (``gcpo_core/baselines/diver.py``:
lambda_t x the clipped diversity of a correct response within its group) to each response's reward; the ``diver``
estimator -- the same function as ``gcpo``'s -- then normalises the shaped reward per prompt exactly as verl's
GRPO normalises rewards (DIVER's ``compute_grpo_rs_outcome_advantage``). KL-in-reward, rollout correction and
the write-back are verl's, unchanged. The diversity needs the response texts, hence the recipe's trainer; it
runs on the driver (no GPU, no encoder): ``dev/bench_diver.py`` times it.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from transfer_queue import KVBatchMeta
from verl.trainer.ppo.core_algos import register_adv_est

from gcpo_core.baselines.diver import DiverConfig, diver_bonus
from gcpo_core.credit.config import CreditConfig
from recipe.gcpo.baselines import read_rows
from recipe.gcpo.estimator import StepCredit, compute_gcpo_outcome_advantage, provide_credit
from recipe.gcpo.settings import Baseline, check_rollout_groups, estimator_need, register

DIVER_ESTIMATOR = "diver"
register_adv_est(DIVER_ESTIMATOR)(compute_gcpo_outcome_advantage)


def diver_normalisation(credit: CreditConfig) -> CreditConfig:
    """How the ``diver`` estimator normalises the shaped reward: as GRPO normalises a reward, every group by its own
    std (``all_correct_scale=group``), with ``algorithm.gcpo.credit``'s epsilon and floor (``credit``, as the
    recipe's settings parsed it) and verl's ``norm_adv_by_std_in_grpo``. The score is normalised once, as given
    (``advantage=shapley``): a ``credit.advantage=blend`` of the run would otherwise weigh DIVER's shaped reward
    against GRPO's in the estimator."""
    return dataclasses.replace(credit, all_correct_scale="group", advantage="shapley")


def diver_credit(
    batch: KVBatchMeta, texts: Sequence[str], settings: DiverConfig, normalisation: CreditConfig, step: int
) -> tuple[StepCredit, dict[str, float]]:
    """The step's shaped rewards for the ``diver`` estimator.

    Args:
        batch: the balanced batch (its rows' ``uid``, ``rm_scores`` and ``response_mask`` are read from
            TransferQueue).
        texts: the decoded responses, row-aligned ("" at verl's padding rows).
        normalisation: :func:`diver_normalisation` of the run's credit settings.
        step: verl's ``global_steps`` (lambda's schedule).
    Returns:
        (credit whose ``score`` is reward + bonus, ``diver/*`` metrics).
    """
    rows = read_rows(batch, "response_mask")
    lengths = rows.fields["response_mask"].to_padded_tensor(padding=0).sum(dim=-1).cpu().numpy()
    result = diver_bonus(
        list(texts),
        rows.scores,
        rows.uids.tolist(),
        step=step,
        config=settings,
        response_lengths=lengths,
        valid=rows.valid,
    )
    credit = StepCredit(
        uids=rows.uids, reward=rows.scores, score=rows.scores + result.bonus, valid=rows.valid, config=normalisation
    )
    return credit, result.metrics


def diver_advantage(trainer, settings: DiverConfig, batch: KVBatchMeta, metrics: dict, verl_step) -> KVBatchMeta:
    """The trainer's advantage step under DIVER: the shaped rewards, then verl's step with the ``diver`` estimator."""
    normalisation = diver_normalisation(trainer.settings.credit)
    step = int(getattr(trainer, "global_steps", 0))
    credit, diver_metrics = diver_credit(batch, trainer._decode_responses(batch), settings, normalisation, step)
    metrics.update(diver_metrics)
    with provide_credit(credit):
        return verl_step()


BASELINE = register(
    Baseline(
        "diver",
        DiverConfig,
        estimator=DIVER_ESTIMATOR,
        needs_trainer=lambda settings: estimator_need(DIVER_ESTIMATOR),
        # its bonus compares the rollouts of a prompt
        check=lambda config, settings, recipe: check_rollout_groups(config, DIVER_ESTIMATOR),
        advantage=diver_advantage,
    )
)
