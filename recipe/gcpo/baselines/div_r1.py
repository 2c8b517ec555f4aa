"""Div-R1 in verl 0.9.1's actor loss: GRPO's loss plus lambda x the token entropy of the correct responses
(arXiv 2505.23433, our reading of the GCPO paper's "Div-R1"; the formula is in ``gcpo_core/baselines/div_r1.py``).

Enabled by ``algorithm.div_r1.enable=true`` (with any estimator; the launcher pairs it with ``grpo``).

Where the term goes, and why not a registered policy loss. verl's actor loss is
``verl.workers.utils.losses.ppo_loss(config, model_output, data)``: it calls the policy loss registered under
``actor.policy_loss.loss_mode`` (``register_policy_loss``) with ``old_log_prob, log_prob, advantages,
response_mask, loss_agg_mode, config, rollout_is_weights`` only -- no reward -- and then subtracts
``actor.entropy_coeff`` x the entropy of *every* response. Neither can single out the correct responses, and the
sign of the advantage cannot stand in for correctness (an all-correct group has advantage 0; a length penalty
makes correct responses negative). The micro-batch ``data`` that ``ppo_loss`` receives, however, carries every
TransferQueue field of its rows, ``rm_scores`` (the verifier reward) included. So the Div-R1 loss below is verl's
``ppo_loss`` unchanged (any registered policy loss, KL loss and entropy bonus) minus lambda x the Div-R1 term
computed from that micro-batch; the recipe's trainer gives it to the actor workers right after they are built
with verl's own ``set_loss_fn`` worker call (the one verl's trainer uses to give the critic its loss).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from omegaconf import DictConfig

from gcpo_core.baselines.div_r1 import SAMPLE_SETS, diversity_rows, sampled_token_entropy
from gcpo_core.credit.config import TRUE_FALSE, check_fields, number, one_of
from recipe.gcpo.settings import Baseline, TrainerNeed, check_actor_loss, register
from verl_preflight import ConfigError

ENTROPY_ESTIMATES = ("sampled", "exact")
# verl's agg_loss modes (verl/trainer/ppo/core_algos.py)
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean")


@dataclass(frozen=True)
class DivR1Settings:
    """``algorithm.div_r1.*``.

    Attributes:
        enable: add the Div-R1 term to the actor loss.
        coef: lambda (the paper: 0.01, §4.2; its ablation found lambda <= 0.02 helps, §5.3).
        samples: ``correct`` (1(r = 1) on the verifier's verdict, the reward's ``acc``: the paper),
            ``positive_score`` (the shaped score > 0: under an overlong penalty a correct answer can fall to <= 0 and
            lose the term) or ``all`` (its "pos+neg" ablation).
        entropy: ``sampled`` (the paper's Eq. 8: ``-(pi/pi_old) log pi`` of the sampled token) or ``exact`` (the
            full-vocabulary entropy verl's actor computes from the logits; needs
            ``actor_rollout_ref.actor.calculate_entropy=true``).
        loss_agg_mode: how token terms become one number, any of verl's ``agg_loss`` modes; the paper's
            ``1/G sum_i 1/T_i sum_t`` is ``seq-mean-token-mean``. Normalised over the whole mini-batch (wrong
            responses count in the denominator with a zero term: the expectation of ``1(r = 1) * ...``).
    """

    enable: bool = False
    coef: float = 0.01
    samples: str = "correct"
    entropy: str = "sampled"
    loss_agg_mode: str = "seq-mean-token-mean"

    def __post_init__(self) -> None:
        check_fields(
            self,
            "div_r1",
            enable=TRUE_FALSE,
            coef=number(0),
            samples=one_of(SAMPLE_SETS),
            entropy=one_of(ENTROPY_ESTIMATES),
            loss_agg_mode=one_of(LOSS_AGG_MODES),
        )


def check_div_r1(config: DictConfig, settings: DivR1Settings, recipe: Any) -> None:
    check_actor_loss(config, "algorithm.div_r1.enable=true", "the Div-R1 loss")
    actor = config.actor_rollout_ref.actor
    # verl's actor computes the token entropies only when asked, or for its entropy bonus
    if settings.entropy == "exact" and not (actor.get("calculate_entropy", False) or actor.get("entropy_coeff", 0)):
        raise ConfigError(
            "algorithm.div_r1.entropy",
            "exact uses the entropies verl's actor computes only when asked: set "
            "actor_rollout_ref.actor.calculate_entropy=true (or use entropy=sampled, the paper's estimate)",
        )


def div_r1_term(
    model_output: dict, data, settings: DivR1Settings, global_batch_info: dict
) -> tuple[torch.Tensor, float]:
    """The Div-R1 objective of one micro-batch (to be *maximised*), and the share of its responses it covers.

    Args:
        model_output: the actor's forward output (``log_probs``, ``entropy`` when computed; no-padding layout).
        data: the micro-batch TensorDict ``ppo_loss`` receives (``response_mask``, ``old_log_probs``,
            ``rm_scores``, ``prompts``, ``responses``).
        global_batch_info: verl's mini-batch normalisers (``dp_size``, ``batch_num_tokens``,
            ``global_batch_size``, ``loss_scale_factor``), as ``ppo_loss`` set them.
    Returns:
        (term: scalar tensor with grad, share: float).
    """
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.workers.utils.padding import no_padding_2_padding

    if "rm_scores" not in data.keys():
        raise RuntimeError(
            "Div-R1 reads each response's reward from the actor's micro-batch (rm_scores), but the "
            "batch has none: it needs verl's V1 trainer, which keeps every TransferQueue field"
        )
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    fields = data.select("response_mask", "old_log_probs", "rm_scores").to_padded_tensor()
    mask = fields["response_mask"].to(torch.bool)
    rewards = fields["rm_scores"].sum(dim=-1).to(log_prob.device)
    correct = correctness(data).to(log_prob.device) if settings.samples == "correct" else None
    rows = diversity_rows(rewards, settings.samples, correct)
    if settings.entropy == "sampled":
        per_token = sampled_token_entropy(log_prob, fields["old_log_probs"].to(log_prob.dtype))
    else:
        entropy = model_output.get("entropy")
        if entropy is None:
            raise RuntimeError(
                "algorithm.div_r1.entropy=exact but the actor returned no entropy "
                "(set actor_rollout_ref.actor.calculate_entropy=true)"
            )
        per_token = no_padding_2_padding(entropy, data)
    info = dict(global_batch_info)
    # without verl's global normalisers (one rank, one micro-batch) normalise by this micro-batch's responses and
    # tokens, never by the selected ones only: the objective is the mean of 1(r = 1) * ..., not a mean over r = 1
    if info.get("global_batch_size") is None:
        info["global_batch_size"] = int((mask.sum(dim=-1) > 0).sum())
    if info.get("batch_num_tokens") is None:
        info["batch_num_tokens"] = int(mask.sum())
    term = agg_loss(
        loss_mat=per_token, loss_mask=mask & rows.unsqueeze(-1), loss_agg_mode=settings.loss_agg_mode, **info
    )
    covered = mask.any(dim=-1)
    share = float((rows & covered).sum()) / max(1, int(covered.sum()))
    return term, share


CORRECTNESS_KEY = "acc"  # what verl's reward managers and the recipe's reward report as the verdict


def correctness(data) -> torch.Tensor:
    """Each response's verdict, bool (bs,), from the reward's ``acc`` in the rows' ``extra_fields`` (verl writes
    each row's ``reward_extra_info`` there, and the actor's micro-batch carries every TransferQueue field).

    Raises:
        RuntimeError: a row has no verdict (a reward function that reports only a score).
    """
    extras = data["extra_fields"] if "extra_fields" in data.keys() else None
    if extras is not None and hasattr(extras, "tolist"):
        extras = extras.tolist()
    verdicts = []
    for extra in extras if extras is not None else []:
        info = extra.get("reward_extra_info") if isinstance(extra, dict) else None
        verdicts.append(info.get(CORRECTNESS_KEY) if isinstance(info, dict) else None)
    if extras is None or len(verdicts) != data.batch_size[0] or any(v is None for v in verdicts):
        raise RuntimeError(
            f"Div-R1 (algorithm.div_r1.samples=correct) applies to correct responses and reads the verdict from the "
            f"reward's '{CORRECTNESS_KEY}' (reward_extra_info), which some rows lack: use a reward that reports it "
            "(the recipe's and verl's DAPO reward do), or algorithm.div_r1.samples=positive_score (score > 0)"
        )
    return torch.tensor([bool(v) for v in verdicts], dtype=torch.bool)


def div_r1_loss(config, model_output: dict, data, dp_group=None, *, settings: DivR1Settings):
    """verl's ``ppo_loss`` minus ``coef`` x the Div-R1 term (``loss_fn`` signature of verl's training engines).

    Metrics: ``actor/div_r1_entropy`` (the term) and ``actor/div_r1_share`` (the share of responses it covers).
    """
    from verl.utils.metric import AggregationType, Metric
    from verl.workers.utils.losses import ppo_loss

    loss, metrics = ppo_loss(config, model_output, data, dp_group)
    term, share = div_r1_term(model_output, data, settings, config.global_batch_info)
    info = config.global_batch_info
    summed = (info.get("dp_size", 1) or 1) > 1 or any(
        info.get(key) is not None for key in ("batch_num_tokens", "global_batch_size", "loss_scale_factor")
    )
    metrics["actor/div_r1_entropy"] = Metric(
        value=term.detach(), aggregation=AggregationType.SUM if summed else AggregationType.MEAN
    )
    metrics["actor/div_r1_share"] = Metric(value=share, aggregation=AggregationType.MEAN)
    return loss - settings.coef * term, metrics


def div_r1_loss_fn(config: DictConfig, settings: DivR1Settings) -> Optional[Callable[..., Any]]:
    """The actor loss for ``actor_rollout_wg.set_loss_fn`` when Div-R1 is enabled, else None.

    The actor's config is built here from ``actor_rollout_ref.actor`` as verl's worker builds it
    (``omega_conf_to_dataclass``); ``ppo_loss`` reads only its loss keys, which the worker does not change.
    """
    if not settings.enable:
        return None
    from verl.utils.config import omega_conf_to_dataclass

    actor_config = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    return functools.partial(div_r1_loss, config=actor_config, settings=settings)


BASELINE = register(
    Baseline(
        "div_r1",
        DivR1Settings,
        needs_trainer=lambda settings: TrainerNeed(
            "algorithm.div_r1.enable=true", "gives the actor workers the Div-R1 loss"
        ),
        check=check_div_r1,
        loss_fn=div_r1_loss_fn,
    )
)
