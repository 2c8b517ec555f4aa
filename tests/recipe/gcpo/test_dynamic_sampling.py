"""GCPO with DAPO's dynamic sampling (``algorithm.filter_groups.metric=gcpo_signal``,
``scripts/run_qwen3_4b_gcpo_dynamic.sh``): verl 0.9.1's own replay buffer, on a local TransferQueue, filters
groups on the recipe reward's ``gcpo_signal`` read from each trajectory's ``reward_extra_info`` (where verl's DAPO
reward manager puts every key the reward function returns), keeping the all-correct groups of different
solutions that DAPO's ``acc`` filter drops."""

import pytest
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from recipe.gcpo.reward import compute_score

GROUPS = {  # uid: responses to "what is 1 + 1?" (answer 2)
    "mixed": ["So the answer is \\boxed{2}.", "The answer is \\boxed{3}."],
    "right-different": ["1 + 1 = 2, so \\boxed{2}.", "Adding one to one gives \\boxed{2}."],
    "right-same": ["The answer is \\boxed{2}.", "The answer is \\boxed{2}."],
    "wrong": ["The answer is \\boxed{3}.", "It is \\boxed{11}."],
}


def _put_finished(groups):
    """Groups in TransferQueue as verl's agent loop leaves finished rollouts: a prompt entry per uid and one
    trajectory per response with the reward manager's ``reward_extra_info``."""
    keys, fields, tags = [], [], []
    for uid, responses in groups.items():
        for session, text in enumerate(responses):
            info = compute_score("math", text, "2")
            keys.append(f"{uid}_{session}_0")
            fields.append({"responses": torch.tensor([1, 2]), "extra_fields": {"reward_extra_info": info}})
            tags.append({"status": "success", "global_steps": 1})
    tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
    tq.kv_batch_put(
        keys=list(groups),
        partition_id="train",
        fields=list_of_dict_to_tensordict([{"prompt": torch.tensor([0])} for _ in groups]),
        tags=[{"is_prompt": True, "status": "finished", "global_steps": 1} for _ in groups],
    )


@pytest.fixture(scope="module")
def local_tq():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1, "total_storage_size": 1000}}}))
    yield
    tq.close()
    ray.shutdown()


@pytest.fixture
def finished_groups(local_tq):
    _put_finished(GROUPS)
    yield
    left = (tq.kv_list() or {}).get("train", {})
    if left:
        tq.kv_clear(keys=list(left), partition_id="train")


def _buffer(cls, metric, refills):
    return cls(
        trainer_mode="sync",
        trainer_config=OmegaConf.create({}),
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs=OmegaConf.create({}),
        refill_fn=refills.append,
        filter_groups_metric=metric,
        train_batch_size=2,
        gen_batch_size=1,
        max_inflight_gen_batches=1,
    )


@pytest.mark.parametrize(
    "metric, kept",
    [
        ("gcpo_signal", {"mixed", "right-different"}),
        ("acc", {"mixed"}),
    ],
)
def test_verls_replay_buffer_filters_groups_on_the_metric(finished_groups, metric, kept):
    buffer = _buffer(ReplayBufferAsync, metric, [])
    assert buffer.get_sampleable_count(global_steps=1, partition_id="train") == len(kept)
    buffer._sync_metadata_from_transfer_queue()
    filtered, _ = buffer._dapo_filtered_keys("train")  # the classification both of verl's buffers use
    assert filtered == set(GROUPS) - kept


def test_the_sync_buffer_trains_on_the_groups_with_gcpo_signal_and_refills_the_rest(finished_groups):
    refills = []

    def refill(count):  # what verl's trainer does: generate `count` new prompts (here: already finished)
        refills.append(count)
        _put_finished(
            {f"fresh{i}": [f"Prompt {i}: one and one make \\boxed{{2}}.", "\\boxed{2}"] for i in range(count)}
        )

    buffer = _buffer(ReplayBuffer, "gcpo_signal", [])
    buffer.refill_fn = refill
    buffer.train_batch_size = 3
    batch, metrics = buffer.sample(1, "train", batch_size=3)
    trained = {key.split("_")[0] for key in batch.keys}
    assert len(trained) == 3 and trained <= {"mixed", "right-different", "fresh0", "fresh1", "fresh2"}
    # refilled: twice the 2 dropped groups (verl's refill credit), at most the 3 prompts allowed in flight
    assert refills == [3]
    assert metrics["training/filter_groups/evicted_samples"] == 2
