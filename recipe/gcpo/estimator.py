"""The ``gcpo`` advantage estimator, registered in verl's estimator registry.

verl calls a registered estimator with token-level rewards, the response mask, the group ids and the
``algorithm`` config only: never the responses. The GCPO trainer therefore computes each rollout's Shapley
credit first (texts -> credit actor) and hands it to this estimator for the duration of one
``compute_advantage`` call through :func:`provide_credit`; the estimator checks that the credit belongs to
the batch it is given (same group ids in the same order). Everything else verl does around the estimator
(KL-in-reward, rollout correction, write-back to TransferQueue) runs unchanged.

Called without credit, i.e. with ``algorithm.adv_estimator=gcpo`` under a stock trainer, it fails naming the
entry point to use; the GCPO entry point and ``recipe.gcpo.register`` refuse that configuration at start-up
already.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from gcpo_core.credit.advantages import normalize_credit, score_stderr
from gcpo_core.credit.config import CreditConfig
from gcpo_core.credit.grouping import layout_groups
from recipe.gcpo.settings import EMBEDDING_ESTIMATORS, GCPO_ESTIMATOR, GCPOSettings, needs_gcpo_trainer

_active = threading.local()


@dataclass(frozen=True)
class StepCredit:
    """One step's credit, row-aligned with the batch verl passes to the estimator.

    Attributes:
        uids: `(np.ndarray)` object (N,), each row's prompt id.
        reward: `(np.ndarray)` float64 (N,), the verifier reward the credit was computed from (row sum of
            ``rm_scores``).
        score: `(np.ndarray)` float64 (N,), the credit score to normalise (phi, or r + lambda phi).
        valid: `(np.ndarray)` bool (N,), False for padding rows.
        stderr: `(np.ndarray | None)` float64 (N,), phi's Monte-Carlo standard error (0 where exact); None: 0.
        all_correct_scale: how all-correct groups are scaled, overriding ``gcpo.credit.all_correct_scale``
            (DIVER's shaped reward is normalised like GRPO's, each group by its own std: ``group``); None: the
            config's.
    """

    uids: np.ndarray
    reward: np.ndarray
    score: np.ndarray
    valid: np.ndarray
    stderr: Optional[np.ndarray] = None
    all_correct_scale: Optional[str] = None


@contextmanager
def provide_credit(credit: StepCredit) -> Iterator[None]:
    """Make ``credit`` the input of the ``gcpo`` estimator within this block (this thread only)."""
    previous = getattr(_active, "credit", None)
    _active.credit = credit
    try:
        yield
    finally:
        _active.credit = previous


def compute_gcpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[np.ndarray] = None,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GCPO advantage: the Shapley credit score normalised per prompt by ``gcpo_core``'s one normalisation
    (:func:`gcpo_core.credit.advantages.normalize_credit`, the function the credit engine itself uses), so that
    without KL-in-reward the advantages are exactly the engine's.

    Args:
        token_level_rewards: `(torch.Tensor)` shape (bs, response_length): the verifier reward on the last
            token, minus the per-token KL penalty when ``use_kl_in_reward``; that penalty is added to the
            credit score, so KL-in-reward shapes GCPO exactly as it shapes GRPO.
        response_mask: `(torch.Tensor)` shape (bs, response_length).
        index: `(np.ndarray)` prompt ids (verl's ``uid``); must match the provided credit.
        config: `(DictConfig)` the ``algorithm`` config: ``norm_adv_by_std_in_grpo`` and
            ``gcpo.credit.*`` (epsilon, std_floor, all_correct_scale, advantage, mix_coef) are read from it,
            exactly as the credit actor reads them.

    Returns:
        advantages: `(torch.Tensor)` shape (bs, response_length), 0 at padding rows.
        returns: `(torch.Tensor)` the same.
    """
    credit: Optional[StepCredit] = getattr(_active, "credit", None)
    if credit is None:
        raise RuntimeError(needs_gcpo_trainer("no credit was provided to the estimator",
                                              (config or {}).get("adv_estimator", "gcpo")))
    rows = token_level_rewards.shape[0]
    if len(credit.score) != rows:
        raise RuntimeError(f"GCPO credit covers {len(credit.score)} rows but the batch has {rows}")
    if index is not None and not np.array_equal(np.asarray(index, dtype=object), credit.uids):
        raise RuntimeError("GCPO credit was computed for another batch (group ids differ or are in another order)")

    settings = _credit_config(config)
    with torch.no_grad():
        reward = token_level_rewards.sum(dim=-1).to(torch.float64).cpu().numpy()
        score = credit.score + (reward - credit.reward)  # + the KL shaping, 0 without use_kl_in_reward
        valid = credit.valid & (response_mask.sum(dim=-1) > 0).cpu().numpy()
        rows_kept = np.flatnonzero(valid)
        layout = layout_groups([credit.uids[i] for i in rows_kept])

        def padded(values: np.ndarray) -> torch.Tensor:
            return layout.gather(torch.from_numpy(np.asarray(values, dtype=np.float64)[rows_kept]))

        stderr = None if credit.stderr is None else padded(credit.stderr)
        normalised = normalize_credit(
            padded(score),
            layout.mask,
            padded(credit.reward),  # the verifier's reward decides which groups are reward-mixed
            norm_by_std=settings.norm_by_std,
            epsilon=settings.epsilon,
            std_floor=settings.std_floor,
            all_correct_scale=credit.all_correct_scale or settings.all_correct_scale,
            stderr=score_stderr(stderr, settings.advantage, settings.mix_coef),
        )
        advantage = np.zeros(rows, dtype=np.float64)
        advantage[rows_kept] = layout.scatter(normalised).numpy()
        scores = torch.from_numpy(advantage).to(token_level_rewards.device, token_level_rewards.dtype)
        scores = scores.unsqueeze(-1) * response_mask
    return scores, scores


# gcpo, and the embedding baselines whose credit the trainer computes the same way (dqo, dra_grpo)
for _name in EMBEDDING_ESTIMATORS:
    register_adv_est(_name)(compute_gcpo_outcome_advantage)


def _credit_config(config) -> CreditConfig:
    """The credit settings the credit actor uses, parsed the same way (``algorithm.gcpo.credit``, with
    ``norm_by_std`` from ``algorithm.norm_adv_by_std_in_grpo`` and the keys the estimator fixes)."""
    if config is None:
        return CreditConfig()
    estimator = config.get("adv_estimator") or GCPO_ESTIMATOR
    return GCPOSettings.from_algorithm_config(config, estimator if estimator in EMBEDDING_ESTIMATORS else
                                              GCPO_ESTIMATOR).credit
