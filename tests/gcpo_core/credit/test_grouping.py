import numpy as np
import torch

from gcpo_core.credit.grouping import layout_groups


def test_groups_by_id_not_by_position_in_order_of_first_appearance():
    layout = layout_groups(["b", "a", "b", "c", "a", "b"])
    assert layout.keys == ["b", "a", "c"]
    assert layout.index.tolist() == [[0, 2, 5], [1, 4, -1], [3, -1, -1]]
    assert layout.group_sizes.tolist() == [3, 2, 1]


def test_gather_then_scatter_round_trips_and_pads_with_fill():
    layout = layout_groups([1, 2, 1, 2, 2])
    values = torch.arange(5, dtype=torch.float64) + 10
    padded = layout.gather(values, fill=-1.0)
    assert padded.tolist() == [[10.0, 12.0, -1.0], [11.0, 13.0, 14.0]]
    assert torch.equal(layout.scatter(padded), values)
    vectors = torch.arange(10, dtype=torch.float64).view(5, 2)
    assert torch.equal(layout.scatter(layout.gather(vectors)), vectors)


def test_numpy_object_ids_from_verl_group_like_python_values():
    uids = np.array(["u1", "u2", "u1"], dtype=object)
    assert layout_groups(uids).keys == ["u1", "u2"]
    assert layout_groups(np.array([3, 3, 4])).keys == [3, 4]


def test_empty_batch():
    layout = layout_groups([])
    assert layout.index.shape == (0, 0)
    assert layout.num_rollouts == 0
