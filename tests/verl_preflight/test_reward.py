"""The reward's checks (verl_preflight/reward.py): the function verl's reward workers will load, the keyword arguments
verl passes it and the reward manager's (DAPO's overlong buffer), and DAPO's filter on a metric. verl's legacy reward
keys are test_legacy_reward.py's; the recipe's filter on gcpo_signal is tests/recipe/gcpo/test_checks.py's."""

import ast
from pathlib import Path

import pytest

import verl_preflight.reward as reward
from tests.recipe.gcpo.conftest import DAPO_REWARD, compose_gcpo
from tests.verl_preflight.conftest import VERL_BASE, compose_verl, reward_file
from verl_preflight import ConfigError, check_config
from verl_preflight.reward import check_function, check_reward

FN = "reward.custom_reward_function"
BUF = "reward.reward_kwargs.overlong_buffer_cfg"

# --- the reward function ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, overrides, message",
    [
        (None, [f"{FN}.path=/nowhere/reward.py"], "/nowhere/reward.py does not exist"),
        (None, [f"{FN}.path=pkg://no_such_module"], "no module no_such_module is importable"),
        ("def other(**kw):\n    return 0\n", [f"{FN}.name=my_score"], "defines no 'my_score'"),
        ("my_score = 3\n", [f"{FN}.name=my_score"], "is not a function"),
        ("import no_such_dependency\n", [f"{FN}.name=my_score"], "fails to load here: ModuleNotFoundError"),
        (
            "def my_score(response, answer):\n    return 0\n",
            [f"{FN}.name=my_score"],
            "cannot take data_source, solution_str, ground_truth, extra_info",
        ),
        (
            "def my_score(data_source, solution_str, ground_truth, extra_info, scale):\n    return 0\n",
            [f"{FN}.name=my_score"],
            "requires scale, which verl does not pass",
        ),
    ],
)
def test_a_reward_function_that_would_fail_in_the_workers_is_refused(tmp_path, body, overrides, message):
    extra = [] if body is None else [f"{FN}.path={reward_file(tmp_path, body)}"]
    config = compose_verl(VERL_BASE + extra + overrides)
    with pytest.raises(ValueError, match=message):
        check_config(config, machine_checks=False)


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
    config = compose_verl(VERL_BASE + [f"{FN}.path={path}", f"{FN}.name=my_score", f"+{FN}.reward_kwargs={{scale:2}}"])
    function = check_function(config, FN)
    assert callable(function) and function.__name__ == "my_score"


def test_no_reward_function_is_verls_data_source_dispatch():
    config = compose_verl(VERL_BASE)
    assert reward.reward_function(config) == (None, "compute_score")
    assert check_function(config, FN) is None


@pytest.mark.parametrize(
    "overrides, message",
    [
        ([f"{FN}.path=123"], f"{FN}.path: must be a file path or pkg://<module>, got 123"),
        (
            [f"{FN}.path=pkg://recipe.gcpo.reward", f"{FN}.name=123"],
            f"{FN}.name: must be the name of a function, got 123",
        ),
    ],
    ids=["path", "name"],
)
def test_a_reward_function_named_by_no_string_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as refused:
        check_config(compose_verl(VERL_BASE + overrides), machine_checks=False)
    assert str(refused.value) == message


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
        (["reward.reward_kwargs.max_resp_len=2048"], r"max_resp_len: 2048 must be >= overlong_buffer_cfg.len=4096"),
        (["reward.reward_kwargs.overlong_buffer_cfg.len=0"], r"overlong_buffer_cfg.len: must be > 0"),
    ],
)
def test_reward_kwargs_are_checked_against_what_the_reward_manager_reads(overrides, message):
    check_reward(compose_verl(VERL_BASE + DAPO_REWARD))
    with pytest.raises(ValueError, match=message):
        check_reward(compose_verl(VERL_BASE + DAPO_REWARD + overrides))


