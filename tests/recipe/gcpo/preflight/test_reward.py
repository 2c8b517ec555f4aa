"""The reward's start-up checks (recipe/gcpo/preflight/reward.py): the function verl's reward workers will load, the
keyword arguments verl passes it and the reward manager's, and DAPO's filter on gcpo_signal."""

import pytest

from recipe.gcpo.config import run_checks
from recipe.gcpo.preflight import config_facts, reward, validate
from tests.recipe.gcpo.conftest import BASE, DAPO_REWARD, compose_gcpo
from tests.recipe.gcpo.preflight.conftest import reward_file

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
    extra = [] if body is None else [f"reward.custom_reward_function.path={reward_file(tmp_path, body)}"]
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
    path = reward_file(tmp_path, body)
    config = compose_gcpo(
        BASE
        + [
            f"reward.custom_reward_function.path={path}",
            "reward.custom_reward_function.name=my_score",
            "+reward.custom_reward_function.reward_kwargs={scale:2}",
        ]
    )
    run_checks(reward.FUNCTION_CHECKS, config_facts(config))


# --- the reward's keyword arguments and DAPO's filter metric ------------------------------------------------


def check_reward(config) -> None:
    """The reward's table alone (validate runs it after verl's and the recipe's)."""
    run_checks(reward.CHECKS, config_facts(config))


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
        (["reward.reward_kwargs.max_resp_len=2048"], r"max_resp_len: 2048 must be >= overlong_buffer_cfg.len=4096"),
        (["reward.reward_kwargs.overlong_buffer_cfg.len=0"], r"overlong_buffer_cfg.len: must be > 0"),
    ],
)
def test_reward_kwargs_are_checked_against_what_the_reward_manager_reads(overrides, message):
    check_reward(compose_gcpo(DAPO_REWARD))
    with pytest.raises(ValueError, match=message):
        check_reward(compose_gcpo(DAPO_REWARD + overrides))


def test_an_enabled_overlong_buffer_needs_every_value_the_dapo_manager_reads():
    partial = [o for o in DAPO_REWARD if "penalty_factor" not in o and "max_resp_len" not in o]
    with pytest.raises(
        ValueError,
        match="overlong_buffer_cfg: enable=true, but the DAPO reward manager also reads overlong_buffer_cfg.penalty_factor",
    ):
        check_reward(compose_gcpo(partial))
    with pytest.raises(
        ValueError, match="max_resp_len: missing: reward.reward_kwargs.overlong_buffer_cfg.enable=true needs it"
    ):
        check_reward(compose_gcpo(partial + ["+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1"]))


def test_an_overlong_buffer_without_enable_is_refused_before_the_reward_workers_read_it():
    # e.g. a launcher's buffer length with the protocol group removed (~protocol): verl's DAPO manager reads .enable
    without = [o for o in DAPO_REWARD if ".enable=" not in o]
    with pytest.raises(
        ValueError,
        match=r"overlong_buffer_cfg.enable: missing from overlong_buffer_cfg \(\['len', 'log', 'penalty_factor'\]\)",
    ):
        check_reward(compose_gcpo(without))


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
    assert _reward_kwargs_verl_reads() == reward.REWARD_KWARGS


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
            r"reward_kwargs: set, but custom_reward_function.path is not",
        ),
        (
            [
                "reward.custom_reward_function.path=/no/such/reward.py",
                "+reward.custom_reward_function.reward_kwargs.a=1",
            ],
            # the function's own check refuses it first (check_custom_reward_kwargs, which validate ran after it,
            # had its own "cannot be loaded here" that only a direct call reached)
            r"reward.custom_reward_function.path: /no/such/reward.py does not exist",
        ),
    ],
)
def test_custom_reward_function_kwargs_are_checked_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        check_reward(compose_gcpo(overrides))


def test_custom_reward_function_kwargs_the_function_reads_pass(tmp_path):
    check_reward(
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
    check_reward(
        compose_gcpo(
            base
            + [
                "reward.custom_reward_function.name=open_score",
                "+reward.custom_reward_function.reward_kwargs.anything=1",
            ]
        )
    )
    check_reward(
        compose_gcpo(
            base
            + [
                "reward.custom_reward_function.name=closed_score",
                "+reward.custom_reward_function.reward_kwargs.scale=2",
            ]
        )
    )
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['scal'\] \(did you mean 'scale'\?\)"):
        check_reward(
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
