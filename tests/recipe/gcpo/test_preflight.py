"""The entry point's whole-config start-up checks and start-up lines: the legacy reward keys migrated as verl migrates
them, the reward function, the recipe's blocks, the reward's keyword arguments, the encoder, the loggers, the
data-file hint, what will run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.gcpo import preflight, run_summary
from recipe.gcpo.preflight import model_path_problem, validate
from tests.recipe.gcpo.conftest import BASE, DAPO_REWARD, compose_gcpo

ROOT = Path(__file__).resolve().parents[3]


def _reward_file(
    tmp_path, body="def my_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
):
    path = tmp_path / "my_reward.py"
    path.write_text(body)
    return path


# --- verl's legacy reward keys ------------------------------------------------------------------------------


def test_a_classic_custom_reward_function_is_migrated_not_ignored(tmp_path):
    """verl's V1 trainer reads only reward.*: a launcher's top-level custom_reward_function used to be dropped and the
    recipe's math reward ran instead, with exit 0."""
    path = _reward_file(tmp_path)
    config = compose_gcpo(BASE + [f"custom_reward_function.path={path}", "custom_reward_function.name=my_score"])
    lines = preflight.migrate_legacy_reward(config)
    assert config.reward.custom_reward_function.path == str(path)
    assert config.reward.custom_reward_function.name == "my_score"
    assert "custom_reward_function" not in config  # deleted, as verl's migration deletes it
    assert lines == [
        f"custom_reward_function (verl's legacy key) -> reward.custom_reward_function: {path}:my_score, "
        "moved as verl's migrate_legacy_reward_impl moves it"
    ]
    assert f"function {path}:my_score;" in run_summary.describe_reward(config)


def test_a_legacy_path_without_a_name_gets_verls_default_name(tmp_path):
    path = _reward_file(
        tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 0\n"
    )
    config = compose_gcpo(BASE + [f"custom_reward_function.path={path}"])
    preflight.migrate_legacy_reward(config)
    assert config.reward.custom_reward_function.name == "compute_score"
    preflight.check_reward_function(config)


def test_legacy_reward_model_keys_move_with_verls_migration():
    config = compose_gcpo(BASE + ["reward_model.reward_manager=dapo", "reward_model.num_workers=3"])
    lines = preflight.migrate_legacy_reward(config)
    assert config.reward.reward_manager.name == "dapo" and config.reward.num_workers == 3
    assert lines == [
        "reward_model (verl's legacy keys) -> reward.reward_model, moved as verl's "
        "migrate_legacy_reward_impl moves them"
    ]


def test_both_a_legacy_and_a_new_reward_function_are_refused(tmp_path):
    path = _reward_file(tmp_path)
    config = compose_gcpo(
        BASE
        + [
            f"custom_reward_function.path={path}",
            "custom_reward_function.name=my_score",
            "reward.custom_reward_function.path=/other/reward.py",
        ]
    )
    with pytest.raises(
        preflight.ConfigError, match=r"name different reward functions \(path and name\): keep one"
    ) as error:
        preflight.migrate_legacy_reward(config)
    assert error.value.key == "custom_reward_function.path"


def test_the_recipes_estimator_list_is_what_its_register_module_registers():
    """The driver checks algorithm.adv_estimator against verl's registry and RECIPE_ESTIMATORS without importing
    the trainer; the register module is what puts the recipe's into verl's registry."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    import recipe.gcpo.register  # noqa: F401
    from recipe.gcpo.config import RECIPE_ESTIMATORS

    recipe_modules = {name for name, fn in ADV_ESTIMATOR_REGISTRY.items() if fn.__module__.startswith("recipe.gcpo")}
    assert recipe_modules == set(RECIPE_ESTIMATORS)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["custom_reward_function.path=/no/such/reward.py"], "custom_reward_function.path=/no/such/reward.py does not"),
        (["custom_reward_function.path={path}", "custom_reward_function.name=nope"], "defines no 'nope' (custom_rew"),
        (["custom_reward_function.path=pkg://no_such_module_xyz"], "custom_reward_function.path=pkg://no_such_module"),
    ],
)
def test_a_legacy_reward_function_is_reported_under_the_key_the_user_wrote(tmp_path, overrides, message):
    """Checked after its move into reward.*, it was reported as reward.custom_reward_function.path, a key the
    launcher never set."""
    path = _reward_file(tmp_path)
    config = compose_gcpo(BASE + [o.format(path=path) for o in overrides])
    with pytest.raises(ValueError) as raised:
        preflight.migrate_legacy_reward(config)
    assert message in str(raised.value) and "reward.custom_reward_function" not in str(raised.value)


def test_nothing_legacy_changes_nothing():
    config = compose_gcpo(BASE)
    before = OmegaConf.to_container(config)
    assert preflight.migrate_legacy_reward(config) == []
    assert OmegaConf.to_container(config) == before


def test_a_launcher_with_a_classic_reward_block_trains_on_that_function(tmp_path):
    """The whole path, as the launcher's run would take it: the entry point in its own process, a dry run."""
    path = _reward_file(tmp_path)
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


