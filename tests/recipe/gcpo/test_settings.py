"""The recipe's settings (recipe/gcpo/settings.py): its blocks parsed once, with the full key path in every message;
the start-up checks of the parsed blocks are tests/recipe/gcpo/test_checks.py's."""

import pickle

import pytest
from omegaconf import OmegaConf

from gcpo_core.credit.config import CreditConfig, FieldError
from recipe.gcpo.checks import recipe_rules
from recipe.gcpo.settings import GCPOSettings, TrainerNeed, build_section, recipe_trainer_message
from tests.recipe.gcpo.conftest import compose_gcpo, gcpo_settings


def test_the_recipe_config_parses_to_the_engine_defaults():
    """config/gcpo_keys/recipe.yaml writes every default out for the reader (method: auto, ...): each copy must be
    the dataclasses' own, or the recipe's config and gcpo_core's engine would train differently."""
    settings = GCPOSettings.from_algorithm_config(compose_gcpo(["actor_rollout_ref.rollout.n=8"]).algorithm)
    assert settings == GCPOSettings()
    assert settings.credit.method == "auto" and settings.credit.norm_by_std
    assert settings.encoder.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert settings.actor.num_gpus == 0.1 and not settings.filter_all_correct


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "algorithm.gcpo.credit.method=shap",
            r"algorithm.gcpo.credit.method: must be one of \['auto', 'exact', 'mc', 'loo'\]",
        ),
        ("algorithm.gcpo.credit.permutations=3", r"algorithm.gcpo.credit.permutations: must be an integer in \[4"),
        ("algorithm.gcpo.credit.epsilon=0", "algorithm.gcpo.credit.epsilon: must be a finite number > 0"),
        ("algorithm.gcpo.encoder.long_text=middle", "algorithm.gcpo.encoder.long_text: must be one of"),
        ("algorithm.gcpo.actor.num_gpus=-1", r"algorithm.gcpo.actor.num_gpus: must be in \[0, 1\]"),
        ("algorithm.gcpo.actor.num_gpus=2", r"algorithm.gcpo.actor.num_gpus: must be in \[0, 1\], got 2"),
        ("algorithm.gcpo.actor.timeout_s=inf", "algorithm.gcpo.actor.timeout_s: must be a finite number > 0, got inf"),
        ("+algorithm.gcpo.credit.permutation=8", r"algorithm.gcpo.credit: unknown key\(s\) \['permutation'\]"),
        ("+algorithm.gcpo.colour=red", r"algorithm.gcpo: unknown key\(s\) \['colour'\]"),
        ("algorithm.gcpo.dump.every_n_steps=-2", "algorithm.gcpo.dump.every_n_steps: must be an integer >= 0"),
        ("+algorithm.gcpo.credit.norm_by_std=false", "use verl's algorithm.norm_adv_by_std_in_grpo"),
    ],
)
def test_bad_values_fail_at_start_up_naming_the_key(override, message):
    config = compose_gcpo(["actor_rollout_ref.rollout.n=8", override])
    with pytest.raises(ValueError, match=message):
        gcpo_settings(config)


def test_the_known_credit_keys_leave_out_verls_switch():
    with pytest.raises(ValueError, match="did you mean 'method'") as error:
        gcpo_settings(compose_gcpo(["actor_rollout_ref.rollout.n=8", "+algorithm.gcpo.credit.methd=mc"]))
    assert "'norm_by_std'" not in str(error.value)  # algorithm.norm_adv_by_std_in_grpo sets it


def test_norm_by_std_follows_verls_grpo_switch():
    config = compose_gcpo(["actor_rollout_ref.rollout.n=8", "algorithm.norm_adv_by_std_in_grpo=false"])
    assert gcpo_settings(config).credit.norm_by_std is False


def test_a_missing_block_means_defaults():
    algorithm = OmegaConf.create({"adv_estimator": "gcpo", "norm_adv_by_std_in_grpo": True})
    assert GCPOSettings.from_algorithm_config(algorithm).credit.method == "auto"


def test_the_builders_name_the_key_path_from_the_field_error():
    with pytest.raises(FieldError) as error:
        CreditConfig(method="shap")
    assert error.value.field == "method"
    assert str(error.value).startswith("credit config: method must be one of")  # the engine's own message
    with pytest.raises(ValueError, match=r"^a\.b\.method: must be one of .* got 'shap'$"):
        build_section(CreditConfig, {"method": "shap"}, "a.b")
    with pytest.raises(ValueError, match=r"^a\.b: unknown key\(s\) \['methd'\] \(did you mean 'method'\?\)"):
        build_section(CreditConfig, {"methd": "mc"}, "a.b")
    with pytest.raises(ValueError, match=r"^algorithm\.mc_grpo\.mad_zero: must be one of"):  # once, not twice
        recipe_rules(compose_gcpo(["algorithm.adv_estimator=grpo", "algorithm.mc_grpo.mad_zero=mean"]))
    copy = pickle.loads(pickle.dumps(error.value))  # crosses Ray with its parts
    assert (copy.field, copy.problem, str(copy)) == (error.value.field, error.value.problem, str(error.value))


def test_settings_objects_cross_process_boundaries_as_they_are():
    settings = gcpo_settings(compose_gcpo(["actor_rollout_ref.rollout.n=8", "algorithm.gcpo.credit.method=mc"]))
    assert pickle.loads(pickle.dumps(settings)) == settings
    assert gcpo_settings(compose_gcpo(["algorithm.adv_estimator=grpo"])) is None


def test_one_message_for_every_setting_that_needs_the_gcpo_trainer():
    message = recipe_trainer_message(TrainerNeed("algorithm.x=1", "does x", "; or use y"), "trainer class T")
    assert message.startswith(
        "algorithm.x=1 needs the GCPO trainer, which does x: launch with `python -m recipe.gcpo.main_gcpo`"
    )
    assert message.endswith("; or use y (found: trainer class T).") and "\n" not in message
