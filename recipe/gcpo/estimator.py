"""The ``gcpo`` advantage estimator, registered in verl's estimator registry, and the group plumbing the
reward-rule baselines' estimators share (:func:`grouped_outcome_advantage`).

verl calls a registered estimator with token-level rewards, the response mask, the group ids and the
``algorithm`` config only: never the responses. The GCPO trainer therefore computes each rollout's Shapley
credit first (texts -> credit actor) and hands it to this estimator for the duration of one
``compute_advantage`` call through :func:`provide_credit`; the estimator checks that the credit belongs to
the batch it is given (same group ids in the same order). The credit carries the credit config it was computed
with, so the estimator normalises with the settings the trainer parsed once, not a parse of ``config`` per step.
Everything else verl does around the estimator (KL-in-reward, rollout correction, write-back to TransferQueue)
runs unchanged.

Called without credit, i.e. with ``algorithm.adv_estimator=gcpo`` under a stock trainer, it fails naming the
entry point to use; the GCPO entry point and ``recipe.gcpo.register`` refuse that configuration at start-up
already.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from gcpo_core.credit.advantages import mode_advantage, score_stderr
from gcpo_core.credit.config import CreditConfig
from gcpo_core.credit.grouping import layout_groups
from recipe.gcpo.settings import EMBEDDING_ESTIMATORS, GCPO_ESTIMATOR, estimator_need, recipe_trainer_message

_active = threading.local()


@dataclass(frozen=True)
class StepCredit:
    """One step's credit, row-aligned with the batch verl passes to the estimator.

    Attributes:
        uids: `(np.ndarray)` object (N,), each row's prompt id.
        reward: `(np.ndarray)` float64 (N,), the verifier reward the credit was computed from (row sum of
            ``rm_scores``).
        score: `(np.ndarray)` float64 (N,), the credit score to normalise (phi, or r + lambda phi; ``blend``: phi).
        valid: `(np.ndarray)` bool (N,), False for padding rows.
        config: the credit config the score was computed with (``algorithm.gcpo.credit`` with
            ``norm_adv_by_std_in_grpo`` and the estimator's fixed keys, parsed once by the trainer): its
            normalisation fields (norm_by_std, epsilon, std_floor, all_correct_scale, advantage, mix_coef,
            blend_weight) are the ones the estimator applies.
        stderr: `(np.ndarray | None)` float64 (N,), phi's Monte-Carlo standard error (0 where exact); None: 0.
    """

    uids: np.ndarray
    reward: np.ndarray
    score: np.ndarray
    valid: np.ndarray
    config: CreditConfig
    stderr: Optional[np.ndarray] = None


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
    (:func:`gcpo_core.credit.advantages.mode_advantage`, the function the credit engine itself uses), so that
    without KL-in-reward the advantages are exactly the engine's. Under ``credit.advantage=blend`` the credit's
    advantage is weighed against GRPO's advantage of the reward verl hands over (its KL shaping included, as verl's
    GRPO would normalise it).

    Args:
        token_level_rewards: `(torch.Tensor)` shape (bs, response_length): the verifier reward on the last
            token, minus the per-token KL penalty when ``use_kl_in_reward``; that penalty is added to the
            credit score, so KL-in-reward shapes GCPO exactly as it shapes GRPO (``blend``: both its parts, the
            credit's score and GRPO's reward).
        response_mask: `(torch.Tensor)` shape (bs, response_length).
        index: `(np.ndarray)` prompt ids (verl's ``uid``); must match the provided credit.
        config: `(DictConfig)` the ``algorithm`` config verl passes; only its ``adv_estimator`` is read, for the
            message when no credit was provided (the normalisation settings travel with the credit).

    Returns:
        advantages: `(torch.Tensor)` shape (bs, response_length), 0 at padding rows.
        returns: `(torch.Tensor)` the same.
    """
    credit: Optional[StepCredit] = getattr(_active, "credit", None)
    if credit is None:
        estimator = (config or {}).get("adv_estimator") or GCPO_ESTIMATOR
        raise RuntimeError(recipe_trainer_message(estimator_need(estimator), "no credit was provided to the estimator"))
    rows = token_level_rewards.shape[0]
    if len(credit.score) != rows:
        raise RuntimeError(f"GCPO credit covers {len(credit.score)} rows but the batch has {rows}")
    if index is not None and not np.array_equal(np.asarray(index, dtype=object), credit.uids):
        raise RuntimeError("GCPO credit was computed for another batch (group ids differ or are in another order)")

    settings = credit.config
    with torch.no_grad():
        reward = token_level_rewards.sum(dim=-1).to(torch.float64).cpu().numpy()
        score = credit.score + (reward - credit.reward)  # + the KL shaping, 0 without use_kl_in_reward
        valid = credit.valid & (response_mask.sum(dim=-1) > 0).cpu().numpy()
        rows_kept = np.flatnonzero(valid)
        layout = layout_groups([credit.uids[i] for i in rows_kept])

        def padded(values: np.ndarray) -> torch.Tensor:
            return layout.gather(torch.from_numpy(np.asarray(values, dtype=np.float64)[rows_kept]))

        stderr = None if credit.stderr is None else padded(credit.stderr)
        normalised = mode_advantage(
            padded(score),
            layout.mask,
            padded(credit.reward),  # the verifier's reward decides which groups are reward-mixed
            settings.advantage,
            blend_weight=settings.blend_weight,
            norm_by_std=settings.norm_by_std,
            epsilon=settings.epsilon,
            std_floor=settings.std_floor,
            all_correct_scale=settings.all_correct_scale,
            stderr=score_stderr(stderr, settings.advantage, settings.mix_coef),
            grpo_rewards=padded(reward),  # blend's GRPO part: the reward as verl's GRPO sees it, KL shaping included
        )
        advantage = np.zeros(rows, dtype=np.float64)
        advantage[rows_kept] = layout.scatter(normalised).numpy()
        scores = torch.from_numpy(advantage).to(token_level_rewards.device, token_level_rewards.dtype)
        scores = scores.unsqueeze(-1) * response_mask
    return scores, scores


# gcpo, and the embedding baselines whose credit the trainer computes the same way (dqo, dra_grpo)
for _name in EMBEDDING_ESTIMATORS:
    register_adv_est(_name)(compute_gcpo_outcome_advantage)


def grouped_outcome_advantage(
    advantage_fn: Callable[..., torch.Tensor],
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Optional[np.ndarray],
    config,
    epsilon: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reward-rule estimator's advantages (COPO's advantage blend, MC-GRPO), verl's way: each row's outcome reward,
    grouped by prompt id, through ``advantage_fn(padded (G, n), mask (G, n), norm_by_std=, epsilon=)``; rows with an
    all-zero response mask (verl's padding) are left out of every group and get 0.

    Args:
        token_level_rewards, response_mask: `(torch.Tensor)` (bs, response_length).
        index: `(np.ndarray)` (bs,) prompt ids; None: every row its own group.
        config: verl's ``algorithm`` config (``norm_adv_by_std_in_grpo``), or None (True).
    Returns:
        (advantages, returns), both (bs, response_length), equal.
    """
    norm_by_std = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1).to(torch.float64).cpu()
        rows = np.flatnonzero((response_mask.sum(dim=-1) > 0).cpu().numpy())
        ids = np.arange(len(scores)) if index is None else np.asarray(index, dtype=object)
        layout = layout_groups([ids[i] for i in rows])
        padded = layout.gather(scores[rows])
        advantage = torch.zeros(len(scores), dtype=torch.float64)
        advantage[rows] = layout.scatter(advantage_fn(padded, layout.mask, norm_by_std=norm_by_std, epsilon=epsilon))
        out = advantage.to(token_level_rewards.device, token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return out, out