# --- the reward function ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, overrides, message",
    [
        (None, ["reward.custom_reward_function.path=/nowhere/reward.py"], "/nowhere/reward.py does not exist"),
        (None, ["reward.custom_reward_function.path=pkg://no_such_module"], "no module no_such_module is importable"),
        ("def other(**kw):\n    return 0\n", ["reward.custom_reward_function.name=my_score"], "defines no 'my_score'"),
        ("my_score = 3\n", ["reward.custom_reward_function.name=my_score"], "is not a function"),
        (
            "import no_such_dependency\n",
            ["reward.custom_reward_function.name=my_score"],
            "fails to load here: ModuleNotFoundError",
        ),
        (
            "def my_score(response, answer):\n    return 0\n",
            ["reward.custom_reward_function.name=my_score"],
            "cannot take data_source, solution_str, ground_truth, extra_info",
        ),
        (
            "def my_score(data_source, solution_str, ground_truth, extra_info, scale):\n    return 0\n",
            ["reward.custom_reward_function.name=my_score"],
            "requires scale, which verl does not pass",
        ),
    ],
)
def test_a_reward_function_that_would_fail_in_the_workers_is_refused(tmp_path, body, overrides, message):
    extra = [] if body is None else [f"reward.custom_reward_function.path={_reward_file(tmp_path, body)}"]
    config = compose_gcpo(BASE + extra + overrides)
    with pytest.raises(ValueError, match=message):
        validate(config)


@pytest.mark.parametrize(
    "body",
    [
        "def my_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0\n",
        "def my_score(**kwargs):\n    return 0\n",
        "async def my_score(data_source, solution_str, ground_truth, extra_info):\n    return 0\n",
        "def my_score(data_source, solution_str, ground_truth, extra_info, scale):\n    return 0\n",  # scale given below
    ],
)
def test_reward_functions_verl_can_call_pass(tmp_path, body):
    path = _reward_file(tmp_path, body)
    config = compose_gcpo(
        BASE
        + [
            f"reward.custom_reward_function.path={path}",
            "reward.custom_reward_function.name=my_score",
            "+reward.custom_reward_function.reward_kwargs={scale:2}",
        ]
    )
    preflight.check_reward_function(config)


# --- the recipe's blocks: the trainer they need, their groups, their interplay with verl's keys -------------


def checked_gcpo(config):
    """The recipe's checks of a full config; its GCPO settings (None for another estimator)."""
    return preflight.check_recipe(config).gcpo


def test_gcpo_outside_verls_v1_sync_trainer_is_refused_naming_the_entry_point():
    assert checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=8"])) is not None  # verl's defaults
    for override in ("trainer.v1.trainer_mode=colocate_async", "trainer.use_v1=false"):
        with pytest.raises(ValueError, match="python -m recipe.gcpo.main_gcpo"):
            checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=8", override]))


def test_groups_need_at_least_two_rollouts():
    with pytest.raises(ValueError, match="rollout.n must be >= 2"):
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


def _group_contrastive(config):
    return preflight.check_recipe(config).group_contrastive


def test_group_contrastive_needs_solutions_and_no_rollout_correction(tmp_path):
    import pandas as pd

    base = ["algorithm.adv_estimator=grpo", "algorithm.group_contrastive.enable=true"]
    assert _group_contrastive(compose_gcpo(base)).enable  # remote / absent files are not read
    with pytest.raises(ValueError, match="set algorithm.rollout_correction.rollout_is=null"):
        _group_contrastive(compose_gcpo(base + ["algorithm.rollout_correction.rollout_is=token"]))
    no_solution = tmp_path / "train.parquet"
    pd.DataFrame([{"extra_info": {"index": 0, "problem": "p"}}]).to_parquet(no_solution)
    with pytest.raises(ValueError, match="has no extra_info.solution"):
        _group_contrastive(compose_gcpo(base + [f"data.train_files={no_solution}"]))
    with_solution = tmp_path / "train_math.parquet"
    pd.DataFrame([{"extra_info": {"index": 0, "problem": "p", "solution": "s"}}]).to_parquet(with_solution)
    assert _group_contrastive(compose_gcpo(base + [f"data.train_files={with_solution}"])).enable
    with pytest.raises(ValueError, match="algorithm.group_contrastive.enable must be true or false"):
        _group_contrastive(compose_gcpo(["algorithm.group_contrastive.enable=maybe"]))


