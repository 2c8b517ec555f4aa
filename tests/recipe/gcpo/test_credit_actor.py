"""The credit actor on a local CPU Ray cluster with the real encoder."""

import dataclasses
import json
import os
import signal
import threading
import time

import numpy as np
import pytest
import ray
from ray.util.placement_group import placement_group, remove_placement_group

from gcpo_core.cli.demo import load_demo_rollouts
from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.encoder import EncoderConfig
from recipe.gcpo.credit_actor import CreditActor, CreditActorTimeout
from recipe.gcpo.settings import CreditActorOptions, build_section

CPU_ONLY = CreditActorOptions(num_gpus=0, num_cpus=1, startup_timeout_s=120, timeout_s=300)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}}
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def batch():
    rows = load_demo_rollouts()
    return (
        [r["text"] for r in rows],
        [0.0 if i in (0, 5, 6) else 1.0 for i in range(len(rows))],
        [r["group"] for r in rows],
    )


def _long_batch(shared_data, copies=2):
    rows = [json.loads(line) for line in (shared_data / "math500.jsonl").read_text().splitlines()[:24]]
    texts = [r["solution"] for r in rows] * copies
    groups = [f"g{i // 8}-{i // len(rows)}" for i in range(len(texts))]
    return texts, [float(i % 3 != 0) for i in range(len(texts))], groups


def test_actor_returns_the_pipelines_credit(local_ray, batch, minilm):
    from gcpo_core.encoding.pipeline import credit_rollouts

    actor = CreditActor(credit=CreditConfig(method="exact"), options=CPU_ONLY)
    try:
        assert actor.info["device"] == "cpu"
        result = actor.compute(*batch, expected_group_size=6)
        direct = credit_rollouts(*batch, minilm, CreditConfig(method="exact"))
        np.testing.assert_allclose(result.advantage, direct.advantage, atol=1e-5)
        np.testing.assert_allclose(result.shapley, direct.shapley, atol=1e-6)
        assert result.metrics["gcpo/incomplete_groups"] == 2.0  # sprints and sheep have 5 and 4 of 6
        assert result.timings["total"] >= result.timings["embed"] > 0
    finally:
        actor.shutdown()


def test_padding_rows_are_skipped_and_errors_keep_their_type(local_ray, batch):
    texts, rewards, groups = batch
    actor = CreditActor(options=CPU_ONLY)
    try:
        padded = actor.compute(
            texts + ["pad"], rewards + [1.0], groups + ["pad-uid"], valid=[True] * len(texts) + [False]
        )
        plain = actor.compute(texts, rewards, groups)
        np.testing.assert_array_equal(padded.advantage[:-1], plain.advantage)
        assert padded.advantage[-1] == 0.0
        with pytest.raises(ValueError, match="grouped by their prompt's uid"):
            actor.compute(texts, rewards, ["one-uid"] * len(texts), expected_group_size=4)
    finally:
        actor.shutdown()


def test_killed_mid_call_the_actor_restarts_and_the_call_returns_the_identical_result(local_ray, shared_data):
    texts, rewards, groups = _long_batch(shared_data)
    actor = CreditActor(options=CPU_ONLY)
    try:
        expected = actor.compute(texts, rewards, groups)
        first_pid = actor.info["pid"]
        ref = actor.handle.compute.remote(texts, rewards, groups, None, None, False)
        time.sleep(1.0)
        ready, _ = ray.wait([ref], timeout=0)
        assert not ready, "the call finished before it could be interrupted; use a longer batch"
        os.kill(first_pid, signal.SIGKILL)  # what the OOM killer or a lost node does
        result = ray.get(ref, timeout=300)
        assert ray.get(actor.handle.info.remote())["pid"] != first_pid
        for name in ("shapley", "advantage", "quality"):
            np.testing.assert_array_equal(getattr(result, name), getattr(expected, name))
    finally:
        actor.shutdown()


def _stall_encoder(worker):
    """Run inside the actor: every later encode sleeps far past any time-out (a hung GPU, a stuck driver)."""

    def stalled(*args, **kwargs):
        time.sleep(3600)

    worker.encoder.encode = stalled


def test_a_call_past_the_time_out_restarts_the_actor_so_the_next_call_does_not_queue_behind_it(local_ray, batch):
    actor = CreditActor(options=dataclasses.replace(CPU_ONLY, timeout_s=2.0))
    try:
        first_pid = actor.info["pid"]
        ray.get(actor.handle.__ray_call__.remote(_stall_encoder))
        with pytest.raises(CreditActorTimeout, match="it was restarted"):
            actor.compute(*batch)
        # a still-running call would hold the actor: this would wait behind its hour-long sleep
        assert ray.get(actor.handle.info.remote(), timeout=60)["pid"] != first_pid
        actor.options = dataclasses.replace(actor.options, timeout_s=300.0)
        assert np.isfinite(actor.compute(*batch).advantage).all()
    finally:
        actor.shutdown()


