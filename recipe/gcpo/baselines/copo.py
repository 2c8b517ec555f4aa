"""COPO (arXiv 2508.04138) as its official code trains: a local and a global PPO loss blended per response by the
group's answer entropy (the formula: ``gcpo_core/baselines/copo.py``).

``algorithm.adv_estimator=copo`` with ``algorithm.copo.blend=loss`` (the default):

* the trainer reads each row's verdict and final answer from the reward's ``reward_extra_info`` (``acc``,
  ``pred``: what the recipe's reward and verl's DAPO reward report), computes COPO's terms for the whole batch and
  hands them to the ``copo`` estimator, which returns ``w * A_local`` as verl's ``advantages``; the trainer then
  writes ``(1 - w) * A_global`` to TransferQueue as ``copo_global_advantages``;
* the actor's loss (given with verl's ``set_loss_fn``, as Div-R1's) is verl's ``ppo_loss`` on ``advantages``
  (entropy bonus and KL loss included, once) plus verl's policy loss on ``copo_global_advantages``: by the
  positive homogeneity of PPO-clip and the linearity of verl's aggregations, exactly the official per-token blend
  ``w L(A_local) + (1 - w) L(A_global)`` aggregated once.

``algorithm.copo.blend=advantage`` keeps the earlier reading, an advantage blend by the right/wrong entropy
(``gcpo_core.baselines.copo.copo_advantages``), which runs under any trainer: it needs only the rewards.

Both readings are the ``copo`` estimator registered here (:func:`compute_copo_outcome_advantage`).
"""

from __future__ import annotations

import copy
import functools
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.core_algos import register_adv_est
from verl.workers.utils.padding import response_to_nested

from gcpo_core.baselines.copo import COPO_GATES, copo_advantages, copo_terms
from gcpo_core.credit.config import TRUE_FALSE, check_fields, number, one_of
from gcpo_core.credit.grouping import layout_groups
from recipe.gcpo.baselines import read_rows
from recipe.gcpo.estimator import grouped_outcome_advantage
from recipe.gcpo.settings import (
    Baseline,
    TrainerNeed,
    block_settings,
    check_actor_loss,
    check_rollout_groups,
    register,
)
from verl_preflight import ConfigError

COPO_ESTIMATOR = "copo"
BLENDS = ("loss", "advantage")
GLOBAL_ADVANTAGE_FIELD = "copo_global_advantages"
_active = threading.local()


@dataclass(frozen=True)
class CopoSettings:
    """``algorithm.copo.*``.

    Attributes:
        blend: ``loss`` (the official code's loss-level blend) or ``advantage`` (the earlier advantage blend).
        gate: how the local weight is gated (:data:`gcpo_core.baselines.copo.COPO_GATES`); the released ``run_copo.sh``:
            ``soft_with_zero``.
        k, b: the gate ``sigmoid(k (H - b))``; the released script: k = 5, b = 1 (older scripts: 20 and 1.5).
        reward_coef: scale the global score by ``1 - lambda H`` (the official ``reward_coef_flg``; released: false).
    """

    blend: str = "loss"
    gate: str = "soft_with_zero"
    k: float = 5.0
    b: float = 1.0
    reward_coef: bool = False

    def __post_init__(self) -> None:
        check_fields(
            self, "copo", blend=one_of(BLENDS), gate=one_of(COPO_GATES), k=number(0), b=number(), reward_coef=TRUE_FALSE
        )


def check_copo(config: DictConfig, settings: CopoSettings, recipe: Any) -> None:
    """It compares a prompt's rollouts; the loss blend replaces the actor's loss, and relies on PPO-clip's
    homogeneity."""
    check_rollout_groups(config, COPO_ESTIMATOR)
    if settings.blend != "loss":
        return
    check_actor_loss(config, "algorithm.copo.blend=loss", "COPO's blended loss")
    loss_mode = OmegaConf.select(config, "actor_rollout_ref.actor.policy_loss.loss_mode", default="vanilla")
    if loss_mode != "vanilla":
        raise ConfigError(
            "actor_rollout_ref.actor.policy_loss.loss_mode",
            f"{loss_mode} is not supported with algorithm.copo.blend=loss, which blends two PPO-clip losses (verl's "
            "'vanilla' policy loss)",
        )
    if recipe.blocks["div_r1"].enable:
        raise ConfigError(
            "algorithm.div_r1.enable",
            "true and algorithm.copo.blend=loss each replace the actor's loss: use one or the other",
        )


