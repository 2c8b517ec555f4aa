"""MC-GRPO's median-centred advantage against the official trainer's formula, and its edge groups."""

import numpy as np
import pytest
import torch

from gcpo_core.baselines.mc_grpo import median_centred_advantages


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


@pytest.mark.parametrize(
    "rewards",
    [
        [0.0, 0.5, 1.0, 2.0, 3.5],  # graded: MAD 1.0
        [2.0, 0.0, 2.0, 1.0, 0.0, 2.0, 2.5],  # ties at the median: the first tied rollout is the pivot
        [1.0, -1.0, 1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0],  # binary, G + 1 = 9: MAD = 0
    ],
)
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
    assert (
        guarded.abs().max() < 10 and torch.all(guarded[[1, 4, 7]] < 0) and torch.all(guarded[[0, 2, 3, 5, 6, 8]] == 0)
    )
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
