"""The recipe's start-up rules (recipe/gcpo/checks.py): the trainer its settings need, GCPO's groups, encoder, group
filter and reward, and the recipe as an extension of verl_preflight's checks (``validate``: every check of the config
with the recipe's rules). Each baseline's own checks are tested beside it, in tests/recipe/gcpo/baselines/; the
checks through the entry point are tests/recipe/gcpo/test_main_gcpo.py's."""

import ast
from pathlib import Path

import pytest

from recipe.gcpo.checks import RECIPE, check_encoder, recipe_rules, validate
from tests.recipe.gcpo.conftest import BASE, MODE_OVERRIDES, compose_gcpo
from tests.verl_preflight.conftest import check_style_problems, reward_file
from verl_preflight import ConfigError
from verl_preflight.machine import missing_data_files

RECIPE_DIR = Path(__file__).resolve().parents[3] / "recipe" / "gcpo"


def checked_gcpo(config):
    """The recipe's checks of a full config; its GCPO settings (None for another estimator)."""
    return recipe_rules(config).gcpo


# --- the trainer, the groups, DAPO's filter -------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODE_OVERRIDES))
def test_gcpo_is_checked_in_every_trainer_mode_of_verls_v1_trainer(mode):
    """The recipe's entry point builds its trainer for each of verl's modes (recipe.gcpo.gcpo_trainer.GCPO_TRAINERS):
    no mode is refused for GCPO; verl's own classes refuse it (tests/recipe/gcpo/test_main_gcpo.py)."""
    assert checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=8", *MODE_OVERRIDES[mode]])) is not None


def test_verls_legacy_trainer_is_refused_under_every_estimator_naming_verls_entry_point():
    """Checked first: the recipe's entry point runs only verl's V1 trainer."""
    for estimator in ("gcpo", "grpo"):
        overrides = ["actor_rollout_ref.rollout.n=8", f"algorithm.adv_estimator={estimator}", "trainer.use_v1=false"]
        with pytest.raises(ConfigError) as refused:
            recipe_rules(compose_gcpo(overrides))
        assert str(refused.value) == (
            "trainer.use_v1: false selects verl's legacy trainer, which this entry point does not run: use verl's own "
            "`python -m verl.trainer.main_ppo` for it"
        )


def test_groups_need_at_least_two_rollouts():
    with pytest.raises(
        ValueError, match="rollout.n: gcpo credits rollouts within a group, so it needs at least 2, got 1"
    ):
        checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=1"]))


