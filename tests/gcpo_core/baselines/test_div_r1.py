"""Div-R1's per-token term (gcpo_core/baselines/div_r1.py)."""

import math

import pytest
import torch

from gcpo_core.baselines.div_r1 import diversity_rows, sampled_token_entropy


def test_the_sampled_token_term_is_minus_ratio_times_log_prob():
    log_prob = torch.tensor([[math.log(0.5), math.log(0.2)]], dtype=torch.float64)
    old = torch.tensor([[math.log(0.25), math.log(0.2)]], dtype=torch.float64)
    expected = [[-(0.5 / 0.25) * math.log(0.5), -math.log(0.2)]]
    torch.testing.assert_close(sampled_token_entropy(log_prob, old), torch.tensor(expected, dtype=torch.float64))


def test_its_expectation_under_the_old_policy_is_the_entropy_of_the_new_one():
    # one decoding step over a 4-token vocabulary: sum_a pi_old(a) * (-(pi/pi_old)(a) log pi(a)) = H(pi)
    pi = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    pi_old = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    terms = sampled_token_entropy(pi.log()[None], pi_old.log()[None])[0]
    entropy = -(pi * pi.log()).sum()
    torch.testing.assert_close((pi_old * terms).sum(), entropy)


def test_its_gradient_at_the_old_policy_is_the_papers_per_token_gradient():
    # d/d log pi of -(pi/pi_old) log pi at pi = pi_old is -(1 + log pi) (the paper's Eq. 11, in log-space)
    log_prob = torch.tensor([[math.log(0.05), math.log(0.6)]], dtype=torch.float64, requires_grad=True)
    sampled_token_entropy(log_prob, log_prob.detach()).sum().backward()
    torch.testing.assert_close(log_prob.grad, -(1 + log_prob.detach()))
    assert log_prob.grad[0, 0] > 0 > log_prob.grad[0, 1]  # raises unlikely tokens (p < 1/e), lowers likely ones


def test_the_term_applies_to_correct_responses_positive_scores_or_all():
    rewards = torch.tensor([1.0, -1.0, 0.4, -0.3])  # 0.4 and -0.3: correct, shortened by an overlong penalty
    verdicts = torch.tensor([True, False, True, True])
    assert diversity_rows(rewards, correct=verdicts).tolist() == [True, False, True, True]  # the paper: 1(r = 1)
    assert diversity_rows(rewards, "positive_score").tolist() == [True, False, True, False]
    assert diversity_rows(rewards, "all").tolist() == [True] * 4
    with pytest.raises(ValueError, match="needs each response's verdict"):
        diversity_rows(rewards)
    with pytest.raises(ValueError, match="samples must be one of"):
        diversity_rows(rewards, "positive")
    with pytest.raises(ValueError, match="finite"):
        diversity_rows(torch.tensor([1.0, math.nan]))