@register_adv_est(COPO_ESTIMATOR)
def compute_copo_outcome_advantage(token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6, **kwargs):
    """COPO. ``algorithm.copo.blend=loss`` (default): ``w * A_local`` from the terms the recipe's trainer provides
    (:func:`provide_copo`; the actor's loss adds the global term). ``blend=advantage``: GRPO's local advantage
    blended with the prompt's batch-standardised mean reward by the group's right/wrong entropy
    (:func:`gcpo_core.baselines.copo.copo_advantages`). Shapes: (bs, response_length)."""
    if config is not None and block_settings(BASELINE, config).blend == "loss":
        step = provided_copo(index)
        local = torch.as_tensor(step.local, dtype=token_level_rewards.dtype, device=token_level_rewards.device)
        out = local.unsqueeze(-1) * response_mask
        return out, out
    return grouped_outcome_advantage(copo_advantages, token_level_rewards, response_mask, index, config, epsilon)


@dataclass(frozen=True)
class StepCopo:
    """One step's COPO terms, row-aligned with the batch (0 at padding rows).

    Attributes:
        uids: `(np.ndarray)` object (N,). local: `(np.ndarray)` float64 (N,) ``w * A_local``.
        global_: `(np.ndarray)` float64 (N,) ``(1 - w) * A_global``. metrics: ``copo/*``.
    """

    uids: np.ndarray
    local: np.ndarray
    global_: np.ndarray
    metrics: dict


