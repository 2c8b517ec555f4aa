import math

import numpy as np
import pytest
import torch

from gcpo_core.credit.team_value import quality_weighted_kernel, team_value


def test_orthogonal_correct_solutions_add_log_two_each_and_duplicates_log_one_plus_m():
    eye = torch.eye(4, dtype=torch.float64)
    assert float(team_value(eye)) == pytest.approx(4 * math.log(2))
    duplicates = torch.ones(4, 4, dtype=torch.float64)
    assert float(team_value(duplicates)) == pytest.approx(math.log(5))


def test_wrong_rollouts_add_no_volume():
    K = torch.ones(1, 3, 3, dtype=torch.float64)
    L = quality_weighted_kernel(K, torch.tensor([[1.0, 0.0, 0.0]]))
    assert float(team_value(L)) == pytest.approx(math.log(2))
    assert torch.all(L[0, 1:] == 0) and torch.all(L[0, :, 1:] == 0)


def test_matches_numpy_slogdet_and_is_batched():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(5, 6, 3))
    emb /= np.linalg.norm(emb, axis=-1, keepdims=True)
    q = rng.random((5, 6))
    L = quality_weighted_kernel(torch.from_numpy(emb @ emb.transpose(0, 2, 1)), torch.from_numpy(q))
    expected = [np.linalg.slogdet(np.eye(6) + L[b].numpy())[1] for b in range(5)]
    np.testing.assert_allclose(team_value(L).numpy(), expected, rtol=1e-12)
