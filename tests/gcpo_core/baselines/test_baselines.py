"""The reward-only group baselines (MC-GRPO, COPO's advantage blend) and the engine's DQO / DRA presets."""

import math

import numpy as np
import pytest
import torch

from gcpo_core.credit.advantages import credit_advantages, group_normalize
from gcpo_core.baselines.copo import consistency_entropy, copo_advantages
from gcpo_core.baselines.mc_grpo import median_centred_advantages
from gcpo_core.credit.config import CreditConfig
from gcpo_core.credit.compute import compute_credit


def _t(rows):
    width = max(len(r) for r in rows)
    scores = torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float64)
    mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows])
    return scores, mask


def _official_mc_grpo(rewards, mad_zero_guard):
    """MC-GRPO by hand, as the official GSM8K trainer computes it for one group of G + 1 (lotusroot-kim/MC-GRPO):
    median, MAD + 1e-3, the median rollout left out (0), non-zero advantages x (G + 1) / their count."""
    r = np.asarray(rewards, dtype=np.float64)
    order = np.sort(r)
    median = order[(len(r) - 1) // 2]
    mad = np.sort(np.abs(r - median))[(len(r) - 1) // 2]
    scale = (r.std(ddof=1) if (mad == 0 and mad_zero_guard) else mad) + 1e-3
    advantage = (r - median) / scale
    advantage[int(np.flatnonzero(r == median)[0])] = 0.0
    nonzero = np.abs(advantage) > 1e-6
    if nonzero.any():
        advantage[nonzero] *= len(r) / nonzero.sum()
    return advantage


@pytest.mark.parametrize("rewards", [
    [0.0, 0.5, 1.0, 2.0, 3.5],            # graded: MAD 1.0
    [2.0, 0.0, 2.0, 1.0, 0.0, 2.0, 2.5],  # ties at the median: the first tied rollout is the pivot
    [1.0, -1.0, 1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0],  # binary, G + 1 = 9: MAD = 0
])
def test_mc_grpo_matches_the_official_formula_on_hand_computed_groups(rewards):
    scores, mask = _t([rewards])
    official = median_centred_advantages(scores, mask, mad_zero="official")[0].numpy()
    np.testing.assert_allclose(official, _official_mc_grpo(rewards, mad_zero_guard=False), atol=1e-9)
    guarded = median_centred_advantages(scores, mask)[0].numpy()
    np.testing.assert_allclose(guarded, _official_mc_grpo(rewards, mad_zero_guard=True), atol=1e-9)
    assert (official == 0).sum() >= 1  # the pivot


def test_mc_grpo_guards_the_binary_case_the_official_form_blows_up():
    rewards = [1.0, -1.0, 1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0]  # 6 right, 3 wrong: median 1, MAD 0
    scores, mask = _t([rewards])
    official = median_centred_advantages(scores, mask, mad_zero="official")[0]
    guarded = median_centred_advantages(scores, mask)[0]
    assert official.abs().max() > 1000  # (-1 - 1) / 1e-3 x 9/3
    assert guarded.abs().max() < 10 and torch.all(guarded[[1, 4, 7]] < 0) and torch.all(guarded[[0, 2, 3, 5, 6, 8]] == 0)
    # hand-computed: std of six 1s and three -1s (unbiased) = sqrt(8/9 * 9/8 * ...) -> 1.0, scale 1.001; x 9/3
    std = float(np.std(rewards, ddof=1))
    assert guarded[1].item() == pytest.approx(-2.0 / (std + 1e-3) * 3.0)


def test_mc_grpo_edge_groups_padding_singletons_and_uniform_rewards():
    scores, mask = _t([[1.0, 1.0, 1.0], [0.7], [0.0, 1.0, 3.0, 0.0]])
    adv = median_centred_advantages(scores, mask)
    assert torch.all(adv[0] == 0)  # all equal: nothing to learn
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # a group of one, and padding
    centred = median_centred_advantages(scores, mask, norm_by_std=False, rescale=False)
    assert centred[2].tolist() == pytest.approx([0.0, 1.0, 3.0, 0.0])  # lower median 0; the first 0 is the pivot
    with pytest.raises(ValueError, match="mad_zero"):
        median_centred_advantages(scores, mask, mad_zero="clip")


def test_consistency_entropy_is_zero_when_all_agree_and_one_for_an_even_split():
    scores, mask = _t([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0], [1.0, -1.0, 1.0, -1.0], [1.0, -1.0, -1.0, -1.0]])
    entropy = consistency_entropy(scores, mask)
    p = 0.25
    assert entropy.tolist() == pytest.approx([0.0, 0.0, 1.0, -(p * math.log(p) + (1 - p) * math.log(1 - p)) / math.log(2)])


def test_copo_gives_agreeing_groups_the_global_signal_and_split_groups_the_local_one():
    scores, mask = _t([[1.0] * 4, [-1.0] * 4, [1.0, -1.0, 1.0, -1.0]])
    adv = copo_advantages(scores, mask)
    assert torch.all(adv[0] > 0) and torch.all(adv[1] < 0)  # GRPO would give these groups zero
    torch.testing.assert_close(adv[2], group_normalize(scores, mask)[2])  # H = 1: purely local
    means = np.array([1.0, -1.0, 0.0])
    expected_global = (means - means.mean()) / (means.std(ddof=1) + 1e-6)
    assert adv[0, 0].item() == pytest.approx(expected_global[0])


def test_dra_divides_each_reward_by_one_plus_its_similarity_to_the_rest():
    rewards = torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)
    kernel = torch.tensor([[[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    score, _ = credit_advantages(rewards, torch.zeros(1, 3), mask, mode="dra", kernel=kernel)
    assert score[0].tolist() == pytest.approx([1 / 2.0, 1 / 2.1, 1 / 1.3])
    with pytest.raises(ValueError, match="needs the rollouts' similarity kernel"):
        credit_advantages(rewards, torch.zeros(1, 3), mask, mode="dra")


def test_engine_presets_for_dqo_dra_and_the_ablations_run_end_to_end():
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.7, 0.7]], dtype=torch.float64)
    rewards = [1.0, 1.0, 1.0, -1.0]
    dqo = compute_credit(rewards, emb, ["g"] * 4, CreditConfig(quality="none", method="loo", advantage="mix", mix_coef=0.5))
    assert dqo.shapley[3] > 0  # the wrong answer adds diversity too: DQO does not look at correctness
    dra = compute_credit(rewards, emb, ["g"] * 4, CreditConfig(advantage="dra"))
    assert dra.score[2] > dra.score[0]  # the unique correct one is divided by less
    bonus = compute_credit(rewards, emb, ["g"] * 4, CreditConfig(advantage="mix", mix_coef=0.1))
    assert bonus.advantage[3] < 0 < bonus.advantage[2]
