import math

import numpy as np
import torch

from gcpo_core.credit.shapley.exact import exact_shapley
from gcpo_core.credit.shapley.leave_one_out import leave_one_out_credit


def test_leave_one_out_undercounts_redundant_rollouts_and_is_not_conservative():
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    L = (emb @ emb.T)[None]
    loo, _ = leave_one_out_credit(L)
    phi, _ = exact_shapley(L)
    assert torch.all(loo[0, :2] < phi[0, :2])
    assert float(loo.sum()) < float(phi.sum())


def test_two_copies_each_get_log_one_and_a_half_and_their_class_shares_it_bit_for_bit():
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    L = (emb @ emb.T)[None]
    credit, stderr = leave_one_out_credit(L, classes=torch.tensor([[0, 0, 1]]))
    np.testing.assert_allclose(credit[0].numpy(), [math.log(1.5), math.log(1.5), math.log(2.0)], atol=1e-14)
    assert credit[0, 0] == credit[0, 1] and torch.all(stderr == 0)
