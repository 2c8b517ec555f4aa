"""check_config (verl_preflight/__init__.py): every check of a config in order, an extension's rules among them, this
machine's last (a dry run's as warnings); one failure style, a ConfigError, which only the front door
(verl_preflight/front_door.py) turns into its line; and ``python -m verl_preflight``."""

import ast
from pathlib import Path

import pytest

import verl_preflight
from tests.verl_preflight.conftest import VERL_BASE, VERL_CONFIG, check_style_problems, compose_verl, reward_file
from verl_preflight import ConfigError, Extension, check_config
from verl_preflight.__main__ import main
from verl_preflight.front_door import CONFIG_ERROR_EXIT, run

PACKAGE = Path(verl_preflight.__file__).resolve().parent
ROOT = PACKAGE.parent
NO_MODEL = (
    "actor_rollout_ref.model.path: /models/m is not a folder on this machine: set it (the launchers' MODEL_PATH) to "
    "the folder of a downloaded model (python scripts/prepare_model.py <hub id> /models/m downloads one there)"
)


def test_a_run_stops_on_this_machine_a_dry_run_warns_and_a_check_of_the_config_alone_skips_it():
    with pytest.raises(ConfigError) as refused:
        check_config(compose_verl(VERL_BASE))
    assert str(refused.value) == NO_MODEL
    assert check_config(compose_verl(VERL_BASE), dry_run=True) == ([], [NO_MODEL], None)
    assert check_config(compose_verl(VERL_BASE), machine_checks=False) == ([], [], None)


def test_a_dry_run_still_refuses_the_config():
    with pytest.raises(ConfigError, match="^trainer.device: must be one of"):
        check_config(compose_verl(VERL_BASE + ["trainer.device=tpu"]), dry_run=True)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["trainer.device=tpu", "+trainer.totl_epochs=1"], "trainer.device"),  # the value table before the schema
        (["+trainer.totl_epochs=1", "algorithm.adv_estimator=nope"], "trainer.totl_epochs"),  # the schema, the rules
        (["algorithm.adv_estimator=nope", "reward.custom_reward_function.path=/no/r.py"], "algorithm.adv_estimator"),
        (["reward.custom_reward_function.path=/no/r.py", "trainer.logger=1"], "reward.custom_reward_function.path"),
    ],
)
def test_the_first_problem_in_the_order_of_the_checks_is_the_one_named(overrides, key):
    with pytest.raises(ConfigError) as refused:
        check_config(compose_verl(VERL_BASE + overrides), machine_checks=False)
    assert refused.value.key == key


def test_an_extensions_blocks_estimators_rules_and_reward(tmp_path):
    (tmp_path / "own").mkdir()
    own, legacy = reward_file(tmp_path / "own"), reward_file(tmp_path)  # the extension's reward, a launcher's
    seen = []

    def rules(config):
        seen.append(config.reward.custom_reward_function.path)  # after the legacy reward keys moved
        if config.algorithm.mine.x < 0:
            raise ConfigError("algorithm.mine.x", "must be >= 0")
        return {"x": config.algorithm.mine.x}

    mine = Extension(
        name="mine",
        blocks=lambda: ("algorithm.mine",),
        estimators=lambda: ("grpoo",),
        rules=rules,
        reward=(str(own), "my_score"),
    )
    overrides = VERL_BASE + ["+algorithm.mine.x=1", f"reward.custom_reward_function.path={own}"]
    overrides += ["reward.custom_reward_function.name=my_score", f"custom_reward_function.path={legacy}"]
    overrides += ["custom_reward_function.name=my_score"]
    checked = check_config(compose_verl(overrides), mine, machine_checks=False)
    # a legacy block replaces the extension's own reward without a clash
    assert checked.settings == {"x": 1} and seen == [str(legacy)]
    assert checked.notes == [
        f"custom_reward_function (verl's legacy key) -> reward.custom_reward_function: {legacy}:my_score, moved as "
        "verl's migrate_legacy_reward_impl moves it"
    ]
    with pytest.raises(ConfigError, match="name different reward functions"):  # not the config's default: a clash
        check_config(compose_verl(overrides), Extension(blocks=mine.blocks), machine_checks=False)
    check_config(compose_verl(overrides + ["algorithm.adv_estimator=grpoo"]), mine, machine_checks=False)
    with pytest.raises(ConfigError, match="^algorithm.adv_estimator: grpoo is not an estimator verl registers"):
        check_config(compose_verl(VERL_BASE + ["algorithm.adv_estimator=grpoo"]), machine_checks=False)
    with pytest.raises(ConfigError) as refused:  # its rules come before the reward's
        check_config(
            compose_verl(overrides + ["algorithm.mine.x=-1", "+reward.reward_kwargs.foo=1"]), mine, machine_checks=False
        )
    assert str(refused.value) == "algorithm.mine.x: must be >= 0"
    with pytest.raises(ConfigError, match="^algorithm.mine: not a key verl 0.9.1 reads"):  # without the extension
        check_config(compose_verl(VERL_BASE + ["+algorithm.mine.x=1"]), machine_checks=False)