def test_other_estimators_skip_the_gcpo_checks():
    assert checked_gcpo(compose_gcpo(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1"])) is None


def test_dapo_filtering_that_would_drop_all_correct_groups_is_explicit():
    base = ["actor_rollout_ref.rollout.n=8", "algorithm.filter_groups.enable=true"]
    assert checked_gcpo(compose_gcpo(base)) is not None  # the recipe's default metric is gcpo_signal
    with pytest.raises(ValueError, match="drops every group whose rollouts are all correct"):
        checked_gcpo(compose_gcpo(base + ["algorithm.filter_groups.metric=acc"]))
    accepted = compose_gcpo(base + ["algorithm.filter_groups.metric=acc", "algorithm.gcpo.filter_all_correct=true"])
    assert checked_gcpo(accepted).filter_all_correct


def test_multi_turn_and_oversized_exact_games_are_refused_at_start_up():
    with pytest.raises(ValueError, match="multi_turn.enable: true is not supported: .* multi-turn agent loops"):
        checked_gcpo(
            compose_gcpo(["actor_rollout_ref.rollout.n=8", "actor_rollout_ref.rollout.multi_turn.enable=true"])
        )
    with pytest.raises(ValueError, match="method: exact enumerates 2\\^n coalitions"):
        checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=32", "algorithm.gcpo.credit.method=exact"]))
    assert checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=32"])).credit.method == "auto"


def test_filtering_on_gcpo_signal_needs_a_reward_that_reports_it(tmp_path):
    base = [
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.metric=gcpo_signal",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
    ]
    validate(compose_gcpo(base))  # the recipe's reward reports it
    validate(compose_gcpo(base + ["reward.custom_reward_function.path=pkg://tests.special_e2e.smoke.reward"]))
    own = tmp_path / "my_reward.py"
    own.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    return {'score': 1.0, 'acc': 1.0}\n"
    )
    with pytest.raises(ValueError, match=r"never reports 'gcpo_signal': return it from the reward function"):
        validate(compose_gcpo(base + [f"reward.custom_reward_function.path={own}"]))
    with pytest.raises(ValueError, match="verl's built-in reward does not report it"):
        validate(compose_gcpo(base + ["reward.custom_reward_function.path=null"]))
    # filtering on acc needs nothing of the reward's
    validate(
        compose_gcpo(
            [b.replace("gcpo_signal", "acc") for b in base]
            + ["algorithm.gcpo.filter_all_correct=true", f"reward.custom_reward_function.path={own}"]
        )
    )


# --- the encoder --------------------------------------------------------------------------------------------


def test_the_bundled_encoder_and_a_local_model_folder_pass(tmp_path):
    validate(compose_gcpo(BASE))
    folder = tmp_path / "encoder"
    folder.mkdir()
    (folder / "modules.json").write_text("[]")
    validate(compose_gcpo(BASE + [f"algorithm.gcpo.encoder.model={folder}"]))


@pytest.mark.parametrize(
    "model, message",
    [
        ("/no/such/encoder", "algorithm.gcpo.encoder.model: /no/such/encoder is not a folder"),
        ("EMPTY", r"holds no model \(no modules.json or config.json\)"),
        ("someone/not-cached-encoder", "is not in the Hugging Face cache and the hub is off"),
    ],
)
def test_an_encoder_the_credit_actors_could_not_load_is_refused(tmp_path, monkeypatch, model, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    if model == "EMPTY":
        (tmp_path / "empty").mkdir()
        model = str(tmp_path / "empty")
    config = compose_gcpo(BASE + [f"algorithm.gcpo.encoder.model={model}"])
    with pytest.raises(ValueError, match=message):
        validate(config)


def test_a_hub_encoder_passes_while_the_hub_is_on(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    check_encoder("someone/not-cached-encoder")  # the credit actors download it


def test_a_grpo_run_does_not_check_an_encoder_it_never_loads():
    validate(compose_gcpo(BASE + ["algorithm.adv_estimator=grpo", "algorithm.gcpo.encoder.model=/no/such/encoder"]))


# --- the recipe as verl_preflight's extension ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["algorithm.adv_estimator=grpo", "trainer.use_v1=false"], "trainer.use_v1"),
        (["algorithm.adv_estimator=gcp"], "algorithm.adv_estimator"),
        (["algorithm.gcpo.credit.method=shap"], "algorithm.gcpo.credit.method"),
        (["actor_rollout_ref.rollout.n=1"], "actor_rollout_ref.rollout.n"),
        (
            ["algorithm.adv_estimator=copo", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"],
            "actor_rollout_ref.actor.policy_loss.loss_mode",
        ),
        (["reward.custom_reward_function.path=/no/such/reward.py"], "reward.custom_reward_function.path"),
        (['trainer.logger=["console","tensorbord"]'], "trainer.logger"),
        (["data.train_batch_size=0"], "data.train_batch_size"),
        (["trainer.nnodes=0"], "trainer.nnodes"),
    ],
)
def test_each_refusal_is_a_config_error_naming_its_key(overrides, key):
    with pytest.raises(ConfigError) as refused:
        validate(compose_gcpo(BASE + overrides))
    assert refused.value.key == key and "\n" not in str(refused.value)


def test_validate_moves_verls_legacy_reward_keys_and_trains_on_that_function(tmp_path):
    path = reward_file(tmp_path)
    config = compose_gcpo(BASE + [f"custom_reward_function.path={path}", "custom_reward_function.name=my_score"])
    assert validate(config).gcpo is not None
    assert (config.reward.custom_reward_function.path, config.reward.custom_reward_function.name) == (
        str(path),
        "my_score",
    )


def test_the_recipes_estimator_list_is_what_its_register_module_registers():
    """The driver checks algorithm.adv_estimator against verl's registry and the recipe's estimators without importing
    the trainer; the register module is what puts the recipe's into verl's registry."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    import recipe.gcpo.register  # noqa: F401

    recipe_modules = {name for name, fn in ADV_ESTIMATOR_REGISTRY.items() if fn.__module__.startswith("recipe.gcpo")}
    assert recipe_modules == set(RECIPE.estimators())


def test_only_the_launchers_own_files_point_at_prepare_data(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # ~/data/gcpo/train.parquet: not there
    files = "['/data/gcpo/val_aime24.parquet','~/data/gcpo/train.parquet']"
    config = compose_gcpo([f"data.train_files={files}", "data.val_files=/mine/my_train.parquet"])
    hints = [hint for _key, _path, hint in missing_data_files(config, RECIPE.prepared)]
    assert ["scripts/prepare_data.py" in hint for hint in hints] == [True, True, False]


def test_the_recipes_checks_raise_config_errors_and_its_entry_point_leaves_the_line_to_the_front_door():
    """One failure style: no check of the recipe's (its baselines' included) returns its problem or raises another
    error; the entry point neither prints a refusal nor exits: verl_preflight's front door does (its own tests)."""
    assert check_style_problems(RECIPE_DIR, RECIPE_DIR.rglob("*.py")) == []
    exits = []
    for path in sorted(RECIPE_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None and "SystemExit" in ast.unparse(node.exc):
                exits.append(path.name)
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("fail", "sys.exit", "os._exit", "exit"):
                exits.append(f"{path.name}:{ast.unparse(node.func)}")
    assert exits == []
    entry = ast.parse((RECIPE_DIR / "main_gcpo.py").read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(entry)
        if isinstance(node, ast.ImportFrom) and node.module == "verl_preflight.front_door"
        for alias in node.names
    }
    assert "run" in imported
