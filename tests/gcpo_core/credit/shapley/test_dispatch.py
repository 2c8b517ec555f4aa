import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import gcpo_core.credit.shapley.dispatch as dispatch_module
import gcpo_core.credit.shapley.memory as memory_module
from gcpo_core.credit.shapley.dispatch import shapley_values
from tests.gcpo_core.credit.shapley.games import batched, games, groups_with_copies
from tests.gcpo_core.examples import run_examples
from tests.gcpo_core.helpers import clustered_embeddings, team_value_np

LOG2 = math.log(2.0)


def test_the_example_runs():
    run_examples(shapley_values)


@given(games())
def test_efficiency_sum_of_credit_is_team_value(game):
    total = team_value_np(game.L, range(len(game.L)))
    for method in ("exact", "mc"):
        result = shapley_values(*batched(game.L, game.quality), method=method, permutations=16)
        assert float(result.values.sum()) == pytest.approx(total, abs=1e-10)


@given(games(plant_null=True))
def test_null_players_get_exactly_zero_and_credit_is_non_negative(game):
    for method in ("exact", "mc", "loo"):
        values = shapley_values(*batched(game.L, game.quality), method=method, permutations=8).values[0].numpy()
        assert values[game.null] == 0.0  # the planted one: every example has one
        assert np.all(values[game.quality == 0] == 0.0)
        assert np.all(values >= -1e-12)


def _symmetric_pairs(L: np.ndarray) -> list[tuple[int, int]]:
    """Players i < j whose swap leaves L unchanged, bit for bit."""
    n = len(L)
    pairs = []
    for i in range(n):
        for j in range(i + 1, n):
            swap = list(range(n))
            swap[i], swap[j] = j, i
            if np.array_equal(L[np.ix_(swap, swap)], L):
                pairs.append((i, j))
    return pairs


@given(games(plant_copy=True))
def test_symmetric_players_get_identical_credit(game):
    values = shapley_values(*batched(game.L, game.quality), method="exact").values[0].numpy()
    pairs = _symmetric_pairs(game.L)
    assert game.copy in pairs  # the planted pair of contributing copies: every example has one
    for i, j in pairs:
        assert values[i] == pytest.approx(values[j], abs=1e-12)


def test_known_values_two_duplicates_one_distinct_one_wrong():
    # the worked example of the method note: phi = (log 1.5 + ...) = 0.549, 0.549, log 2, 0; sum = log 6
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    quality = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    L = (quality[:, None] * (emb @ emb.T) * quality[None, :])[None]
    result = shapley_values(L, (quality > 0)[None], method="exact")
    expected = [0.5 * (LOG2 + math.log(1.5)), 0.5 * (LOG2 + math.log(1.5)), LOG2, 0.0]
    np.testing.assert_allclose(result.values[0].numpy(), expected, atol=1e-12)
    assert float(result.values.sum()) == pytest.approx(math.log(6.0))
    loo = shapley_values(L, (quality > 0)[None], method="loo").values[0].numpy()
    np.testing.assert_allclose(loo, [math.log(1.5), math.log(1.5), LOG2, 0.0], atol=1e-12)


def test_auto_uses_exact_up_to_the_limit_and_mc_beyond():
    rng = np.random.default_rng(4)
    emb = torch.from_numpy(clustered_embeddings(rng, groups=2, size=6))
    L = emb @ emb.transpose(-1, -2)
    mask = torch.tensor([[True] * 3 + [False] * 3, [True] * 6])
    result = shapley_values(L, mask, method="auto", exact_max_contributors=4)
    assert result.methods == ["exact", "mc"]
    assert torch.all(result.stderr[0] == 0) and torch.all(result.stderr[1] > 0)


