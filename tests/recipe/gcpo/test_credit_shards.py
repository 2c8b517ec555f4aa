"""Which rows each credit shard embeds, and where the shard actors are placed."""

import numpy as np
import pytest
import ray
from ray.util.placement_group import placement_group, remove_placement_group

from recipe.gcpo.credit_shards import credit_placements, estimated_pieces, parse_shards, shard_rows


def test_shards_split_long_responses_evenly_not_rows():
    rng = np.random.default_rng(0)
    # a DAPO-like batch: lognormal lengths, a few very long responses, sorted so a row split would pile them up
    costs = np.sort(np.minimum(rng.lognormal(np.log(3000), 0.6, size=512), 20000))
    for shards in (2, 3, 8):
        plan = shard_rows(costs, shards)
        assert sorted(np.concatenate(plan).tolist()) == list(range(len(costs)))
        loads = np.array([costs[rows].sum() for rows in plan])
        assert loads.max() - loads.min() <= costs.max()
        assert loads.max() / loads.mean() < 1.01
        row_split = np.array([part.sum() for part in np.array_split(costs, shards)])
        assert row_split.max() / row_split.mean() > 1.3  # what splitting by rows would have done


def test_the_split_is_deterministic_and_free_rows_do_not_count():
    costs = np.array([5.0, 0.0, 5.0, 1.0, 0.0, 9.0])
    first, again = shard_rows(costs, 2), shard_rows(costs.copy(), 2)
    assert [r.tolist() for r in first] == [r.tolist() for r in again]
    assert [r.tolist() for r in shard_rows(costs, 1)] == [list(range(6))]
    assert len(shard_rows(np.zeros(0), 3)) == 3


@pytest.mark.parametrize("bad", [np.array([1.0, -1.0]), np.array([np.nan]), np.ones((2, 2))])
def test_bad_costs_are_refused(bad):
    with pytest.raises(ValueError, match="finite non-negative"):
        shard_rows(bad, 2)
    with pytest.raises(ValueError, match="shards must be >= 1"):
        shard_rows(np.ones(3), 0)


def test_estimated_pieces_follow_length_and_stop_at_what_the_encoder_reads():
    est = estimated_pieces(["", "   ", "a" * 400, "b" * 400_000], max_pieces=4000)
    assert est[0] == est[1] == 0.0
    assert est[2] == pytest.approx(100.0)
    assert est[3] == 4000.0


@pytest.mark.parametrize("value", [0, -2, True, 1.5, "per_rack", None])
def test_shards_setting_is_checked(value):
    with pytest.raises(ValueError, match="shards must be an integer >= 1 or one of"):
        parse_shards(value)


@pytest.fixture(scope="module")
def two_nodes_of_two_gpus():
    """verl's global pool shape (one placement group per node, one bundle per GPU), with CPUs standing in."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    groups = [placement_group([{"CPU": 0.5}, {"CPU": 0.5}]) for _ in range(2)]
    ray.get([g.ready() for g in groups], timeout=60)
    yield groups
    for g in groups:
        remove_placement_group(g)
    ray.shutdown()


def test_placements_one_per_gpu_per_node_or_a_count_spread_over_nodes(two_nodes_of_two_gpus):
    a, b = two_nodes_of_two_gpus
    assert credit_placements([a, b], "auto") == [(a, 0), (b, 0), (a, 1), (b, 1)]
    assert credit_placements([a, b], "per_gpu") == credit_placements([a, b], "auto")
    assert credit_placements([a, b], "per_node") == [(a, 0), (b, 0)]
    assert credit_placements([a, b], 1) == [(a, 0)]
    assert credit_placements([a, b], 3) == [(a, 0), (b, 0), (a, 1)]
    with pytest.raises(ValueError, match="shards=5 but the global pool has 4 GPU bundles"):
        credit_placements([a, b], 5)


@pytest.mark.parametrize(
    "override, message",
    [
        ("algorithm.gcpo.actor.shards=banana", "shards: must be an integer >= 1 or one of"),
        ("algorithm.gcpo.actor.shards=0", "shards: must be an integer >= 1 or one of"),
        ("algorithm.gcpo.actor.num_cpus=0.5", "num_cpus: must be 0 or >= 1"),
        ("algorithm.gcpo.encoder.batch_tokens=4", "batch_tokens: must be an integer >= 8"),
        ("algorithm.gcpo.encoder.dtype=int8", "dtype: must be one of"),
    ],
)
def test_the_recipe_config_refuses_bad_encoder_and_shard_values(gcpo_config, override, message):
    from tests.recipe.gcpo.conftest import gcpo_settings

    with pytest.raises(ValueError, match=message):
        gcpo_settings(gcpo_config(["actor_rollout_ref.rollout.n=8", override]))


def test_the_recipe_defaults_shard_one_actor_per_gpu(gcpo_config):
    from tests.recipe.gcpo.conftest import gcpo_settings

    settings = gcpo_settings(gcpo_config(["actor_rollout_ref.rollout.n=8"]))
    assert settings.actor.shards == "auto" and settings.actor.num_cpus == 1
    assert (
        gcpo_settings(gcpo_config(["actor_rollout_ref.rollout.n=8", "algorithm.gcpo.actor.shards=2"])).actor.shards == 2
    )
