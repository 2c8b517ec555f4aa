"""The statements of docs/method.md, "What each credit optimises", checked by exact enumeration through the engine.

A finite answer distribution (4 answers, 3 correct with overlapping embeddings, 1 wrong), every multiset of G
samples with its multinomial probability: the expected policy-gradient step of each credit, computed with the
engine's credit, against the autograd gradient of the claimed objective, computed by enumeration with an
independent log-det.
"""

import math

import pytest
import torch

from experiments.frontier.arms import Arm, scores_and_advantages
from experiments.frontier.theory import credit_gradient, expected_team_value, objective_gradient

EMBEDDINGS = torch.nn.functional.normalize(
    torch.tensor([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.6, 0.8], [0.5, 0.5, 0.7]], dtype=torch.float64), dim=-1
)
CORRECT = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
REWARDS = 2 * CORRECT - 1  # the miniature's +1 / -1
QUALITY = CORRECT  # credit.quality=clip of a +1 / -1 reward
LOGITS = torch.tensor([0.7, -0.2, 0.1, 0.4], dtype=torch.float64)
ONES = torch.ones(4, dtype=torch.float64)


def accuracy(theta):
    return (torch.softmax(theta, -1) * CORRECT).sum()


def mean_reward(theta):
    return (torch.softmax(theta, -1) * REWARDS).sum()


def coverage(k, quality=QUALITY):
    return lambda theta: expected_team_value(theta, EMBEDDINGS, quality, k)


def harmonic(g):
    """Σ_{k=1}^{g} E[V(k samples)] / k."""
    return lambda theta: sum(coverage(k)(theta) / k for k in range(1, g + 1))


def grad(objective):
    return objective_gradient(objective, LOGITS)


def step(arm, g, what="credit"):
    return credit_gradient(arm, LOGITS, EMBEDDINGS, REWARDS, g, what=what)