def test_buckets_by_number_of_contributors_give_the_same_credit_as_solving_each_group_alone():
    rng = np.random.default_rng(5)
    emb = torch.from_numpy(clustered_embeddings(rng, groups=6, size=7))
    L = emb @ emb.transpose(-1, -2)
    mask = torch.from_numpy(rng.random((6, 7)) < 0.6)
    batched_values = shapley_values(L, mask, method="exact").values
    for g in range(6):
        alone = shapley_values(L[g : g + 1], mask[g : g + 1], method="exact").values
        torch.testing.assert_close(batched_values[g : g + 1], alone, rtol=0, atol=1e-13)


def test_large_groups_are_chunked_without_changing_the_result(monkeypatch):
    rng = np.random.default_rng(6)
    emb = torch.from_numpy(clustered_embeddings(rng, groups=5, size=9))
    L = emb @ emb.transpose(-1, -2)
    mask = torch.ones(5, 9, dtype=torch.bool)
    whole = shapley_values(L, mask, method="exact").values
    monkeypatch.setattr(memory_module, "CHUNK_BYTES", 1)  # one group per chunk
    torch.testing.assert_close(shapley_values(L, mask, method="exact").values, whole, rtol=0, atol=1e-13)


def test_unknown_method_is_rejected():
    L = torch.eye(2, dtype=torch.float64)[None]
    with pytest.raises(ValueError, match="allowed: auto, exact, mc, loo"):
        shapley_values(L, torch.ones(1, 2, dtype=torch.bool), method="banzhaf")


