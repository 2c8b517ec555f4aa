"""Rules between verl's keys (verl_preflight/rules.py): the estimator's name, how a step's batch splits over the GPUs,
vLLM's context, FSDP's shard groups and the optimizer verl builds; on verl's stock config (8 GPUs, prompts and
responses of 512 tokens)."""

import pytest

from tests.verl_preflight.conftest import VERL_BASE, compose_verl
from verl_preflight import ConfigError, check_config
from verl_preflight.rules import check_estimator

ACTOR = "actor_rollout_ref.actor"
GPUS = "trainer.nnodes x trainer.n_gpus_per_node"

REFUSED = [
    (
        ["actor_rollout_ref.rollout.max_model_len=100"],
        "actor_rollout_ref.rollout.max_model_len: 100 is shorter than one sequence (data.max_prompt_length + "
        "data.max_response_length = 1024): vLLM would refuse the longest prompts or cut the responses; set it >= 1024 "
        "or null (vLLM's default)",
    ),
    (
        [f"{ACTOR}.fsdp_config.fsdp_size=0"],
        f"{ACTOR}.fsdp_config.fsdp_size: must be -1 (all GPUs) or a divisor of the 8 GPUs ({GPUS}), got 0",
    ),
    (
        [f"{ACTOR}.fsdp_config.fsdp_size=3"],
        f"{ACTOR}.fsdp_config.fsdp_size: must be -1 (all GPUs) or a divisor of the 8 GPUs ({GPUS}), got 3",
    ),
    (
        ["actor_rollout_ref.ref.fsdp_config.fsdp_size=0"],
        f"actor_rollout_ref.ref.fsdp_config.fsdp_size: must be -1 (all GPUs) or a divisor of the 8 GPUs ({GPUS}), "
        "got 0",
    ),
    (
        [f"{ACTOR}.optim.optimizer=AdamWW"],
        f"{ACTOR}.optim.optimizer: torch.optim has no optimizer 'AdamWW': did you mean AdamW?",
    ),
    (
        [f"{ACTOR}.optim.optimizer_impl=torch.optimz"],
        f"{ACTOR}.optim.optimizer_impl: no module 'torch.optimz' is importable here (e.g. torch.optim)",
    ),
    (
        [f"{ACTOR}.optim.optimizer_impl=.optim"],  # a relative name: import_module's TypeError
        f"{ACTOR}.optim.optimizer_impl: no module '.optim' is importable here (e.g. torch.optim)",
    ),
    (
        [f"{ACTOR}.optim.optimizer=null"],  # verl calls optimizer.lower()
        f"{ACTOR}.optim.optimizer: must be the name of an optimizer class of torch.optim (e.g. AdamW), got None",
    ),
    (
        [f"{ACTOR}.optim.optimizer_impl=null"],
        f"{ACTOR}.optim.optimizer_impl: must be a module of optimizers (e.g. torch.optim), got None",
    ),
    (
        [f"{ACTOR}.ppo_mini_batch_size=100"],
        f"{ACTOR}.ppo_mini_batch_size: 100 must divide data.train_batch_size=1024: each step is split into "
        "mini-batches of 100 prompts",
    ),
    (
        ["actor_rollout_ref.rollout.tensor_model_parallel_size=3"],
        f"actor_rollout_ref.rollout.tensor_model_parallel_size: 3 must divide the 8 GPUs ({GPUS}): vLLM's engines "
        "each take 3",
    ),
    (
        [f"{ACTOR}.ppo_micro_batch_size_per_gpu=3"],
        f"{ACTOR}.ppo_micro_batch_size_per_gpu: 3 must divide each GPU's share of a mini-batch (256 samples / 8 "
        f"ranks), or use {ACTOR}.use_dynamic_bsz=true",
    ),
    (
        [f"{ACTOR}.use_dynamic_bsz=true", f"{ACTOR}.ppo_max_token_len_per_gpu=1000"],
        f"{ACTOR}.ppo_max_token_len_per_gpu: 1000 is shorter than one sequence (data.max_prompt_length + "
        "data.max_response_length = 1024): dynamic batching cannot fit it",
    ),
]


@pytest.mark.parametrize("overrides, message", REFUSED, ids=[message.partition(":")[0] for _, message in REFUSED])
def test_a_setting_verl_would_fail_on_minutes_in_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as refused:
        check_config(compose_verl(VERL_BASE + overrides), machine_checks=False)
    assert str(refused.value) == message
    assert refused.value.key == message.partition(":")[0]


@pytest.mark.parametrize(
    "overrides",
    [
        ["actor_rollout_ref.rollout.max_model_len=1024"],  # exactly one sequence
        ["actor_rollout_ref.rollout.max_model_len=null"],  # vLLM's default: the model's own
        [f"{ACTOR}.fsdp_config.fsdp_size=4"],  # hybrid groups of 4
        [f"{ACTOR}.fsdp_config.fsdp_size=-1"],
        [f"{ACTOR}.fsdp_config.fsdp_size=16"],  # >= the GPUs: one group, as -1
        [f"{ACTOR}.fsdp_config.fsdp_size=3", "trainer.n_gpus_per_node=3", "actor_rollout_ref.rollout.n=3"]
        + ["actor_rollout_ref.rollout.tensor_model_parallel_size=1", f"{ACTOR}.ppo_micro_batch_size_per_gpu=1"],
        [f"{ACTOR}.optim.optimizer=SGD"],
        [f"{ACTOR}.optim.optimizer=AdamW", f"{ACTOR}.optim.optimizer_impl=torch.optim"],
        [f"{ACTOR}.use_dynamic_bsz=true", f"{ACTOR}.ppo_max_token_len_per_gpu=1024"],
    ],
)
def test_settings_verl_runs_pass(overrides):
    check_config(compose_verl(VERL_BASE + overrides), machine_checks=False)


def test_an_estimator_verl_does_not_register_is_refused_with_the_closest_one():
    config = compose_verl(VERL_BASE + ["algorithm.adv_estimator=grpoo"])
    with pytest.raises(ConfigError) as refused:
        check_estimator(config)
    assert refused.value.key == "algorithm.adv_estimator"
    assert str(refused.value).startswith(
        "algorithm.adv_estimator: grpoo is not an estimator verl registers: did you mean grpo? (known: "
    )
    assert "gae, " in str(refused.value)
    check_estimator(config, extra=("grpoo",), reader="verl or mine")  # an extension's own, registered where it runs
    with pytest.raises(ConfigError, match="^algorithm.adv_estimator: grpoo is not an estimator verl or mine registers"):
        check_estimator(config, extra=("other",), reader="verl or mine")
