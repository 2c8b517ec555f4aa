import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from gcpo_core.credit.advantages import NOISE_FLOOR, credit_advantages, group_normalize, normalize_credit
from gcpo_core.credit.compute import compute_credit
from gcpo_core.credit.config import CreditConfig
from tests.gcpo_core.helpers import clustered_embeddings


def verl_grpo(rewards: np.ndarray, uids: list, norm_by_std: bool = True) -> np.ndarray:
    """verl 0.9.1's own GRPO advantage of outcome rewards (placed on the last response token)."""
    n, length = len(rewards), 5
    token_rewards = torch.zeros(n, length)
    token_rewards[:, -1] = torch.tensor(rewards, dtype=torch.float32)
    mask = torch.ones(n, length)
    adv, _ = compute_grpo_outcome_advantage(
        token_rewards, mask, np.array(uids, dtype=object), norm_adv_by_std_in_grpo=norm_by_std
    )
    return adv[:, -1].numpy()


def _one_correct_batch(rng, groups, size, wrong_reward):
    rewards = np.full((groups, size), wrong_reward, dtype=np.float64)
    rewards[np.arange(groups), rng.integers(0, size, groups)] = 1.0
    uids = [f"p{g}" for g in range(groups) for _ in range(size)]
    emb = clustered_embeddings(rng, groups, size).reshape(groups * size, -1)
    order = rng.permutation(groups * size)  # rollouts of a group need not be adjacent
    return rewards.reshape(-1)[order], torch.from_numpy(emb[order]), [uids[i] for i in order]


@pytest.mark.parametrize("wrong_reward", [0.0, -1.0])
@pytest.mark.parametrize("method", ["exact", "mc", "loo"])
def test_exactly_one_correct_rollout_gives_verls_grpo_advantage(wrong_reward, method):
    rng = np.random.default_rng(0)
    rewards, emb, uids = _one_correct_batch(rng, groups=40, size=8, wrong_reward=wrong_reward)
    ours = compute_credit(rewards, emb, uids, CreditConfig(method=method)).advantage.numpy()
    np.testing.assert_allclose(ours, verl_grpo(rewards, uids), atol=1e-5)


def test_all_wrong_groups_get_zero_advantage_like_grpo():
    rng = np.random.default_rng(1)
    for wrong in (0.0, -1.0):
        rewards = np.full(12, wrong)
        uids = ["a"] * 6 + ["b"] * 6
        emb = torch.from_numpy(rng.normal(size=(12, 4)))
        result = compute_credit(rewards, emb, uids)
        assert torch.all(result.advantage == 0)
        assert torch.all(result.shapley == 0)
        np.testing.assert_allclose(verl_grpo(rewards, uids), 0.0, atol=1e-6)


def test_all_correct_orthogonal_group_has_no_signal_like_grpo_but_redundancy_creates_one():
    orthogonal = torch.eye(4, dtype=torch.float64)
    result = compute_credit([1.0] * 4, orthogonal, ["g"] * 4)
    assert torch.all(result.advantage.abs() < 1e-6)
    redundant = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    result = compute_credit([1.0] * 4, redundant, ["g"] * 4)
    np.testing.assert_allclose(verl_grpo(np.ones(4), ["g"] * 4), 0.0)
    adv = result.advantage
    assert torch.all(adv[:3] < 0) and adv[3] > 0  # the unique solution is pushed up, the copies down
    assert adv[0] == pytest.approx(float(adv[1])) == pytest.approx(float(adv[2]))
    assert bool(result.groups.rescued[0])


def test_uneven_groups_match_verl_grpo_for_one_correct_rollout_each():
    rng = np.random.default_rng(2)
    sizes = [2, 5, 3, 8]
    uids, rewards = [], []
    for g, size in enumerate(sizes):
        r = np.zeros(size)
        r[rng.integers(0, size)] = 1.0
        uids += [g] * size
        rewards += r.tolist()
    emb = torch.from_numpy(rng.normal(size=(len(uids), 6)))
    ours = compute_credit(np.array(rewards), emb, uids).advantage.numpy()
    np.testing.assert_allclose(ours, verl_grpo(np.array(rewards), uids), atol=1e-5)