def test_a_slow_call_times_out_with_a_clear_error(local_ray, shared_data):
    texts, rewards, groups = _long_batch(shared_data)
    actor = CreditActor(options=CreditActorOptions(num_gpus=0, num_cpus=1, timeout_s=0.5, startup_timeout_s=120))
    try:
        with pytest.raises(CreditActorTimeout, match=r"did not return credit for 48 rollouts within 0 s|within 1 s"):
            actor.compute(texts, rewards, groups)
    finally:
        actor.shutdown()


def test_placement_inside_a_group_that_reserves_everything(local_ray, batch):
    # verl's placement groups reserve every GPU; here a group reserves both CPUs of the local cluster
    pg = placement_group([{"CPU": 2}])
    ray.get(pg.ready(), timeout=60)
    try:
        with pytest.raises(CreditActorTimeout, match="not ready within 5 s"):
            CreditActor(options=CreditActorOptions(num_gpus=0, num_cpus=1, startup_timeout_s=5))
        # not waited for at construction (the trainer's way): the same error, from the first wait
        unplaced = CreditActor(options=CreditActorOptions(num_gpus=0, num_cpus=1, startup_timeout_s=5), wait=False)
        with pytest.raises(CreditActorTimeout, match="not ready within 5 s"):
            unplaced.wait_ready()
        inside = CreditActor(options=CPU_ONLY, placements=[(pg, 0)])
        try:
            assert inside.compute(*batch).advantage.shape == (len(batch[0]),)
        finally:
            inside.shutdown()
    finally:
        remove_placement_group(pg)


def test_an_actor_not_waited_for_starts_in_the_background_and_takes_calls(local_ray, batch):
    started = time.monotonic()
    actor = CreditActor(credit=CreditConfig(method="exact"), options=CPU_ONLY, wait=False)
    returned_after = time.monotonic() - started
    try:
        # the encoder loads in the actor's process while the caller goes on; a prefetch queues behind it
        actor.start_prefetch(batch[0])
        infos = actor.wait_ready()
        assert returned_after < time.monotonic() - started  # the wait, not the construction, took the start-up
        assert infos[0]["device"] == "cpu" and actor.info is infos[0] and actor.wait_ready() is infos
        result = actor.compute(*batch)
        assert result.timings["embed_prefetch"] > 0.0 and result.metrics["gcpo/encoder/prefetched_frac"] == 1.0
    finally:
        actor.shutdown()


def test_a_prefetched_batch_is_credited_as_a_plain_call_credits_it(local_ray, batch):
    actor = CreditActor(encoder=EncoderConfig(device="cpu"), options=CPU_ONLY)
    try:
        plain = actor.compute(*batch, seed=3)
        assert plain.metrics["gcpo/encoder/prefetched_frac"] == 0.0 and plain.timings["embed_prefetch"] == 0.0
        actor.start_prefetch(batch[0])
        prefetched = actor.compute(*batch, seed=3)
        assert prefetched.metrics["gcpo/encoder/prefetched_frac"] == 1.0
        assert prefetched.timings["embed_prefetch"] > 0
        for name in ("shapley", "advantage", "quality", "score"):
            np.testing.assert_array_equal(getattr(prefetched, name), getattr(plain, name))
    finally:
        actor.shutdown()


def test_a_failed_prefetch_is_logged_and_the_credit_call_embeds_the_batch(local_ray, batch, caplog):
    actor = CreditActor(options=CPU_ONLY)
    try:
        actor.start_prefetch(batch[0][:-1] + [None])  # the actor's encoder refuses a non-text
        with caplog.at_level("WARNING", logger="recipe.gcpo.credit_actor"):
            result = actor.compute(*batch)
        assert "prefetch failed" in caplog.text and "not str" in caplog.text
        assert result.metrics["gcpo/encoder/prefetched_frac"] == 0.0
        assert np.isfinite(result.advantage).all()
    finally:
        actor.shutdown()


def test_bad_configs_fail_where_they_are_built_before_any_actor_starts():
    # the actors receive the settings objects as they are: each validates itself when it is built, in the driver
    with pytest.raises(ValueError, match="long_text must be one of"):
        EncoderConfig(long_text="middle")
    with pytest.raises(ValueError, match="unknown key"):
        build_section(CreditConfig, {"method": "exact", "permutation": 3}, "algorithm.gcpo.credit")
    with pytest.raises(ValueError, match="num_gpus must be in"):
        CreditActorOptions(num_gpus=-1)
    with pytest.raises(ValueError, match="prefetch must be true or false"):
        CreditActorOptions(prefetch="yes")
    with pytest.raises(ValueError, match="shards must be an integer >= 1 or one of"):
        CreditActorOptions(shards=0)
    with pytest.raises(ValueError, match="shards must be an integer >= 1 or one of"):
        CreditActorOptions(shards="per_rack")
    with pytest.raises(ValueError, match="num_cpus must be 0 or >= 1"):
        CreditActorOptions(num_cpus=0.5)
    with pytest.raises(ValueError, match="timeout_s must be a finite number > 0"):
        CreditActorOptions(timeout_s="soon")


def _distinct_batch(shared_data, rows=96, group=8):
    """``rows`` distinct MATH solutions (lengths from one line to pages), grouped by ``group``."""
    records = [json.loads(line) for line in (shared_data / "math500.jsonl").read_text().splitlines()[:rows]]
    texts = [r["solution"] for r in records]
    return texts, [float(i % 3 != 0) for i in range(len(texts))], [f"g{i // group}" for i in range(len(texts))]


