import math

import pytest
import torch

from gcpo_core.credit.compute import compute_credit


def test_effective_solutions_count_distinct_correct_solutions():
    # group a: 3 orthogonal correct -> 3; group b: 4 copies of one solution -> 1; group c: all wrong -> 0
    emb = torch.cat([torch.eye(3), torch.ones(4, 3), torch.eye(3)]).double()
    uids = ["a"] * 3 + ["b"] * 4 + ["c"] * 3
    rewards = [1, 1, 1, 1, 1, 1, 1, 0, 0, 0]
    groups = compute_credit(rewards, emb, uids).groups
    assert groups.effective_solutions.tolist() == pytest.approx([3.0, 1.0, 0.0])
    assert groups.team_value.tolist() == pytest.approx([3 * math.log(2), math.log(5), 0.0])
    assert groups.contributing.tolist() == [3, 4, 0]
    assert groups.share_entropy.tolist() == pytest.approx([math.log(3), math.log(4), 0.0])
    assert groups.all_correct.tolist() == [True, True, False]
    # equal shares in a and b: all-correct but no signal, so not rescued
    assert groups.rescued.tolist() == [False, False, False]


def test_rescued_counts_all_correct_groups_that_now_carry_signal():
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    result = compute_credit([1, 1, 1], emb, ["g"] * 3)
    metrics = result.metrics()
    assert metrics["gcpo/rescued_groups"] == 1.0
    assert metrics["gcpo/rescued_frac_of_all_correct"] == 1.0
    assert metrics["gcpo/exact_groups"] == 1.0


def test_mc_error_is_reported():
    emb = torch.randn(20, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    result = compute_credit([1.0] * 20, emb, ["g"] * 20)
    assert result.groups.methods == ["mc"]
    assert result.metrics()["gcpo/mc_stderr/max"] > 0