def test_bypass_mode_is_refused_with_reference_injection():
    with pytest.raises(ValueError, match="bypass_mode=false"):
        _group_contrastive(
            compose_gcpo(
                [
                    "algorithm.adv_estimator=grpo",
                    "algorithm.group_contrastive.enable=true",
                    "algorithm.rollout_correction.bypass_mode=true",
                ]
            )
        )


def test_multi_turn_and_oversized_exact_games_are_refused_at_start_up():
    with pytest.raises(ValueError, match="multi-turn agent loops"):
        checked_gcpo(
            compose_gcpo(["actor_rollout_ref.rollout.n=8", "actor_rollout_ref.rollout.multi_turn.enable=true"])
        )
    with pytest.raises(ValueError, match="method=exact enumerates 2\\^n coalitions"):
        checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=32", "algorithm.gcpo.credit.method=exact"]))
    assert checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=32"])).credit.method == "auto"


# --- the reward's keyword arguments and DAPO's filter metric ------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["+reward.reward_kwargs.max_response_len=1"],
            r"reward.reward_kwargs: unknown key\(s\) \['max_response_len'\] \(did you mean 'max_resp_len'\?\)",
        ),
        (
            ["+reward.reward_kwargs.overlong_buffer_cfg.penalty=1"],
            r"reward.reward_kwargs.overlong_buffer_cfg: unknown key\(s\) \['penalty'\] \(did you mean 'penalty_factor'\?\)",
        ),
        (["reward.reward_manager.name=naive"], r"read only by reward.reward_manager.name=dapo .*naive would ignore it"),
        (["reward.reward_kwargs.max_resp_len=2048"], r"max_resp_len=2048 must be >= overlong_buffer_cfg.len=4096"),
        (["reward.reward_kwargs.overlong_buffer_cfg.len=0"], r"overlong_buffer_cfg.len must be > 0"),
    ],
)
def test_reward_kwargs_are_checked_against_what_the_reward_manager_reads(overrides, message):
    preflight.check_reward_kwargs(compose_gcpo(DAPO_REWARD))
    with pytest.raises(ValueError, match=message):
        preflight.check_reward_kwargs(compose_gcpo(DAPO_REWARD + overrides))


def test_an_enabled_overlong_buffer_needs_every_value_the_dapo_manager_reads():
    partial = [o for o in DAPO_REWARD if "penalty_factor" not in o and "max_resp_len" not in o]
    with pytest.raises(ValueError, match="also reads overlong_buffer_cfg.penalty_factor"):
        preflight.check_reward_kwargs(compose_gcpo(partial))
    with pytest.raises(ValueError, match="needs reward.reward_kwargs.max_resp_len"):
        preflight.check_reward_kwargs(
            compose_gcpo(partial + ["+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1"])
        )


def test_an_overlong_buffer_without_enable_is_refused_before_the_reward_workers_read_it():
    # e.g. a launcher's buffer length with the protocol group removed (~protocol): verl's DAPO manager reads .enable
    without = [o for o in DAPO_REWARD if ".enable=" not in o]
    with pytest.raises(ValueError, match=r"overlong_buffer_cfg \(\['len', 'log', 'penalty_factor'\]\) has no enable"):
        preflight.check_reward_kwargs(compose_gcpo(without))


