"""The table of verl's values (verl_preflight/values.py): names verl compares with strings late, the elements of its
lists, and the keys that turn a rule on; each refusal one line naming its key, on verl's stock config."""

import ast
import importlib.util
from pathlib import Path

import pytest
import verl

from tests.verl_preflight.conftest import VERL_BASE, compose_verl
from verl_preflight import ConfigError, check_config
from verl_preflight.schema import verl_schema
from verl_preflight.values import CHECKPOINT_ENGINES, VALUE_RULES, WHEN_USED, ListOf, OneOf, Range, check_values

ARR = "actor_rollout_ref"
LOAD_FORMATS = (
    "auto, bitsandbytes, dummy, fastsafetensors, gguf, mistral, npcache, pt, runai_streamer, runai_streamer_sharded, "
    "safetensors, sharded_state, tensorizer"
)
KL = "abs, abs+, k1, k1+, k2, k2+, k3, k3+, kl, kl+, low_var_kl, low_var_kl+, mse, mse+"


def refusal(overrides) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        check_config(compose_verl(VERL_BASE + list(overrides)), machine_checks=False)
    return refused.value


# --- issue 69: the elements of a list, and names verl looks up late ------------------------------------------


REFUSED = [
    (
        [f"{ARR}.actor.optim.betas=[0.9]"],
        f"{ARR}.actor.optim.betas: must be 2 values (e.g. [..., ...]), got [0.9]",
    ),
    (
        [f"{ARR}.actor.optim.betas=[0,0.999]"],
        f"{ARR}.actor.optim.betas: element 0 must be a float in [0, 1) (0.0, not 0), got 0",
    ),
    (
        [f"{ARR}.actor.checkpoint.save_contents=[model,optimzer]"],
        f"{ARR}.actor.checkpoint.save_contents: element 1 must be one of extra, hf_model, model, optimizer, got "
        "'optimzer': did you mean optimizer?",
    ),
    (
        [f"{ARR}.actor.checkpoint.load_contents=hf_model"],  # a string: verl's `"model" in contents` matches it
        f"{ARR}.actor.checkpoint.load_contents: must be a list (e.g. [...]), got 'hf_model'",
    ),
    (["trainer.device=tpu"], "trainer.device: must be one of cpu, cuda, npu, got 'tpu': did you mean npu?"),
    (
        [f"{ARR}.actor.strategy=fsdp3"],
        f"{ARR}.actor.strategy: must be one of fsdp, fsdp2, got 'fsdp3': did you mean fsdp?",
    ),
    (
        [f"{ARR}.actor.use_kl_loss=true", f"{ARR}.actor.kl_loss_type=k4"],
        f"{ARR}.actor.kl_loss_type: must be one of {KL}, got 'k4'",
    ),
    (
        ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptve"],
        "algorithm.kl_ctrl.type: must be one of adaptive, fixed, got 'adaptve': did you mean adaptive?",
    ),
    (
        [f"{ARR}.rollout.dtype=bf16"],
        f"{ARR}.rollout.dtype: must be one of null, auto, bfloat16, float, float16, float32, half, got 'bf16': "
        "did you mean bfloat16?",
    ),
    (
        [f"{ARR}.rollout.load_format=dumy"],
        f"{ARR}.rollout.load_format: must be one of {LOAD_FORMATS}, got 'dumy': did you mean dummy?",
    ),
    (
        [f"{ARR}.rollout.load_format=null"],  # verl tests `"dummy" not in load_format` as the actor starts
        f"{ARR}.rollout.load_format: must be one of {LOAD_FORMATS}, got None",
    ),
    (["data.truncation=trunc"], "data.truncation: must be one of null, error, left, middle, right, got 'trunc'"),
    (
        ["algorithm.rollout_correction.rollout_is=seq"],
        "algorithm.rollout_correction.rollout_is: must be one of null, sequence, token, got 'seq'",
    ),
    (
        [f"{ARR}.actor.fsdp_config.model_dtype=float"],
        f"{ARR}.actor.fsdp_config.model_dtype: must be one of 16, 32, null, bf16, bfloat16, float16, float32, "
        "fp16, fp32, got 'float': did you mean float32?",
    ),
    (
        [f"{ARR}.rollout.checkpoint_engine.backend=ncl"],
        f"{ARR}.rollout.checkpoint_engine.backend: must be one of delta_sharded, kimi_ckpt_engine, mooncake, "
        "naive, nccl, nixl, got 'ncl': did you mean nccl?",
    ),
]


@pytest.mark.parametrize("overrides, message", REFUSED, ids=[message.partition(":")[0] for _, message in REFUSED])
def test_a_value_verl_would_fail_on_or_ignore_is_refused_in_one_line(overrides, message):
    error = refusal(overrides)
    assert str(error) == message
    assert error.key == message.partition(":")[0]


