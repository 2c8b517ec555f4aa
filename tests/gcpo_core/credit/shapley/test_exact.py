import math

import numpy as np
import pytest
import torch
from hypothesis import given

import gcpo_core.credit.shapley.exact as exact_module
from gcpo_core.credit.shapley.dispatch import shapley_values
from gcpo_core.credit.shapley.exact import exact_shapley, shapley_from_subset_values, subset_team_values
from tests.gcpo_core.credit.shapley.games import batched, games
from tests.gcpo_core.helpers import brute_force_shapley, clustered_embeddings, team_value_np

LOG2 = math.log(2.0)


@given(games())
def test_exact_equals_brute_force_definition(game):
    result = shapley_values(*batched(game.L, game.quality), method="exact")
    np.testing.assert_allclose(result.values[0].numpy(), brute_force_shapley(game.L), atol=1e-10)


def test_subset_values_match_direct_log_dets():
    rng = np.random.default_rng(0)
    emb = clustered_embeddings(rng, groups=3, size=6)
    L = np.einsum("bid,bjd->bij", emb, emb)
    values = subset_team_values(torch.from_numpy(L)).numpy()
    for b in range(3):
        for mask in range(2**6):
            members = [i for i in range(6) if mask >> i & 1]
            assert values[b, mask] == pytest.approx(team_value_np(L[b], members), abs=1e-12)


def test_one_correct_rollout_is_worth_log_two_and_orthogonal_ones_each_log_two():
    L = torch.eye(5, dtype=torch.float64)[None]
    phi, _ = exact_shapley(L)
    np.testing.assert_allclose(phi.numpy(), LOG2, atol=1e-14)
    single = shapley_values(L, torch.tensor([[True, False, False, False, False]]), method="exact")
    assert single.values[0].tolist() == pytest.approx([LOG2, 0, 0, 0, 0])


def test_exact_refuses_games_too_large_to_enumerate():
    L = torch.eye(23, dtype=torch.float64)[None]
    with pytest.raises(ValueError, match=r"at most 2\^22 \(= 22 distinct players\) are solved exactly"):
        shapley_values(L, torch.ones(1, 23, dtype=torch.bool), method="exact")
    with pytest.raises(ValueError, match=r"at most 2\^22 \(= 22 distinct players\) are solved exactly"):
        exact_shapley(L)


def test_shapley_from_subset_values_matches_the_weighted_definition_for_a_known_game():
    # v(S) = |S|^2 over 3 players: symmetric, so each player gets v(all) / 3 = 3
    values = torch.tensor([[float(bin(b).count("1") ** 2) for b in range(8)]], dtype=torch.float64)
    np.testing.assert_allclose(shapley_from_subset_values(values).numpy(), [[3.0, 3.0, 3.0]], atol=1e-14)
    # v(S) = [0 in S] * 5: player 0 gets everything
    values = torch.tensor([[5.0 * (b & 1) for b in range(8)]], dtype=torch.float64)
    np.testing.assert_allclose(shapley_from_subset_values(values).numpy(), [[5.0, 0.0, 0.0]], atol=1e-14)


def test_weight_matrix_blocks_give_the_same_credit_as_one_block(monkeypatch):
    values = torch.from_numpy(np.random.default_rng(9).normal(size=(3, 2**9)))
    whole = shapley_from_subset_values(values)
    monkeypatch.setattr(exact_module, "WEIGHT_BLOCK", 2**5)
    torch.testing.assert_close(shapley_from_subset_values(values), whole, rtol=0, atol=1e-12)


@pytest.mark.parametrize("copies", [[2, 1, 1], [3, 2], [4], [2, 2, 2, 1], [1, 5, 1]])
def test_exact_credit_of_collapsed_classes_equals_the_brute_force_definition(copies):
    rng = np.random.default_rng(sum(copies) * 7 + len(copies))
    base = clustered_embeddings(rng, 1, len(copies), dim=5)[0]
    emb = np.repeat(base, copies, axis=0)
    L = emb @ emb.T
    result = shapley_values(torch.from_numpy(L)[None], torch.ones(1, len(emb), dtype=torch.bool), method="exact")
    np.testing.assert_allclose(result.values[0].numpy(), brute_force_shapley(L), atol=1e-11)


class _CountOps(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("profile", [(1,) * 12, (3, 2, 1, 1)])
def test_the_sweep_adds_each_copy_count_of_a_class_once_for_all_coalitions(profile):
    # on a GPU every batched operation is a kernel launch, and launches, not arithmetic, are what the exact
    # sweep costs: one rank-one update per copy count of each class (sum m_k), not one per earlier level (K^2 / 2)
    rng = np.random.default_rng(1)
    emb = clustered_embeddings(rng, groups=2, size=len(profile))
    L = torch.from_numpy(np.einsum("bid,bjd->bij", emb, emb))
    with _CountOps() as ops:
        values = exact_module.class_team_values(L, profile)
    assert values.shape == (2, math.prod(m + 1 for m in profile))
    assert ops.counts["addcmul"] == sum(profile)
    assert ops.counts["log"] == sum(profile)