def test_singleton_groups_follow_verls_convention_mean_zero_std_one():
    scores = torch.tensor([[0.7, 0.0], [0.3, 0.9]], dtype=torch.float64)
    mask = torch.tensor([[True, False], [True, True]])
    adv = group_normalize(scores, mask)
    assert float(adv[0, 0]) == pytest.approx(0.7 / (1 + 1e-6))
    assert float(adv[0, 1]) == 0.0
    half_gap = 0.3 / (np.sqrt(0.18) + 1e-6)  # unbiased std of (0.3, 0.9)
    assert adv[1].tolist() == pytest.approx([-half_gap, half_gap], abs=1e-12)


def test_dr_grpo_mode_only_centres():
    scores = torch.tensor([[1.0, 2.0, 6.0]], dtype=torch.float64)
    adv = group_normalize(scores, torch.ones(1, 3, dtype=torch.bool), norm_by_std=False)
    assert adv[0].tolist() == pytest.approx([-2.0, -1.0, 3.0])


def test_mix_mode_scores_reward_plus_lambda_credit():
    rewards = torch.tensor([[1.0, 1.0, -1.0]], dtype=torch.float64)
    phi = torch.tensor([[0.5, 0.7, 0.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    score, adv = credit_advantages(rewards, phi, mask, mode="mix", mix_coef=2.0)
    assert score[0].tolist() == pytest.approx([2.0, 2.4, -1.0])
    assert float(adv[0].sum()) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="allowed: blend, dra, mix, shapley"):
        credit_advantages(rewards, phi, mask, mode="rank")


def test_std_floor_damps_groups_whose_credit_barely_differs_and_leaves_others_alone():
    scores = torch.tensor([[0.431, 0.450, 0.435, 0.448], [0.693, 0.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(2, 4, dtype=torch.bool)
    plain = group_normalize(scores, mask)
    floored = group_normalize(scores, mask, std_floor=0.05)
    assert float(plain[0].abs().max()) > 0.9  # a 0.02-nat spread becomes a full-size advantage
    assert float(floored[0].abs().max()) < 0.25
    torch.testing.assert_close(floored[1], plain[1])  # one correct rollout: std 0.35 > floor, GRPO unchanged


def _grpo64(rewards: np.ndarray, epsilon: float = 1e-6) -> np.ndarray:
    """GRPO's advantage of one group's rewards in float64: (r - mean) / (unbiased std + eps)."""
    return (rewards - rewards.mean()) / (rewards.std(ddof=1) + epsilon)


@pytest.mark.parametrize("wrong_reward", [0.0, -1.0])
@pytest.mark.parametrize("scale, relative", [("batch", 0.0), ("group", 2e-5)])
def test_one_correct_rollout_is_grpo_at_every_group_size_up_to_the_cap(wrong_reward, scale, relative):
    # group (the default) adds epsilon to the credit's std, which is not the rewards': the match drifts to 1e-5 of
    # the advantage at G = 128 (1.2e-4 of 11.2); batch applies it in reward units: GRPO's to rounding
    config = CreditConfig(all_correct_scale=scale)
    rng = np.random.default_rng(3)
    worst = 0.0
    for size in [2, 3, 5, 8, 16, 33, 64, 100, config.max_group_size]:
        rewards = np.full(size, wrong_reward)
        rewards[rng.integers(0, size)] = 1.0
        emb = torch.from_numpy(rng.normal(size=(size, 8)))
        result = compute_credit(rewards, emb, ["g"] * size, config)
        np.testing.assert_allclose(result.advantage.numpy(), _grpo64(rewards), rtol=relative, atol=1e-9)
        worst = max(worst, float(np.abs(result.advantage.numpy() - _grpo64(rewards)).max()))
    assert scale == "batch" or worst > 1e-9  # group's drift is real, and bounded


def test_all_correct_groups_are_scaled_by_the_batchs_right_vs_wrong_spread_not_their_own():
    # group 0: all correct, credits 0.431-0.450 (the demo's "sheep"); group 1: one right, three wrong
    scores = torch.tensor([[0.431, 0.450, 0.435, 0.448], [0.693, 0.0, 0.0, 0.0]], dtype=torch.float64)
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, -1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(2, 4, dtype=torch.bool)
    batch = normalize_credit(scores, mask, rewards, all_correct_scale="batch")
    own = normalize_credit(scores, mask, rewards)  # the default: group
    assert float(own[0].abs().max()) > 0.9  # a 0.02-nat spread blown up to unit size
    mixed_std = float(scores[1].std())
    torch.testing.assert_close(batch[0], (scores[0] - scores[0].mean()) / mixed_std, rtol=1e-12, atol=0)
    assert float(batch[0].abs().max()) < 0.05
    np.testing.assert_allclose(batch[1].numpy(), _grpo64(rewards[1].numpy()), atol=1e-12)  # GRPO's
    np.testing.assert_allclose(own[1].numpy(), batch[1].numpy(), atol=1e-5)


def test_a_batch_without_mixed_groups_only_centres_its_all_correct_groups_and_all_wrong_get_exactly_zero():
    scores = torch.tensor([[0.3, 0.5, 0.4], [0.0, 0.0, 0.0]], dtype=torch.float64)
    rewards = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]], dtype=torch.float64)
    adv = normalize_credit(scores, torch.ones(2, 3, dtype=torch.bool), rewards, all_correct_scale="batch")
    torch.testing.assert_close(adv[0], scores[0] - scores[0].mean(), rtol=0, atol=1e-15)
    assert torch.all(adv[1] == 0)
    mixed = normalize_credit(
        torch.tensor([[0.1, 0.1, 0.1]], dtype=torch.float64),
        torch.ones(1, 3, dtype=torch.bool),
        torch.tensor([[0.1, 0.1, 0.1]], dtype=torch.float64),
        all_correct_scale="group",
    )
    assert torch.all(mixed == 0)  # a constant group is exactly 0 (not a rounded mean over epsilon)


@pytest.mark.parametrize("all_correct_scale", ["batch", "group"])
def test_credit_differences_within_the_monte_carlo_error_do_not_become_unit_advantages(all_correct_scale):
    # equal true credit, estimates apart by about one standard error: before, +-1 advantages
    scores = torch.tensor([[0.400, 0.402, 0.398, 0.401]], dtype=torch.float64)
    stderr = torch.full_like(scores, 0.002)
    rewards = torch.ones_like(scores)
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert float(normalize_credit(scores, mask, rewards, all_correct_scale="group").abs().max()) > 0.9
    adv = normalize_credit(scores, mask, rewards, all_correct_scale=all_correct_scale, stderr=stderr)
    # a deviation of d standard errors becomes an advantage of at most d / NOISE_FLOOR
    deviation = float((scores - scores.mean()).abs().max())
    assert float(adv.abs().max()) <= deviation / (NOISE_FLOOR * 0.002) + 1e-12 < 0.3


def test_new_metrics_report_the_balance_of_all_correct_and_mixed_advantages():
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    result = compute_credit([1.0, 1.0, 1.0, 1.0, 0.0, 0.0], emb, ["a"] * 3 + ["b"] * 3)
    metrics = result.metrics()
    adv = result.advantage.abs()
    assert metrics["gcpo/all_correct_adv_abs"] == pytest.approx(float(adv[:3].mean()))
    assert metrics["gcpo/mixed_adv_abs"] == pytest.approx(float(adv[3:].mean()))
    assert 0 < metrics["gcpo/all_correct_adv_abs"] < metrics["gcpo/mixed_adv_abs"]


def test_the_legacy_switch_is_todays_normalisation():
    rng = np.random.default_rng(4)
    scores = torch.from_numpy(rng.random((5, 6)))
    mask = torch.from_numpy(rng.random((5, 6)) < 0.9)
    mask[:, 0] = True
    rewards = torch.ones_like(scores)
    torch.testing.assert_close(
        normalize_credit(scores, mask, rewards, all_correct_scale="group", std_floor=0.05),
        group_normalize(scores, mask, std_floor=0.05),
        rtol=0,
        atol=1e-15,
    )


def test_dra_divides_each_reward_by_one_plus_its_similarity_to_the_rest():
    rewards = torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)
    kernel = torch.tensor([[[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    score, _ = credit_advantages(rewards, torch.zeros(1, 3), mask, mode="dra", kernel=kernel)
    assert score[0].tolist() == pytest.approx([1 / 2.0, 1 / 2.1, 1 / 1.3])
    with pytest.raises(ValueError, match="needs the rollouts' similarity kernel"):
        credit_advantages(rewards, torch.zeros(1, 3), mask, mode="dra")