def _reward_kwargs_verl_reads() -> dict[str, dict]:
    """Reward manager name -> {key: the sub-keys it reads, None for a value}, from verl's reward manager source:
    ``config.reward.get("reward_kwargs", ...).get(KEY)`` and then ``self.KEY.SUB``."""
    import ast
    from pathlib import Path

    import verl.experimental.reward_loop.reward_manager as managers

    found = {}
    for path in Path(managers.__file__).parent.glob("*.py"):
        for cls in [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]:
            names = [
                d.args[0].value
                for d in cls.decorator_list
                if isinstance(d, ast.Call)
                and d.args
                and isinstance(d.args[0], ast.Constant)
                and getattr(d.func, "id", "") == "register"
            ]
            keys = {}
            for node in ast.walk(cls):
                inner = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
                if (
                    isinstance(inner, ast.Call)
                    and isinstance(inner.func, ast.Attribute)
                    and inner.func.attr == "get"
                    and inner.args
                    and getattr(inner.args[0], "value", None) == "reward_kwargs"
                ):
                    keys[node.args[0].value] = None
            for node in ast.walk(cls):
                owner = node.value if isinstance(node, ast.Attribute) else None
                if (
                    isinstance(owner, ast.Attribute)
                    and owner.attr in keys
                    and isinstance(owner.value, ast.Name)
                    and owner.value.id == "self"
                ):
                    keys[owner.attr] = (keys[owner.attr] or frozenset()) | {node.attr}
            if keys:
                found.update({name: keys for name in names})
    return found


def test_the_reward_kwargs_table_is_what_verls_reward_managers_read():
    assert _reward_kwargs_verl_reads() == preflight.REWARD_KWARGS


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["+reward.custom_reward_function.reward_kwargs.correct_scor=2"],
            r"reward.custom_reward_function.reward_kwargs \(keyword arguments of pkg://recipe.gcpo.reward:compute_score\): "
            r"unknown key\(s\) \['correct_scor'\] \(did you mean 'correct_score'\?\); known: \['correct_score', 'timeout_s', 'wrong_score'\]",
        ),
        (
            ["+reward.custom_reward_function.reward_kwargs.ground_truth=1"],
            r"\['ground_truth'\] would replace the argument\(s\) verl passes",
        ),
        (
            ["reward.custom_reward_function.path=null", "+reward.custom_reward_function.reward_kwargs.correct_score=2"],
            r"reward_kwargs is set but custom_reward_function.path is not",
        ),
        (
            [
                "reward.custom_reward_function.path=/no/such/reward.py",
                "+reward.custom_reward_function.reward_kwargs.a=1",
            ],
            r"\(/no/such/reward.py, compute_score\) cannot be loaded here",
        ),
    ],
)
def test_custom_reward_function_kwargs_are_checked_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        preflight.check_custom_reward_kwargs(compose_gcpo(overrides))


def test_custom_reward_function_kwargs_the_function_reads_pass(tmp_path):
    preflight.check_custom_reward_kwargs(
        compose_gcpo(
            [
                "+reward.custom_reward_function.reward_kwargs.correct_score=2",
                "+reward.custom_reward_function.reward_kwargs.wrong_score=0",
            ]
        )
    )
    # a user's function with **kwargs reads what it reads; one without names its keywords
    module = tmp_path / "my_reward.py"
    module.write_text(
        "def open_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n"
        "def closed_score(data_source, solution_str, ground_truth, extra_info=None, *, scale=1.0):\n"
        "    return 0.0\n"
    )
    base = [f"reward.custom_reward_function.path={module}"]
    preflight.check_custom_reward_kwargs(
        compose_gcpo(
            base
            + [
                "reward.custom_reward_function.name=open_score",
                "+reward.custom_reward_function.reward_kwargs.anything=1",
            ]
        )
    )
    preflight.check_custom_reward_kwargs(
        compose_gcpo(
            base
            + [
                "reward.custom_reward_function.name=closed_score",
                "+reward.custom_reward_function.reward_kwargs.scale=2",
            ]
        )
    )
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['scal'\] \(did you mean 'scale'\?\)"):
        preflight.check_custom_reward_kwargs(
            compose_gcpo(
                base
                + [
                    "reward.custom_reward_function.name=closed_score",
                    "+reward.custom_reward_function.reward_kwargs.scal=2",
                ]
            )
        )


def test_filtering_on_gcpo_signal_needs_a_reward_that_reports_it(tmp_path):
    base = [
        "algorithm.filter_groups.enable=true",
        "algorithm.filter_groups.metric=gcpo_signal",
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
        ("/no/such/encoder", "algorithm.gcpo.encoder.model=/no/such/encoder is not a folder"),
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


def test_a_grpo_run_does_not_check_an_encoder_it_never_loads():
    validate(compose_gcpo(BASE + ["algorithm.adv_estimator=grpo", "algorithm.gcpo.encoder.model=/no/such/encoder"]))


# --- the loggers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "loggers, environ, message",
    [
        ('["console","tensorbord"]', {}, r"'tensorbord' is not a backend verl knows \(did you mean tensorboard\?\)"),
        ('["console","wandb"]', {"HOME": "/nonexistent"}, "W&B has no API key here"),
    ],
)
def test_a_logger_verl_would_fail_on_is_refused(loggers, environ, message):
    config = compose_gcpo(BASE + [f"trainer.logger={loggers}"])
    with pytest.raises(ValueError, match=message):
        preflight.check_loggers(config, environ=environ)


