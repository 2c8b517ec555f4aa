import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from gcpo_core.advantages import credit_advantages, group_normalize
from gcpo_core.config import CreditConfig
from gcpo_core.credit import compute_credit
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
    with pytest.raises(ValueError, match="allowed: dra, mix, shapley"):
        credit_advantages(rewards, phi, mask, mode="rank")


def test_std_floor_damps_groups_whose_credit_barely_differs_and_leaves_others_alone():
    scores = torch.tensor([[0.431, 0.450, 0.435, 0.448], [0.693, 0.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(2, 4, dtype=torch.bool)
    plain = group_normalize(scores, mask)
    floored = group_normalize(scores, mask, std_floor=0.05)
    assert float(plain[0].abs().max()) > 0.9  # a 0.02-nat spread becomes a full-size advantage
    assert float(floored[0].abs().max()) < 0.25
    torch.testing.assert_close(floored[1], plain[1])  # one correct rollout: std 0.35 > floor, GRPO unchanged