def test_an_enabled_overlong_buffer_needs_every_value_the_dapo_manager_reads():
    partial = [o for o in DAPO_REWARD if "penalty_factor" not in o and "max_resp_len" not in o]
    with pytest.raises(
        ValueError,
        match="overlong_buffer_cfg: enable=true, but the DAPO reward manager also reads overlong_buffer_cfg.penalty_factor",
    ):
        check_reward(compose_verl(VERL_BASE + partial))
    with pytest.raises(
        ValueError, match="max_resp_len: missing: reward.reward_kwargs.overlong_buffer_cfg.enable=true needs it"
    ):
        check_reward(compose_verl(VERL_BASE + partial + [f"+{BUF}.penalty_factor=1"]))


def test_an_overlong_buffer_without_enable_is_refused_before_the_reward_workers_read_it():
    # e.g. a launcher's buffer length with the protocol group removed (~protocol): verl's DAPO manager reads .enable
    without = [o for o in DAPO_REWARD if ".enable=" not in o]
    with pytest.raises(
        ValueError,
        match=r"overlong_buffer_cfg.enable: missing from overlong_buffer_cfg \(\['len', 'log', 'penalty_factor'\]\)",
    ):
        check_reward(compose_verl(VERL_BASE + without))


DAPO_REFUSED = [
    # a string is true to verl: enable='no' would shape
    ([f"{BUF}.enable='no'"], f"{BUF}.enable: must be true or false, got 'no'"),
    ([f"{BUF}.log=1"], f"{BUF}.log: must be true or false, got 1"),
    ([f"{BUF}.len=abc"], f"{BUF}.len: must be a number, got 'abc'"),
    ([f"{BUF}.penalty_factor=true"], f"{BUF}.penalty_factor: must be a number, got True"),
    # a negative factor penalises short responses and rewards long ones
    ([f"{BUF}.penalty_factor=-1"], f"{BUF}.penalty_factor: must be >= 0, got -1"),
    ([f"{BUF}.penalty_factor=null"], f"{BUF}.penalty_factor: must be >= 0, got None"),  # verl multiplies by it
    (
        ["reward.reward_kwargs.max_resp_len=8192.0"],
        "reward.reward_kwargs.max_resp_len: must be an integer (tokens), got 8192.0",
    ),
    (  # the penalty would start past the longest response: never a full one
        ["data.max_response_length=4096"],
        "reward.reward_kwargs.max_resp_len: 8192 must equal data.max_response_length=4096: longer, the penalty never "
        "reaches -penalty_factor; shorter, it goes below it (verl's DAPO recipe sets max_resp_len to it; "
        "${data.max_response_length} does)",
    ),
]


def test_a_reward_function_name_without_its_path_is_refused_on_verls_stock_config():
    """verl's stock config leaves the path null: a name alone would run verl's data_source dispatch, silently."""
    with pytest.raises(ConfigError) as refused:
        check_config(compose_verl(VERL_BASE + ["reward.custom_reward_function.name=my_score"]), machine_checks=False)
    assert str(refused.value) == (
        "reward.custom_reward_function.name: 'my_score' without reward.custom_reward_function.path: verl would run its "
        "data_source dispatch and ignore the name; set the path of the file that defines it"
    )
    check_config(compose_verl(VERL_BASE + ["reward.custom_reward_function.name=compute_score"]), machine_checks=False)


@pytest.mark.parametrize(
    "overrides, message",
    DAPO_REFUSED,
    ids=[message.partition(":")[0].rpartition(".")[2] for _, message in DAPO_REFUSED],
)
def test_a_dapo_buffer_value_verl_would_misread_is_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as refused:
        check_config(compose_verl(VERL_BASE + DAPO_REWARD + overrides), machine_checks=False)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        [f"{BUF}.enable=false"],
        [f"{BUF}.enable=false", f"{BUF}.penalty_factor=-1"],  # not read with the buffer off
        [f"{BUF}.penalty_factor=0"],  # no shaping
        [f"{BUF}.log=true"],
        [f"{BUF}.len=4096.0"],
    ],
)
def test_dapo_buffer_values_verl_reads_pass(overrides):
    check_config(compose_verl(VERL_BASE + DAPO_REWARD + overrides), machine_checks=False)