@pytest.mark.parametrize(
    "overrides",
    [
        [f"{ARR}.actor.optim.betas=[0.0,0.999]"],
        [f"{ARR}.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"],
        [f"{ARR}.actor.checkpoint.save_contents=null"],  # verl's default list
        [f"{ARR}.actor.checkpoint.save_contents=[]"],
        ["trainer.device=cuda"],
        ["trainer.device=npu"],
        [f"{ARR}.actor.strategy=fsdp2"],
        [f"{ARR}.actor.use_kl_loss=false", f"{ARR}.actor.kl_loss_type=k4"],  # verl reads it only with the KL loss
        [f"{ARR}.actor.use_kl_loss=true", f"{ARR}.actor.kl_loss_type=k3+"],
        ["algorithm.use_kl_in_reward=false", "algorithm.kl_ctrl.type=adaptve"],  # read only with the KL in reward
        ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive"],
        [f"{ARR}.rollout.dtype=bfloat16"],
        [f"{ARR}.rollout.dtype=null"],  # verl passes vLLM no --dtype: its auto
        [f"{ARR}.rollout.load_format=dummy"],
        [f"{ARR}.rollout.load_format=safetensors"],
        ["data.truncation=left"],
        ["data.truncation=null"],  # verl 0.9.1's RL dataset never reads it
        ["algorithm.rollout_correction.rollout_is=sequence"],
        ["algorithm.rollout_correction.rollout_is=null"],
        [f"{ARR}.actor.fsdp_config.model_dtype=bf16"],
        [f"{ARR}.actor.fsdp_config.model_dtype=null"],  # verl: fp32 to train
        [f"{ARR}.actor.fsdp_config.model_dtype=16"],  # verl's PrecisionType takes 16 and 32
        [f"{ARR}.rollout.checkpoint_engine.backend=nccl"],
        # a module of the user's own registers more names (verl imports it before it looks the name up)
        [f"{ARR}.rollout.checkpoint_engine.backend=mine", f"{ARR}.rollout.checkpoint_engine.custom_backend_module=m"],
        [f"{ARR}.rollout.agent.default_agent_loop=mine", f"{ARR}.rollout.agent.agent_loop_config_path=/a.yaml"],
        # verl passes betas to an Adam only
        [f"{ARR}.actor.optim.optimizer=SGD", f"{ARR}.actor.optim.betas=[0.9]"],
        ["model_engine=dp"],
    ],
)
def test_the_values_verl_reads_pass(overrides):
    check_config(compose_verl(VERL_BASE + overrides), machine_checks=False)


def test_a_name_a_user_module_may_add_is_still_checked_without_that_module():
    with pytest.raises(ConfigError, match="agent.default_agent_loop: must be one of single_turn_agent, tool_agent"):
        check_values(compose_verl(VERL_BASE + [f"{ARR}.rollout.agent.default_agent_loop=mine"]))


@pytest.mark.skipif(
    importlib.util.find_spec("megatron") is not None, reason="Megatron-LM is installed: model_engine=megatron runs"
)
def test_an_engine_whose_stack_is_not_installed_is_refused_before_verl_only_warns():
    error = refusal(["model_engine=megatron"])
    assert str(error) == (
        "model_engine: megatron needs megatron.core, which is not installed here: verl would stop with 'Unknown "
        "backend: megatron' in every worker; use model_engine=dp (FSDP)"
    )


# --- the table itself ------------------------------------------------------------------------------------------


def test_every_key_of_the_table_is_one_verl_has():
    """A misspelt key in the table would never apply (check_values skips a key the config lacks)."""
    schema = verl_schema()

    def has(key: str) -> bool:
        node = schema
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    keys = [*VALUE_RULES, *WHEN_USED, *(key for rules in WHEN_USED.values() for key in rules)]
    assert [key for key in keys if not has(key)] == []


def test_checkpoint_engines_are_the_ones_verl_registers():
    """CHECKPOINT_ENGINES is written out (importing verl's registry imports every optional engine): it is what
    verl/checkpoint_engine/ registers with ``@CheckpointEngineRegistry.register("...")``."""
    folder = Path(verl.__file__).resolve().parent / "checkpoint_engine"
    registered = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func) == "CheckpointEngineRegistry.register"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                registered.add(node.args[0].value)
    assert "naive" in registered  # the reading found verl's registrations
    assert registered == set(CHECKPOINT_ENGINES)


def test_trainer_modes_are_the_ones_verl_registers():
    """Written out (importing verl's registry loads its trainer stack): verl's TRAINER_REGISTRY."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    assert set(VALUE_RULES["trainer.v1.trainer_mode"].names) == set(TRAINER_REGISTRY)


@pytest.mark.parametrize(
    "rule, value, problem",
    [
        (Range(1, integer=True), 1.5, "must be an integer >= 1, got 1.5"),
        (Range(0, 1, low_open=True), 0, "must be a number in (0, 1], got 0"),
        (Range(1, integer=True, nullable=True), True, "must be an integer >= 1 or null, got True"),
        (Range(0), float("nan"), "must be a number >= 0, got nan"),
        (OneOf(("a", "b")), "c", "must be one of a, b, got 'c'"),
        (ListOf(OneOf(("a",)), length=2), ["a"], "must be 2 values (e.g. [..., ...]), got ['a']"),
        (ListOf(OneOf(("a",))), "a", "must be a list (e.g. [...]), got 'a'"),
        (ListOf(OneOf(("a",))), ["a", None], "element 1 must be one of a, got None"),
    ],
)
def test_a_rule_says_what_it_takes(rule, value, problem):
    assert rule.problem(value) == problem


@pytest.mark.parametrize(
    "rule, value",
    [
        (Range(1, integer=True), 3),
        (Range(0, 1, low_open=True), 1),
        (Range(1, integer=True, nullable=True), None),
        (OneOf(("a", "b")), "b"),
        (ListOf(OneOf(("a",)), nullable=True), None),
        (ListOf(OneOf(("a", "b")), length=2), ["b", "a"]),
    ],
)
def test_a_rule_takes_what_it_says(rule, value):
    assert rule.problem(value) is None