def test_sharded_actors_credit_a_batch_as_one_actor_does_even_when_a_shard_is_killed_mid_call(local_ray, shared_data):
    texts, rewards, groups = _distinct_batch(shared_data)
    valid = [i != 5 for i in range(len(texts))]  # a padding row
    single = CreditActor(options=CPU_ONLY)
    try:
        expected = single.compute(texts, rewards, groups, valid=valid, expected_group_size=8, seed=7)
    finally:
        single.shutdown()

    sharded = CreditActor(options=dataclasses.replace(CPU_ONLY, shards=2))
    try:
        assert sharded.shards == 2 and len({info["pid"] for info in sharded.wait_ready()}) == 2
        calm = sharded.compute(texts, rewards, groups, valid=valid, expected_group_size=8, seed=7)
        # the same credit, in row order (embeddings differ only by float rounding: other forward batches)
        for name in ("shapley", "advantage"):
            np.testing.assert_allclose(getattr(calm, name), getattr(expected, name), atol=1e-5)
        np.testing.assert_array_equal(calm.quality, expected.quality)
        assert calm.advantage[5] == 0.0
        assert calm.metrics["gcpo/encoder/shards"] == 2.0
        assert calm.metrics["gcpo/encoder/texts"] == expected.metrics["gcpo/encoder/texts"] == 95.0
        assert calm.metrics["gcpo/encoder/shard_pieces_max_over_mean"] < 1.25
        with pytest.raises(ValueError, match="grouped by their prompt's uid"):
            sharded.compute(texts, rewards, ["one-uid"] * len(texts), expected_group_size=8)

        victim = sharded.wait_ready()[1]["pid"]
        out = {}
        call = threading.Thread(
            target=lambda: out.update(
                result=sharded.compute(texts, rewards, groups, valid=valid, expected_group_size=8, seed=7)
            )
        )
        call.start()
        time.sleep(1.5)
        assert call.is_alive(), "the call finished before a shard could be killed; use a longer batch"
        os.kill(victim, signal.SIGKILL)  # what the OOM killer or a lost node does
        call.join(timeout=300)
        assert not call.is_alive() and "result" in out
        assert ray.get(sharded.handles[1].info.remote(), timeout=60)["pid"] != victim
        for name in ("shapley", "advantage", "quality", "score"):
            np.testing.assert_array_equal(getattr(out["result"], name), getattr(calm, name))
    finally:
        sharded.shutdown()


def test_sharded_prefetch_is_looked_up_by_every_shard(local_ray, batch):
    sharded = CreditActor(options=dataclasses.replace(CPU_ONLY, shards=2))
    try:
        plain = sharded.compute(*batch, seed=3)
        sharded.start_prefetch(batch[0])
        prefetched = sharded.compute(*batch, seed=3)
        assert prefetched.metrics["gcpo/encoder/prefetched_frac"] == 1.0
        assert prefetched.timings["embed_prefetch"] > 0
        for name in ("shapley", "advantage", "score"):
            np.testing.assert_array_equal(getattr(prefetched, name), getattr(plain, name))
    finally:
        sharded.shutdown()


def test_each_actor_sizes_its_threads_from_the_cpus_ray_gave_it(local_ray):
    actor = CreditActor(options=dataclasses.replace(CPU_ONLY, num_cpus=2))
    try:
        assert actor.info["threads"] == 2
        env = ray.get(actor.handle.__ray_call__.remote(lambda w: os.environ["RAYON_NUM_THREADS"]))
        assert env == "2"
    finally:
        actor.shutdown()
    actor = CreditActor(options=CPU_ONLY)
    try:
        assert actor.info["threads"] == 1
    finally:
        actor.shutdown()


def test_an_actor_that_does_not_fit_its_bundle_is_refused_in_the_driver(local_ray):
    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=60)
    try:
        with pytest.raises(ValueError, match="num_cpus=2 does not fit placement-group bundle 0, which has 1"):
            CreditActor(options=dataclasses.replace(CPU_ONLY, num_cpus=2), placements=[(pg, 0)])
    finally:
        remove_placement_group(pg)


def test_the_warm_up_changes_no_later_result(local_ray, batch):
    from recipe.gcpo.credit_actor import CreditWorker

    worker = ray.remote(CreditWorker).options(num_cpus=1)
    args = (EncoderConfig(device="cpu"), CreditConfig(method="exact"))
    cold, warm = worker.remote(*args), worker.remote(*args)
    try:
        ray.get(warm.warm_up.remote())  # a worker on a GPU does this at start-up; on the CPU, by hand here
        a, b = ray.get([cold.compute.remote(*batch, seed=3), warm.compute.remote(*batch, seed=3)])
        np.testing.assert_allclose(a.advantage, b.advantage, atol=1e-6)
        np.testing.assert_allclose(a.shapley, b.shapley, atol=1e-6)
    finally:
        for handle in (cold, warm):
            ray.kill(handle)
