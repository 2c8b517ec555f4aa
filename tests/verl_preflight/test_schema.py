"""A config against verl's own schema (verl_preflight/schema.py): its blocks, that every value resolves, every key one
verl reads and of the kind verl's default is, and the config dataclasses verl's workers build; on verl's stock
config."""

import pytest
from omegaconf import open_dict

from tests.verl_preflight.conftest import VERL_BASE, compose_verl
from verl_preflight import ConfigError, check_config
from verl_preflight.schema import check_blocks, check_resolves, check_schema, verl_schema

FREE_FORM_NOTE = "(verl would ignore it; a free-form block takes any key: docs/training.md#keys-verl-does-not-check)"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["+trainer.totl_epochs=3"],
            f"trainer.totl_epochs: not a key verl 0.9.1 reads: did you mean trainer.total_epochs? {FREE_FORM_NOTE}",
        ),
        (
            ["actor_rollout_ref.actor.use_dynamic_bsz=yes"],
            "actor_rollout_ref.actor.use_dynamic_bsz: must be true or false, got 'yes'",
        ),
        (
            ["actor_rollout_ref.actor.entropy_coeff=abc"],
            "actor_rollout_ref.actor.entropy_coeff: must be a number, got 'abc'",
        ),
        (
            ["trainer.project_name=${oc.env:NO_SUCH_VAR_XYZ}"],
            "trainer.project_name: ${oc.env:NO_SUCH_VAR_XYZ} does not resolve: KeyError raised while resolving "
            "interpolation: \"Environment variable 'NO_SUCH_VAR_XYZ' not found\"",
        ),
        (
            ["actor_rollout_ref.actor.loss_agg_mode=foo"],  # verl's ActorConfig refuses it as a worker builds it
            "actor_rollout_ref.actor: verl's config refuses it: ValueError: Invalid loss_agg_mode: foo",
        ),
        (
            # verl asserts it without a message: the table names the values
            ["actor_rollout_ref.actor.optim.lr_scheduler_type=linear"],
            "actor_rollout_ref.actor.optim.lr_scheduler_type: must be one of constant, cosine, got 'linear'",
        ),
    ],
    ids=["unknown key", "boolean", "number", "unresolved", "dataclass", "bare assert"],
)
def test_a_key_verl_would_ignore_or_a_value_of_the_wrong_kind_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as refused:
        check_config(compose_verl(VERL_BASE + overrides), machine_checks=False)
    assert str(refused.value) == message


def test_a_free_form_block_takes_any_key_and_an_extensions_block_is_its_own():
    check_config(
        compose_verl(VERL_BASE + ["+actor_rollout_ref.rollout.engine_kwargs.vllm.anything=1"]), machine_checks=False
    )
    resolved = check_resolves(compose_verl(VERL_BASE + ["+algorithm.mine.x=1"]))
    check_schema(resolved, ("algorithm.mine",), "verl 0.9.1 or mine")
    with pytest.raises(ConfigError) as refused:
        check_schema(resolved, (), "verl 0.9.1 or mine")
    assert str(refused.value) == f"algorithm.mine: not a key verl 0.9.1 or mine reads {FREE_FORM_NOTE}"


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda config: config.__setattr__("trainer", None),
            "trainer: must be verl's block of trainer.* keys: got None",
        ),
        (
            lambda config: config.__delitem__("trainer"),
            "trainer: must be verl's block of trainer.* keys: it is missing (removed with ~trainer?)",
        ),
    ],
    ids=["null", "removed"],
)
def test_a_block_verl_reads_everywhere_must_be_there(change, message):
    config = compose_verl(VERL_BASE)
    with open_dict(config):
        change(config)
    with pytest.raises(ConfigError) as refused:
        check_blocks(config)
    assert str(refused.value) == message


def test_the_schema_is_verls_generated_config_with_its_dataclasses_fields():
    schema = verl_schema()
    assert schema["trainer"]["total_epochs"] == 30 and schema["model_engine"] == "dp"
    # a field of verl's dataclass the reference config does not write out
    assert "mixed_precision" in schema["actor_rollout_ref"]["actor"]["fsdp_config"]
