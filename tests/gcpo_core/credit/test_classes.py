import numpy as np
import torch

from gcpo_core.credit.classes import (
    class_mean,
    class_statistics,
    classes_of_game,
    dense_ranks,
    first_of_class,
)
from tests.gcpo_core.helpers import clustered_embeddings


def _game_with_copies(seed=0, size=7):
    rng = np.random.default_rng(seed)
    emb = clustered_embeddings(rng, 1, size, dim=5)[0]
    emb[3] = emb[0]
    emb[5] = emb[0]  # a class of three
    emb[6] = emb[2]  # a class of two
    L = (emb[:, None, :] * emb[None, :, :]).sum(-1)  # elementwise: copies get identical rows, bit for bit
    return torch.from_numpy(L)[None]


def test_identical_rows_share_a_class_and_non_contributors_have_none():
    L = _game_with_copies()
    contributing = torch.tensor([[True, True, True, True, True, True, False]])
    classes = classes_of_game(L, contributing)[0].tolist()
    assert classes[0] == classes[3] == classes[5]
    assert classes[6] == -1 and classes[2] not in (classes[0], classes[1], classes[4])
    assert sorted(set(classes) - {-1}) == [0, 1, 2, 3]  # dense ids of the four contributing classes


def test_class_ids_follow_the_content_not_the_row_order():
    L = _game_with_copies()
    contributing = torch.ones(1, 7, dtype=torch.bool)
    base = classes_of_game(L, contributing)[0]
    order = torch.from_numpy(np.random.default_rng(1).permutation(7))
    shuffled = classes_of_game(L[:, order][:, :, order], contributing)[0]
    assert torch.equal(shuffled, base[order])


def test_dense_ranks_keep_the_order_of_the_ids():
    assert dense_ranks(torch.tensor([[5, 2, 5, 9], [0, 0, 7, 3]])).tolist() == [[1, 0, 1, 2], [0, 0, 2, 1]]


def test_class_statistics_rank_classes_by_size_and_name_a_member_of_each():
    classes = torch.tensor([[1, 0, 1, 2, 1, 0, -1]])
    contributing = classes >= 0
    stats = class_statistics(classes, contributing)
    assert stats.sizes[0, :3].tolist() == [2, 3, 1] and int(stats.sizes[0, 3:].sum()) == 0
    assert stats.rank[0, :3].tolist() == [1, 0, 2]  # largest first: class 1 (3 copies), class 0 (2), class 2 (1)
    assert stats.representative[0, :3].tolist() == [0, 1, 3]  # the first slot of classes 1, 0, 2


def test_class_mean_and_first_of_class_give_each_member_one_value_bit_for_bit():
    classes = torch.tensor([[0, 1, 0, 2, 0]])
    values = torch.tensor([[0.1, 0.5, 0.2, 0.7, 0.3]], dtype=torch.float64)
    mean = class_mean(values, classes)
    assert mean[0, 0] == mean[0, 2] == mean[0, 4] and float(mean[0, 0]) == np.mean([0.1, 0.2, 0.3])
    assert mean[0, 1] == 0.5 and mean[0, 3] == 0.7
    assert class_mean(values, None) is values
    first = first_of_class(values, classes, torch.tensor([[True, True, True, True, False]]))
    assert first[0].tolist() == [0.1, 0.5, 0.1, 0.7, 0.3]  # the non-contributing slot keeps its own value
