"""verl's legacy reward keys (verl_preflight.reward.migrate_legacy_reward): moved into reward.* as verl's own migration
moves them, refused where they clash with reward.* or name no function, and checked under the key the user wrote. On
the recipe's config (whose reward.* names the recipe's own function, ``RECIPE_REWARD``) and on verl's stock one."""

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from recipe.gcpo import run_summary
from recipe.gcpo.checks import RECIPE_REWARD
from tests.recipe.gcpo.conftest import BASE, compose_gcpo
from tests.verl_preflight.conftest import VERL_BASE, compose_verl, reward_file
from verl_preflight import ConfigError, check_config
from verl_preflight.reward import check_function, migrate_legacy_reward


def test_a_classic_custom_reward_function_is_migrated_not_ignored(tmp_path):
    """verl's V1 trainer reads only reward.*: a launcher's top-level custom_reward_function used to be dropped and the
    recipe's math reward ran instead, with exit 0."""
    path = reward_file(tmp_path)
    config = compose_gcpo(BASE + [f"custom_reward_function.path={path}", "custom_reward_function.name=my_score"])
    lines = migrate_legacy_reward(config, RECIPE_REWARD)
    assert config.reward.custom_reward_function.path == str(path)
    assert config.reward.custom_reward_function.name == "my_score"
    assert "custom_reward_function" not in config  # deleted, as verl's migration deletes it
    assert lines == [
        f"custom_reward_function (verl's legacy key) -> reward.custom_reward_function: {path}:my_score, "
        "moved as verl's migrate_legacy_reward_impl moves it"
    ]
    assert f"function {path}:my_score;" in run_summary.describe_reward(config)


def test_a_classic_block_on_verls_stock_config_is_migrated_by_check_config(tmp_path):
    path = reward_file(tmp_path)
    config = compose_verl(VERL_BASE + [f"custom_reward_function.path={path}", "custom_reward_function.name=my_score"])
    checked = check_config(config, machine_checks=False)
    assert (config.reward.custom_reward_function.path, config.reward.custom_reward_function.name) == (
        str(path),
        "my_score",
    )
    assert checked.notes == [
        f"custom_reward_function (verl's legacy key) -> reward.custom_reward_function: {path}:my_score, "
        "moved as verl's migrate_legacy_reward_impl moves it"
    ]


def test_a_legacy_path_without_a_name_gets_verls_default_name(tmp_path):
    path = reward_file(
        tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 0\n"
    )
    config = compose_gcpo(BASE + [f"custom_reward_function.path={path}"])
    migrate_legacy_reward(config, RECIPE_REWARD)
    assert config.reward.custom_reward_function.name == "compute_score"
    assert check_function(config, "reward.custom_reward_function").__name__ == "compute_score"


def test_legacy_reward_model_keys_move_with_verls_migration():
    config = compose_gcpo(BASE + ["reward_model.reward_manager=dapo", "reward_model.num_workers=3"])
    lines = migrate_legacy_reward(config, RECIPE_REWARD)
    assert config.reward.reward_manager.name == "dapo" and config.reward.num_workers == 3
    assert lines == [
        "reward_model (verl's legacy keys) -> reward.reward_model, moved as verl's "
        "migrate_legacy_reward_impl moves them"
    ]


def test_both_a_legacy_and_a_new_reward_function_are_refused(tmp_path):
    path = reward_file(tmp_path)
    config = compose_gcpo(
        BASE
        + [
            f"custom_reward_function.path={path}",
            "custom_reward_function.name=my_score",
            "reward.custom_reward_function.path=/other/reward.py",
        ]
    )
    with pytest.raises(ConfigError, match=r"name different reward functions \(path and name\): keep one") as error:
        migrate_legacy_reward(config, RECIPE_REWARD)
    assert error.value.key == "custom_reward_function.path"


@pytest.mark.parametrize("compose", [compose_gcpo, lambda overrides: compose_verl(VERL_BASE + overrides)])
def test_a_legacy_name_without_a_path_is_refused_whatever_reward_the_config_names(compose):
    """Issue 69: verl's migration would run None:my_score, its data_source dispatch; on the recipe's config the
    recipe's reward used to stay, silently, in place of the function the user named."""
    config = compose(["custom_reward_function.name=my_score"])
    with pytest.raises(ConfigError) as refused:
        migrate_legacy_reward(config, RECIPE_REWARD)
    assert str(refused.value) == (
        "custom_reward_function.name: my_score without custom_reward_function.path: verl would run its data_source "
        "dispatch and ignore the name; set the path of the file that defines it"
    )


def test_a_legacy_name_beside_another_function_of_reward_stars_own_is_refused(tmp_path):
    """verl's migration replaces the whole block: the legacy name would replace reward.*'s (verl's default
    compute_score here) under reward.*'s path."""
    path = reward_file(tmp_path)
    config = compose_verl(
        VERL_BASE + [f"reward.custom_reward_function.path={path}", "custom_reward_function.name=my_score"]
    )
    with pytest.raises(ConfigError) as refused:
        migrate_legacy_reward(config)
    assert str(refused.value) == (
        "custom_reward_function.name: verl's legacy block (None:my_score), which the V1 trainer does not read, and "
        f"reward.custom_reward_function ({path}:compute_score) name different reward functions (name): keep one, "
        "reward.custom_reward_function"
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["custom_reward_function.path=/no/such/reward.py"],
            "custom_reward_function.path: /no/such/reward.py does not",
        ),
        (["custom_reward_function.path={path}", "custom_reward_function.name=nope"], "defines no 'nope'"),
        (["custom_reward_function.path=pkg://no_such_module_xyz"], "custom_reward_function.path: pkg://no_such_module"),
    ],
)
def test_a_legacy_reward_function_is_reported_under_the_key_the_user_wrote(tmp_path, overrides, message):
    """Checked after its move into reward.*, it was reported as reward.custom_reward_function.path, a key the
    launcher never set."""
    path = reward_file(tmp_path)
    config = compose_gcpo(BASE + [o.format(path=path) for o in overrides])
    with pytest.raises(ValueError) as raised:
        migrate_legacy_reward(config, RECIPE_REWARD)
    assert message in str(raised.value) and "reward.custom_reward_function" not in str(raised.value)


def test_nothing_legacy_changes_nothing():
    config = compose_gcpo(BASE)
    before = OmegaConf.to_container(config)
    assert migrate_legacy_reward(config, RECIPE_REWARD) == []
    assert OmegaConf.to_container(config) == before


def test_a_launcher_with_a_classic_reward_block_trains_on_that_function(tmp_path):
    """The whole path, as the launcher's run would take it: the recipe's entry point in its own process, a dry run."""
    path = reward_file(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipe.gcpo.main_gcpo",
            *BASE,
            f"custom_reward_function.path={path}",
            "custom_reward_function.name=my_score",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "GCPO_DRY_RUN": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    composed = proc.stdout.split("# composed config (dry run)")[1]
    assert f"path: {path}" in composed and "name: my_score" in composed and "pkg://recipe.gcpo.reward" not in composed
    assert f"gcpo: reward: manager naive (register); function {path}:my_score; overlong shaping off" in proc.stdout
    assert "gcpo: custom_reward_function (verl's legacy key) -> reward.custom_reward_function" in proc.stdout