@pytest.mark.parametrize("environ", [{"WANDB_API_KEY": "k"}, {"WANDB_MODE": "offline"}, {"WANDB_MODE": "disabled"}])
def test_wandb_with_a_key_or_offline_passes(environ):
    preflight.check_loggers(compose_gcpo(BASE + ['trainer.logger=["console","wandb"]']), environ=environ)


def test_wandb_logged_in_through_netrc_passes(tmp_path):
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    preflight.check_loggers(compose_gcpo(BASE + ['trainer.logger=["wandb"]']), environ={"HOME": str(tmp_path)})


def test_a_logger_whose_package_is_missing_is_refused(monkeypatch):
    monkeypatch.setitem(preflight.LOGGER_MODULES, "tensorboard", "no_such_tensorboard_package")
    config = compose_gcpo(BASE + ['trainer.logger=["console","tensorboard"]'])
    with pytest.raises(ValueError, match="tensorboard needs the no_such_tensorboard_package package"):
        preflight.check_loggers(config, environ={})


# --- data files ------------------------------------------------------------------------------------


def test_only_the_launchers_own_files_point_at_prepare_data():
    assert "scripts/prepare_data.py" in preflight.missing_data_hint("/data/gcpo/val_aime24.parquet")
    assert "scripts/prepare_data.py" in preflight.missing_data_hint("~/data/gcpo/train.parquet")
    assert "scripts/prepare_data.py" not in preflight.missing_data_hint("/mine/my_train.parquet")


def _problem(path, monkeypatch, offline=False):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    if offline:
        monkeypatch.setenv(*offline)
    return model_path_problem(compose_gcpo([f"actor_rollout_ref.model.path='{path}'"]))


def test_a_hub_id_is_refused_when_the_hub_is_off_with_the_download_command(monkeypatch):
    for offline in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "true")):
        problem = _problem("Qwen/Qwen3-4B-Base", monkeypatch, offline)
        assert problem.startswith("actor_rollout_ref.model.path=Qwen/Qwen3-4B-Base is not a local folder, and the hub")
        assert "scripts/prepare_model.py Qwen/Qwen3-4B-Base /shared/models/Qwen3-4B-Base" in problem
        assert "MODEL_PATH" in problem
    assert _problem("Qwen/Qwen3-4B-Base", monkeypatch, ("HF_HUB_OFFLINE", "0")) is None


def test_an_absolute_folder_passes_offline_and_a_hub_id_online(monkeypatch, tmp_path):
    assert _problem(str(tmp_path), monkeypatch, ("HF_HUB_OFFLINE", "1")) is None
    assert _problem("Qwen/Qwen3-4B-Base", monkeypatch) is None  # the hub is reachable


def test_a_path_that_is_not_an_absolute_folder_is_refused_hub_or_not_with_advice_that_fits(monkeypatch, tmp_path):
    absent = tmp_path / "models" / "Qwen3-4B-Base"
    problem = _problem(str(absent), monkeypatch)  # the hub is reachable, but this is no hub id
    assert problem.startswith(f"actor_rollout_ref.model.path={absent} is not a folder on this machine")
    assert f"python scripts/prepare_model.py <hub id> {absent} downloads one there" in problem
    assert "/shared/models/" not in problem  # the hub-id advice does not fit a path
    # relative or ~: the workers start elsewhere and expand nothing, so even an existing folder is refused
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "models").mkdir()
    problem = _problem("~/models", monkeypatch, ("HF_HUB_OFFLINE", "1"))
    assert problem == (
        "actor_rollout_ref.model.path=~/models is not an absolute path: the workers start in other folders and do "
        f"not expand ~; give it (the launchers' MODEL_PATH) as {tmp_path / 'models'}"
    )
    monkeypatch.chdir(tmp_path)
    assert _problem("./models", monkeypatch).endswith(f"as {tmp_path / 'models'}")
    assert "is not an absolute path" in _problem("../models", monkeypatch)
