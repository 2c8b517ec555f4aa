import math

import numpy as np
import pytest
import torch

from gcpo_core.advantages import credit_advantages, group_normalize
from gcpo_core.baselines import consistency_entropy, copo_advantages, median_centred_advantages
from gcpo_core.config import CreditConfig
from gcpo_core.credit import compute_credit


def _t(rows):
    width = max(len(r) for r in rows)
    scores = torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float64)
    mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows])
    return scores, mask


def test_median_centring():
    scores, mask = _t([[0.0, 0.0, 1.0, 10.0], [1.0, 2.0, 3.0]])
    adv = median_centred_advantages(scores, mask, norm_by_std=False)
    assert adv[0].tolist() == pytest.approx([-0.5, -0.5, 0.5, 9.5])
    assert adv[1].tolist() == pytest.approx([-1.0, 0.0, 1.0, 0.0])
    normed = median_centred_advantages(scores, mask)
    assert normed[1, 0] == pytest.approx(-1.0 / (1.0 + 1e-6))  # std of (1, 2, 3) is 1
    single, single_mask = _t([[0.7]])
    assert median_centred_advantages(single, single_mask)[0, 0] == pytest.approx(0.7 / (1 + 1e-6))


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