def step_copo(
    uids: Sequence[Any],
    scores: np.ndarray,
    extras: Sequence[Any],
    valid: np.ndarray,
    settings: CopoSettings,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> StepCopo:
    """COPO's terms of a batch from each row's score and its reward's ``acc`` and ``pred``.

    Args:
        uids: each row's prompt id. scores: float (N,) the rows' rewards (sum of ``rm_scores``).
        extras: each row's ``extra_fields`` (verl's V1 trainer keeps ``reward_extra_info`` there).
        valid: bool (N,), False at verl's padding rows.
    Raises:
        RuntimeError: a valid row whose reward reported no ``acc`` or no ``pred``.
    """
    rows = np.flatnonzero(valid)
    correct = np.zeros(len(scores), dtype=bool)
    answers: list[str] = [""] * len(scores)
    for row in rows:
        extra = extras[row]
        info = extra.get("reward_extra_info") if isinstance(extra, dict) else None
        if not isinstance(info, dict) or info.get("acc") is None or "pred" not in info:
            raise RuntimeError(
                "COPO's loss blend reads each response's verdict and final answer from the reward's "
                "'acc' and 'pred' (reward_extra_info), which a row lacks: use a reward that reports "
                "both (the recipe's does), or algorithm.copo.blend=advantage"
            )
        correct[row] = bool(info["acc"])
        answers[row] = "" if info["pred"] is None else str(info["pred"])
    _, codes = np.unique(np.array(answers, dtype=object).astype(str), return_inverse=True)
    layout = layout_groups([uids[i] for i in rows])
    terms = copo_terms(
        layout.gather(torch.as_tensor(np.asarray(scores, dtype=np.float64)[rows])),
        layout.gather(torch.as_tensor(correct[rows])).to(torch.bool),
        layout.gather(torch.as_tensor(codes[rows].astype(np.int64))),
        layout.mask,
        k=float(settings.k),
        b=float(settings.b),
        gate=settings.gate,
        reward_coef=settings.reward_coef,
        norm_by_std=norm_by_std,
        epsilon=epsilon,
    )
    local = np.zeros(len(scores))
    global_ = np.zeros(len(scores))
    weight = layout.scatter(terms.local_weight).numpy()
    local[rows] = weight * layout.scatter(terms.local_advantage).numpy()
    global_[rows] = (1 - weight) * layout.scatter(terms.global_advantage).numpy()
    entropy = layout.scatter(terms.answer_entropy).numpy()
    metrics = {
        "copo/answer_entropy/mean": float(entropy.mean()) if len(rows) else 0.0,
        "copo/local_weight/mean": float(weight.mean()) if len(rows) else 0.0,
        "copo/local_adv_abs": float(np.abs(local[rows]).mean()) if len(rows) else 0.0,
        "copo/global_adv_abs": float(np.abs(global_[rows]).mean()) if len(rows) else 0.0,
    }
    return StepCopo(uids=np.asarray(list(uids), dtype=object), local=local, global_=global_, metrics=metrics)


@contextmanager
def provide_copo(step: StepCopo) -> Iterator[None]:
    """Make ``step`` the input of the ``copo`` estimator within this block (this thread only)."""
    _active.step = step
    try:
        yield
    finally:
        _active.step = None


def provided_copo(index: Optional[np.ndarray]) -> StepCopo:
    """The terms the trainer provided, checked against the estimator's batch (same ids, same order)."""
    step = getattr(_active, "step", None)
    if step is None:
        raise RuntimeError(
            "algorithm.copo.blend=loss: the copo estimator got no COPO terms; it needs the recipe's "
            "trainer (`python -m recipe.gcpo.main_gcpo`), or algorithm.copo.blend=advantage"
        )
    if index is not None and list(np.asarray(index, dtype=object)) != list(step.uids):
        raise RuntimeError("COPO's terms were computed for another batch (group ids differ)")
    return step


def copo_loss(config, model_output: dict, data, dp_group=None, *, global_config) -> tuple[torch.Tensor, dict]:
    """verl's ``ppo_loss`` on ``advantages`` (``w A_local``) plus verl's PPO-clip loss on
    ``copo_global_advantages`` (``(1 - w) A_global``); ``global_config`` is the actor config without the entropy
    bonus and KL loss, which the first term already has. Metrics: verl's, and ``actor/copo_global_pg_loss``."""
    from verl.utils.metric import Metric
    from verl.workers.utils.losses import ppo_loss

    if GLOBAL_ADVANTAGE_FIELD not in data.keys():
        raise RuntimeError(
            f"COPO's loss needs '{GLOBAL_ADVANTAGE_FIELD}' in the actor's micro-batch, which the "
            "recipe's trainer writes at the advantage step; the batch has none"
        )
    loss, metrics = ppo_loss(config, model_output, data, dp_group)
    global_data = data.copy()
    global_data["advantages"] = data[GLOBAL_ADVANTAGE_FIELD]
    global_loss, global_metrics = ppo_loss(global_config, model_output, global_data, dp_group)
    metrics["actor/copo_global_pg_loss"] = Metric(
        value=global_loss.detach(), aggregation=global_metrics["actor/pg_loss"].aggregation
    )
    return loss + global_loss, metrics


def copo_loss_fn(config: DictConfig, settings: CopoSettings) -> Optional[Callable[..., Any]]:
    """The actor loss for ``actor_rollout_wg.set_loss_fn`` when ``copo`` trains with the loss blend, else None."""
    if settings.blend != "loss":
        return None
    from verl.utils.config import omega_conf_to_dataclass

    actor_config = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    global_config = copy.copy(actor_config)  # shares global_batch_info, which ppo_loss fills for both terms
    object.__setattr__(global_config, "entropy_coeff", 0.0)
    object.__setattr__(global_config, "use_kl_loss", False)
    return functools.partial(copo_loss, config=actor_config, global_config=global_config)


def copo_advantage(trainer, settings: CopoSettings, batch: KVBatchMeta, metrics: dict, verl_step) -> KVBatchMeta:
    """The trainer's advantage step under COPO's loss blend: the local term becomes verl's ``advantages`` (through
    the ``copo`` estimator), the global term is written beside it for the actor's loss. The advantage blend is
    verl's step as it is."""
    if settings.blend != "loss":
        return verl_step()
    rows = read_rows(batch, "response_mask", "extra_fields")
    extras = rows.fields["extra_fields"]
    step = step_copo(
        list(rows.uids),
        rows.scores,
        extras.tolist() if hasattr(extras, "tolist") else list(extras),
        rows.valid,
        settings,
        norm_by_std=trainer.settings.credit.norm_by_std,  # verl's norm_adv_by_std_in_grpo, parsed once
    )
    metrics.update(step.metrics)
    with provide_copo(step):
        batch = verl_step()
    response_mask = rows.fields["response_mask"]
    padded = response_mask.to_padded_tensor(padding=0)
    global_adv = torch.as_tensor(step.global_, dtype=torch.float32).unsqueeze(-1) * padded.to(torch.float32)
    output = TensorDict({GLOBAL_ADVANTAGE_FIELD: response_to_nested(global_adv, response_mask)}, batch_size=len(batch))
    return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)


BASELINE = register(
    Baseline(
        "copo",
        CopoSettings,
        estimator=COPO_ESTIMATOR,
        needs_trainer=lambda settings: (
            TrainerNeed(
                "algorithm.copo.blend=loss",
                "gives the actor workers COPO's blended loss",
                "; or use algorithm.copo.blend=advantage, which any trainer runs",
            )
            if settings.blend == "loss"
            else None
        ),
        check=check_copo,
        loss_fn=copo_loss_fn,
        advantage=copo_advantage,
    )
)
