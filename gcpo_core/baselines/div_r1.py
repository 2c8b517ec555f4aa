"""Diversity-aware policy optimization (Yao, Cheng, Wu, Wu, Tan, *Diversity-Aware Policy Optimization for Large
Language Model Reasoning*, arXiv 2505.23433, NeurIPS 2025; "R1-zero-Div"), the method we take the GCPO paper's
"Div-R1" baseline to be (that mapping is our reading: no method is published under the name "Div-R1").

The paper's objective (§4.2, Eq. 12) is GRPO's plus lambda times a token-level entropy of the *correct* samples,
written with the old policy's samples by importance sampling (the positive-only objective, Eq. 9 and 12; Eq. 8 is
the per-token estimate it is built from)::

    J_Div(pi) = E_{q, o ~ pi_old} [ 1(r = 1) * (1/T) sum_t  -(pi(o_t | q, o_<t) / pi_old(o_t | q, o_<t)) log pi(o_t | q, o_<t) ]

with r the accuracy (correctness) reward -- not a shaped score --, T the response length, the group's samples averaged (1/G sum_i), lambda = 0.01 (§4.2).
The per-token term is an unbiased one-sample estimate of the entropy H(pi(. | q, o_<t)) at o_t ~ pi_old, and
its gradient that of the entropy (Appendix A.1). This module holds the framework-free pieces; the verl loss
that adds the term to verl's PPO loss is ``recipe/gcpo/baselines/div_r1.py``.
"""

from __future__ import annotations

import torch

SAMPLE_SETS = ("correct", "positive_score", "all")
# verl clamps the PPO log-ratio to this range before exp (core_algos.compute_policy_loss_vanilla); so do we
LOG_RATIO_CLAMP = 20.0


def sampled_token_entropy(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """The paper's Eq. 8 integrand per token: ``-(pi / pi_old)(o_t) * log pi(o_t)``.

    Args:
        log_prob: `(torch.Tensor)` (bs, response_length) log pi_theta of the sampled tokens (with grad).
        old_log_prob: `(torch.Tensor)` (bs, response_length) log pi_old of the same tokens.
    Returns:
        `(torch.Tensor)` (bs, response_length); its expectation under pi_old is the entropy of pi_theta at t.
    """
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return -ratio * log_prob


def diversity_rows(
    rewards: torch.Tensor, samples: str = "correct", correct: torch.Tensor | None = None
) -> torch.Tensor:
    """Which responses the diversity term applies to: ``correct`` (the paper's 1(r = 1) on the correctness reward:
    ``correct``, the verifier's verdict, not the shaped score), ``positive_score`` (score > 0: the shaped score,
    which an overlong penalty can push to <= 0 for a correct answer) or ``all`` (the paper's "pos+neg" ablation,
    §5.3).

    Args:
        rewards: `(torch.Tensor)` (bs,) each response's (shaped) reward.
        correct: `(torch.Tensor | None)` bool (bs,) the verifier's verdict; needed for ``correct``.
    Returns:
        `(torch.Tensor)` bool (bs,).
    """
    if samples not in SAMPLE_SETS:
        raise ValueError(f"samples must be one of {list(SAMPLE_SETS)}, got {samples!r}")
    if not torch.all(torch.isfinite(rewards)):
        raise ValueError("Div-R1 needs finite rewards; got NaN or inf")
    if samples == "all":
        return torch.ones_like(rewards, dtype=torch.bool)
    if samples == "positive_score":
        return rewards > 0
    if correct is None or correct.shape != rewards.shape:
        raise ValueError("Div-R1 samples=correct needs each response's verdict (correct), one per reward")
    return correct.to(torch.bool)