def close(a, b):
    return torch.allclose(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("g", [2, 3, 4])
def test_leave_one_out_credit_is_the_gradient_of_the_whole_groups_coverage(g):
    """E[Σ (V(N) − V(N∖i)) ∇log p(a_i)] = ∇ E[V(G samples)], and not the Shapley objective's gradient."""
    estimate = step(Arm("loo"), g)
    assert close(estimate, grad(coverage(g)))
    assert (estimate - grad(harmonic(g))).norm() > 1e-3 * estimate.norm()


@pytest.mark.parametrize("g", [2, 3, 4])
def test_shapley_credit_is_the_gradient_of_the_harmonic_mixture_of_coverages(g):
    """E[Σ φ_i ∇log p(a_i)] = ∇ Σ_k E[V(k samples)] / k; not ∇E[V(G)] (leave-one-out's) nor accuracy's."""
    estimate = step(Arm("shapley"), g)
    assert close(estimate, grad(harmonic(g)))
    assert (estimate - grad(coverage(g))).norm() > 1e-3 * estimate.norm()
    assert (estimate - math.log(2) * grad(accuracy)).norm() > 1e-3 * estimate.norm()


def test_the_k_equals_one_term_is_accuracy_in_nats():
    """E[V(1 sample)] = log 2 · accuracy for correct answers of quality 1 (a wrong one adds log 1 = 0)."""
    for theta in (LOGITS, torch.tensor([-1.0, 2.0, 0.3, 0.0], dtype=torch.float64)):
        assert coverage(1)(theta).item() == pytest.approx(math.log(2) * accuracy(theta).item(), rel=1e-12)


@pytest.mark.parametrize("g", [2, 4])
def test_grpo_is_the_gradient_of_accuracy(g):
    """Raw reward r_i: G ∇E[r] (= 2G ∇accuracy with ±1 rewards)."""
    assert close(step(Arm("grpo"), g), g * grad(mean_reward))
    assert close(step(Arm("grpo"), g), 2 * g * grad(accuracy))


@pytest.mark.parametrize("shape, g, lam", [("shapley", 3, 0.5), ("loo", 3, 2.0), ("shapley", 4, 0.25)])
def test_the_mixed_score_is_the_gradient_of_accuracy_plus_lambda_times_the_credits_objective(shape, g, lam):
    """credit.advantage=mix: r + λ·φ → G ∇E[r] + λ ∇(the credit's objective)."""
    credit_objective = harmonic(g) if shape == "shapley" else coverage(g)
    expected = g * grad(mean_reward) + lam * grad(credit_objective)
    assert close(step(Arm(shape, lam), g, what="score"), expected)


@pytest.mark.parametrize("g, alpha", [(3, 2.0), (4, 0.5)])
def test_the_additive_bonus_is_the_gradient_of_accuracy_plus_the_coverage_of_all_answers_right_or_wrong(g, alpha):
    """dqo: r + α·(V_K(N) − V_K(N∖i)), V_K unweighted → G ∇E[r] + α ∇E[V_K(G samples)]: the coverage term
    counts the wrong answers too (quality=none), and differs from the correctness-weighted one."""
    estimate = step(Arm("dqo", alpha), g, what="score")
    assert close(estimate, g * grad(mean_reward) + alpha * grad(coverage(g, ONES)))
    weighted = g * grad(mean_reward) + alpha * grad(coverage(g))
    assert (estimate - weighted).norm() > 1e-3 * estimate.norm()


@pytest.mark.parametrize("g", [2, 3, 4])
def test_centring_in_the_group_moves_each_objective_down_one_sample(g):
    """The group mean as baseline (before the std): GRPO (G − 1) ∇E[r]; leave-one-out ∇E[V(G − 1 samples)];
    Shapley ∇ Σ_{k<G} E[V(k)] / k (its scores sum to V(N), so the mean removes the k = G term)."""
    assert close(step(Arm("grpo"), g, "centred"), (g - 1) * grad(mean_reward))
    assert close(step(Arm("loo"), g, "centred"), grad(coverage(g - 1)))
    assert close(step(Arm("shapley"), g, "centred"), grad(harmonic(g - 1)))


def test_the_std_normalised_advantage_is_not_the_gradient_of_the_centred_objective():
    """The std scale is a per-group weight: after it the step is no longer any of the objectives above (checked
    against the centred objective's direction, which it does not keep)."""
    advantage = step(Arm("loo"), 3, "advantage")
    centred = grad(coverage(2))
    cosine = float(advantage @ centred / (advantage.norm() * centred.norm()))
    assert cosine < 1 - 1e-4


@pytest.mark.parametrize("m", [1, 2, 3, 5, 7])
def test_total_credit_of_m_copies_of_one_answer(m):
    """m copies of one correct answer among orthogonal others: total credit m (GRPO, 0/1 reward), log(1 + m)
    (Shapley), m·log(1 + 1/m) (leave-one-out)."""
    g = m + 3
    dim = 4
    embeddings = torch.zeros(1, g, dim, dtype=torch.float64)
    embeddings[0, :m, 0] = 1.0  # the copies
    embeddings[0, m, 1] = embeddings[0, m + 1, 2] = embeddings[0, m + 2, 3] = 1.0  # two other correct, one wrong
    correct = torch.tensor([[1.0] * (m + 2) + [0.0]], dtype=torch.float64)
    copies = slice(0, m)
    grpo, _, _ = scores_and_advantages(Arm("grpo"), correct, embeddings)
    shapley, _, _ = scores_and_advantages(Arm("shapley"), 2 * correct - 1, embeddings)
    loo, _, _ = scores_and_advantages(Arm("loo"), 2 * correct - 1, embeddings)
    assert grpo[0, copies].sum().item() == pytest.approx(m, rel=1e-12)
    assert shapley[0, copies].sum().item() == pytest.approx(math.log(1 + m), rel=1e-9)
    assert loo[0, copies].sum().item() == pytest.approx(m * math.log(1 + 1 / m), rel=1e-9)
    # leave-one-out is the stronger anti-duplicate dose: never more total credit than Shapley's, less from m = 2
    assert loo[0, copies].sum() <= shapley[0, copies].sum() + 1e-12
    assert (loo[0, copies].sum() < shapley[0, copies].sum() - 1e-3) == (m >= 2)