@pytest.mark.parametrize("method", ["exact", "mc"])
def test_padding_games_with_null_players_as_on_a_gpu_changes_nothing_exact_and_keeps_mc_unbiased(monkeypatch, method):
    rng = np.random.default_rng(7)
    emb = torch.from_numpy(clustered_embeddings(rng, groups=40, size=12))
    L = emb @ emb.transpose(-1, -2)
    contributing = torch.from_numpy(rng.random((40, 12)) < 0.5)
    q = contributing.double()
    L = q[:, :, None] * L * q[:, None, :]
    exact = shapley_values(L, contributing, method="exact").values
    monkeypatch.setattr(dispatch_module, "_game_size", lambda c, g, device, largest: min(g, -(-c // 4) * 4))
    padded = shapley_values(L, contributing, method=method, permutations=256)
    assert torch.all(padded.values[~contributing] == 0) and torch.all(padded.stderr[~contributing] == 0)
    torch.testing.assert_close(padded.values.sum(1), exact.sum(1), rtol=0, atol=1e-10)  # efficiency
    if method == "exact":
        torch.testing.assert_close(padded.values, exact, rtol=0, atol=1e-12)
    else:
        rel = ((padded.values - exact).abs()[contributing] / exact[contributing]).mean()
        assert rel < 0.01


def test_gpu_padding_stops_at_the_exact_limit_and_never_drops_a_contributor():
    cuda = torch.device("cuda")
    assert dispatch_module._game_size(21, 32, cuda, largest=22) == 22  # not 24
    assert dispatch_module._game_size(13, 32, cuda, largest=16) == 16
    assert dispatch_module._game_size(17, 32, cuda, largest=16) == 17  # never fewer than the contributors
    assert dispatch_module._game_size(5, 32, torch.device("cpu"), largest=16) == 5


# ------------------------------------------------------------------- identical rollouts, row order, honesty


def _identical_pairs(L: torch.Tensor) -> list[tuple[int, int, int]]:
    """(group, i, j), i < j, of every two slots whose rows of L are identical bit for bit."""
    rows = L.numpy()
    return [
        (b, i, j)
        for b in range(rows.shape[0])
        for i in range(rows.shape[1])
        for j in range(i + 1, rows.shape[1])
        if np.array_equal(rows[b, i], rows[b, j])
    ]


@given(groups_with_copies(), st.sampled_from(["exact", "mc", "loo", "auto"]), st.integers(0, 3))
def test_identical_rollouts_get_identical_credit_bit_for_bit_under_every_method_and_seed(game, method, seed):
    L, contributing, planted = game
    result = shapley_values(L, contributing, method=method, permutations=8, seed=seed, exact_max_contributors=3)
    pairs = _identical_pairs(L)
    assert set(planted) <= set(pairs)  # a pair of contributing copies in every group of every example
    for b, i, j in pairs:
        assert result.values[b, i] == result.values[b, j]
        assert result.stderr[b, i] == result.stderr[b, j]


def test_twenty_identical_correct_rollouts_share_their_credit_exactly_and_are_solved_exactly():
    # the example: 20 copies of one correct solution; mc gave them advantages from -1.81 to +1.63
    L = torch.ones(1, 20, 20, dtype=torch.float64)
    contributing = torch.ones(1, 20, dtype=torch.bool)
    for method in ("auto", "mc"):
        result = shapley_values(L, contributing, method=method, permutations=64)
        assert torch.all(result.values == result.values[0, 0])
        assert float(result.values.sum()) == pytest.approx(math.log(21.0), abs=1e-12)
    # one class of 20 copies is 21 coalitions: auto solves it exactly, however many copies
    assert shapley_values(L, contributing, method="auto").methods == ["exact"]


@pytest.mark.parametrize("method", ["exact", "mc", "auto", "loo"])
def test_eighteen_copies_one_distinct_one_wrong_copies_agree_under_every_method(method):
    # the issue's example: the 18 copies' mc advantages spread from -0.07 to -0.19. Through compute_credit:
    # a matrix product does not always give identical rows of L for identical embeddings, so the classes of
    # identical rollouts come from the embeddings and rewards themselves
    from gcpo_core.credit.compute import compute_credit
    from gcpo_core.credit.config import CreditConfig

    emb = torch.tensor([[1.0, 0.2, 0.1]] * 18 + [[0.1, 1.0, 0.3], [0.5, 0.5, 0.5]], dtype=torch.float64)
    rewards = [1.0] * 19 + [0.0]
    result = compute_credit(rewards, emb, ["p"] * 20, CreditConfig(method=method, permutations=32))
    assert torch.all(result.shapley[:18] == result.shapley[0]) and result.shapley[19] == 0
    assert torch.all(result.advantage[:18] == result.advantage[0])
    exact = compute_credit(rewards, emb, ["p"] * 20, CreditConfig(method="exact")).shapley
    if method != "loo":
        assert float(result.shapley.sum()) == pytest.approx(float(result.groups.team_value[0]), abs=1e-10)
        assert float((result.shapley - exact).abs().max()) < (0.01 if method == "mc" else 1e-12)


@pytest.mark.parametrize("method", ["exact", "mc", "loo"])
def test_the_same_groups_in_another_row_and_group_order_get_the_same_credit(method):
    rng = np.random.default_rng(12)
    emb = clustered_embeddings(rng, 5, 9, dim=8)
    emb[:, 4] = emb[:, 1]  # a copy in every group
    L = torch.from_numpy(np.einsum("bid,bjd->bij", emb, emb))
    contributing = torch.from_numpy(rng.random((5, 9)) < 0.8)
    base = shapley_values(L, contributing, method=method, permutations=16, seed=4)
    groups = torch.from_numpy(rng.permutation(5))
    rows = torch.stack([torch.from_numpy(rng.permutation(9)) for _ in range(5)])
    shuffled_L = torch.stack([L[g][rows[k]][:, rows[k]] for k, g in enumerate(groups)])
    shuffled_mask = torch.stack([contributing[g][rows[k]] for k, g in enumerate(groups)])
    shuffled = shapley_values(shuffled_L, shuffled_mask, method=method, permutations=16, seed=4)
    for k, g in enumerate(groups):
        torch.testing.assert_close(shuffled.values[k], base.values[g][rows[k]], rtol=0, atol=1e-12)
        torch.testing.assert_close(shuffled.stderr[k], base.stderr[g][rows[k]], rtol=0, atol=1e-12)