def _reward_kwargs_verl_reads() -> dict[str, dict]:
    """Reward manager name -> {key: the sub-keys it reads, None for a value}, from verl's reward manager source:
    ``config.reward.get("reward_kwargs", ...).get(KEY)`` and then ``self.KEY.SUB``."""
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
            [f"+{FN}.reward_kwargs.correct_scor=2"],
            r"reward.custom_reward_function.reward_kwargs \(keyword arguments of pkg://recipe.gcpo.reward:compute_score\): "
            r"unknown key\(s\) \['correct_scor'\] \(did you mean 'correct_score'\?\); known: \['correct_score', 'timeout_s', 'wrong_score'\]",
        ),
        ([f"+{FN}.reward_kwargs.ground_truth=1"], r"\['ground_truth'\] would replace the argument\(s\) verl passes"),
        (
            # verl passes these when a reward model serves the run: the recipe's function takes them by keyword
            [f"+{FN}.reward_kwargs.reward_router_address=x"],
            r"\['reward_router_address'\] would replace the argument\(s\) verl passes",
        ),
        (
            [f"{FN}.path=null", f"+{FN}.reward_kwargs.correct_score=2"],
            r"reward_kwargs: set, but custom_reward_function.path is not",
        ),
        (
            [f"{FN}.path=/no/such/reward.py", f"+{FN}.reward_kwargs.a=1"],
            # the function's own check refuses it first
            r"reward.custom_reward_function.path: /no/such/reward.py does not exist",
        ),
    ],
)
def test_custom_reward_function_kwargs_are_checked_by_name(overrides, message):
    """On the recipe's config, whose reward (pkg://recipe.gcpo.reward) takes keyword arguments of its own."""
    with pytest.raises(ValueError, match=message):
        check_reward(compose_gcpo(overrides))


def test_custom_reward_function_kwargs_the_function_reads_pass(tmp_path):
    check_reward(compose_gcpo([f"+{FN}.reward_kwargs.correct_score=2", f"+{FN}.reward_kwargs.wrong_score=0"]))
    # a user's function with **kwargs reads what it reads; one without names its keywords
    module = tmp_path / "my_reward.py"
    module.write_text(
        "def open_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n"
        "def closed_score(data_source, solution_str, ground_truth, extra_info=None, *, scale=1.0):\n"
        "    return 0.0\n"
    )
    base = VERL_BASE + [f"{FN}.path={module}"]
    check_reward(compose_verl(base + [f"{FN}.name=open_score", f"+{FN}.reward_kwargs.anything=1"]))
    check_reward(compose_verl(base + [f"{FN}.name=closed_score", f"+{FN}.reward_kwargs.scale=2"]))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['scal'\] \(did you mean 'scale'\?\)"):
        check_reward(compose_verl(base + [f"{FN}.name=closed_score", f"+{FN}.reward_kwargs.scal=2"]))


def test_filtering_on_a_metric_neither_the_manager_nor_the_function_reports_is_refused(tmp_path):
    own = tmp_path / "my_reward.py"
    own.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    return {'score': 1.0, 'acc': 1.0}\n"
    )
    base = VERL_BASE + ["algorithm.filter_groups.enable=true", f"{FN}.path={own}"]
    with pytest.raises(ConfigError) as refused:
        check_reward(compose_verl(base + ["algorithm.filter_groups.metric=seq_reward"]))
    assert str(refused.value) == (
        "algorithm.filter_groups.metric: seq_reward is read from each response's reward_extra_info, but neither "
        f"reward manager naive nor the reward function ({own}) reports it: use reward (the reward itself), a key the "
        "function returns, or acc with the dapo manager"
    )
    check_reward(compose_verl(base + ["algorithm.filter_groups.metric=acc"]))  # the function returns it
    check_reward(compose_verl(base + ["algorithm.filter_groups.metric=reward"]))  # the reward itself
    check_reward(compose_verl(base + DAPO_REWARD + ["algorithm.filter_groups.metric=overlong"]))  # DAPO's manager
