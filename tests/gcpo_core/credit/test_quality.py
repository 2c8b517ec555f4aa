import math

import pytest
import torch

from gcpo_core.credit.quality import quality_from_rewards


def test_binary_maps_zero_one_and_dapo_plus_minus_one_to_zero_one():
    assert quality_from_rewards(torch.tensor([0.0, 1.0, 1.0, 0.0]), "binary").tolist() == [0, 1, 1, 0]
    assert quality_from_rewards(torch.tensor([-1.0, 1.0, -1.0]), "binary").tolist() == [0, 1, 0]
    # DAPO's overlong penalty is thrown away: a correct-but-long answer counts as fully correct
    assert quality_from_rewards(torch.tensor([0.6, -1.4]), "binary").tolist() == [1, 0]


def test_the_default_clip_keeps_binary_rewards_binary_and_the_overlong_penalty_in_q():
    rewards = torch.tensor([0.0, 1.0, -1.0, 0.535, -1.4, 0.0], dtype=torch.float64)
    assert quality_from_rewards(rewards).tolist() == [0.0, 1.0, 0.0, 0.535, 0.0, 0.0]


def test_a_wrong_rollout_never_gets_positive_quality_under_any_gcpo_mapping():
    rewards = torch.tensor([-1.0, -0.5, 0.0, -3.0])
    for name in ("binary", "clip", "sqrt"):
        assert torch.all(quality_from_rewards(rewards, name) == 0), name
    # "none" is the ablation without quality coupling: everyone weighs 1, whatever the reward
    assert quality_from_rewards(rewards, "none").tolist() == [1.0] * 4


def test_soft_scores_are_clipped_or_square_rooted():
    rewards = torch.tensor([-0.2, 0.25, 0.64, 1.7])
    assert quality_from_rewards(rewards, "clip").tolist() == pytest.approx([0.0, 0.25, 0.64, 1.0])
    assert quality_from_rewards(rewards, "sqrt").tolist() == pytest.approx([0.0, 0.5, 0.8, 1.0])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_rewards_are_rejected(bad):
    with pytest.raises(ValueError, match="rewards must be finite; 1 value"):
        quality_from_rewards(torch.tensor([1.0, bad, 0.0]))


def test_unknown_mapping_names_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed: binary, clip, none, sqrt"):
        quality_from_rewards(torch.tensor([1.0]), "square")


def test_integer_rewards_are_accepted():
    assert quality_from_rewards(torch.tensor([0, 1, -1])).tolist() == [0.0, 1.0, 0.0]
