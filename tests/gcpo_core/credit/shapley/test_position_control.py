import itertools

import numpy as np
import torch

from gcpo_core.credit.shapley.exact import exact_shapley
from gcpo_core.credit.shapley.position_control import control_mean, position_control
from tests.gcpo_core.helpers import clustered_embeddings, team_value_np


def _mean_marginals_by_position(L: np.ndarray) -> np.ndarray:
    """(c, c): the mean marginal of player i at position p over the (c - 1)! orders that put it there."""
    c = len(L)
    total = np.zeros((c, c))
    orders = list(itertools.permutations(range(c)))
    for order in orders:
        for position, player in enumerate(order):
            before = list(order[:position])
            total[player, position] += team_value_np(L, before + [player]) - team_value_np(L, before)
    return total / (len(orders) / c)


def test_the_anchors_are_the_exact_mean_marginals_at_the_first_two_and_last_two_positions():
    emb = clustered_embeddings(np.random.default_rng(0), 1, 6, dim=4)[0]
    L = emb @ emb.T
    expected = _mean_marginals_by_position(L)
    first, second, before_last, last = (a[0].numpy() for a in position_control(torch.from_numpy(L)[None]))
    for anchor, position in ((first, 0), (second, 1), (before_last, 4), (last, 5)):
        np.testing.assert_allclose(anchor, expected[:, position], atol=1e-12)


def test_with_four_players_every_position_is_an_anchor_and_the_control_mean_is_the_shapley_value():
    emb = torch.from_numpy(clustered_embeddings(np.random.default_rng(1), 3, 4))
    L = emb @ emb.transpose(-1, -2)
    exact, _ = exact_shapley(L)
    torch.testing.assert_close(control_mean(position_control(L), 4, budget=2**20), exact, rtol=0, atol=1e-12)