# --- one failure style --------------------------------------------------------------------------------------------


def test_every_check_raises_a_config_error_and_returns_nothing_else():
    """A check refuses by raising ConfigError (``refuse``), never by returning its problem or raising another error;
    the few that return a value return what they read (conftest.CHECK_RETURNS)."""
    assert check_style_problems(ROOT, PACKAGE.glob("*.py")) == []


def test_only_the_front_door_turns_a_refusal_into_its_line_and_exit_status():
    """No module of the package prints a refusal or exits: front_door.fail does, called by front_door.run alone."""
    exits, callers = [], []
    for path in sorted(PACKAGE.glob("*.py")):
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Raise) and node.exc is not None and "SystemExit" in ast.unparse(node.exc):
                    exits.append(f"{path.name}:{function.name}")
                if isinstance(node, ast.Call) and ast.unparse(node.func) in ("fail", "sys.exit", "os._exit", "exit"):
                    callers.append(f"{path.name}:{function.name}:{ast.unparse(node.func)}")
    assert sorted(set(exits)) == ["front_door.py:fail", "front_door.py:run"]  # run: Ctrl-C's 130
    assert sorted(set(callers)) == ["front_door.py:run:fail"]


def test_the_front_door_prints_a_refusal_in_one_line_with_exit_status_2(capsys):
    def check(composition, request):
        raise ConfigError("trainer.total_epochs", "must be\nan integer")  # one line, whatever the text

    with pytest.raises(SystemExit) as stopped:
        run(["trainer.total_epochs=1"], VERL_CONFIG, "ppo_trainer", "prog", check, lambda *a: None)
    assert stopped.value.code == CONFIG_ERROR_EXIT == 2
    assert capsys.readouterr().err == "error: trainer.total_epochs: must be an integer\n"


def test_python_m_verl_preflight_passes_a_stock_config_with_this_machines_warnings(capsys):
    main(VERL_BASE)
    out = capsys.readouterr().out
    assert f"warning (a run here stops on it): {NO_MODEL}\n" in out
    assert out.endswith(
        f"verl_preflight: {VERL_CONFIG / 'ppo_trainer'}.yaml with {len(VERL_BASE)} override(s) passes: "
        "algorithm.adv_estimator=grpo, trainer.v1.trainer_mode=sync, 1 node(s) x 8 cuda device(s)\n"
    )


def test_python_m_verl_preflight_refuses_in_one_line(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(VERL_BASE + ["actor_rollout_ref.rollout.dtype=bf16"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "error: actor_rollout_ref.rollout.dtype: must be one of null, auto, bfloat16, float, float16, float32, half, "
        "got 'bf16': did you mean bfloat16?\n"
    )
