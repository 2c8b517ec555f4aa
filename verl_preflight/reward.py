"""Checks of the reward verl's reward workers will run, which would otherwise fail in every reward worker after the
models are up, or be ignored: verl's legacy top-level reward keys moved into ``reward.*`` first
(:func:`migrate_legacy_reward`, verl's own migration), then the reward manager's keyword arguments, the reward
function (it loads, takes what verl passes it), its keyword arguments, and DAPO's group filter's metric.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
from typing import Any, Callable, Mapping, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_preflight.errors import ConfigError, check_known, plain, refuse

# verl's built-in reward when reward.custom_reward_function.path is null: a scorer chosen by each row's data_source
DATA_SOURCE_DISPATCH = "verl's data_source dispatch (verl.utils.reward_score.default_compute_score)"
# the arguments verl 0.9.1's reward managers pass a custom reward function by name (verl/experimental/reward_loop/
# reward_manager/*.py); and those passed only when a reward model serves the run (reward_kwargs merged over both
# would replace one of the same name)
REWARD_FN_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
REWARD_FN_ROUTER_ARGS = ("reward_router_address", "reward_model_tokenizer")
# DAPO's group filter reads "reward" (the reward itself) or a key of each response's reward_extra_info (verl/trainer/
# ppo/v1/replay_buffer.py): these the reward managers add themselves; any other must come from the reward function
FILTER_GROUPS_REWARD_METRIC = "reward"
MANAGER_METRICS = {"dapo": ("acc", "overlong_reward", "overlong"), "gdpo": ("acc",), "rate_limited": ("acc", "timeout")}
# verl's name of a custom reward function when its config names none
DEFAULT_REWARD_FN_NAME = "compute_score"
# reward.reward_kwargs as verl 0.9.1's reward managers read it from the raw config (key -> its sub-keys, None for a
# value; only verl/experimental/reward_loop/reward_manager/dapo.py reads any): added with "+" outside verl's schema, a
# misspelt key would be a silent no-op. tests/verl_preflight/test_reward.py reads verl's source to keep it true.
REWARD_KWARGS: dict[str, dict[str, frozenset[str] | None]] = {
    "dapo": {"max_resp_len": None, "overlong_buffer_cfg": frozenset({"enable", "len", "penalty_factor", "log"})},
}
BUFFER, BUFFER_KEYS = "overlong_buffer_cfg", REWARD_KWARGS["dapo"]["overlong_buffer_cfg"]
KW, BUF, FN_KW = "reward.reward_kwargs", f"reward.reward_kwargs.{BUFFER}", "reward.custom_reward_function.reward_kwargs"
LEGACY_KEYS = ("custom_reward_function", "reward_model", "sandbox_fusion")


def reward_function(config: DictConfig) -> tuple[Optional[str], str]:
    """(path, name) of the custom reward function the config names: path None for verl's data_source dispatch, name
    verl's default when the config gives none."""
    block = OmegaConf.select(config, "reward.custom_reward_function") or {}
    return block.get("path"), block.get("name") or DEFAULT_REWARD_FN_NAME


def function_source(path: Optional[str]) -> Optional[str]:
    """The text of a reward function's module (verl's scorers' for None); None where it is not here (it may exist
    only on the cluster: verl reports that)."""
    path = path or "pkg://verl.utils.reward_score"
    try:
        origin = importlib.util.find_spec(path[6:]).origin if path.startswith("pkg://") else os.path.expanduser(path)
        with open(origin, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, TypeError, ValueError, ImportError, AttributeError):
        return None


def check_reward(config: DictConfig) -> None:
    """The reward manager's keyword arguments, the reward function, its keyword arguments, DAPO's filter metric.

    Raises:
        ConfigError: the first that verl's reward workers would fail on, or ignore.
    """
    check_reward_kwargs(config)
    path, name = reward_function(config)
    if not path and name != DEFAULT_REWARD_FN_NAME:  # verl runs its data_source dispatch and ignores the name
        refuse(
            "reward.custom_reward_function.name",
            f"{name!r} without reward.custom_reward_function.path: verl would run its data_source dispatch and "
            "ignore the name; set the path of the file that defines it",
        )
    function = check_function(config, "reward.custom_reward_function")
    fn_kwargs = plain(OmegaConf.select(config, FN_KW)) or {}
    # custom_reward_function.reward_kwargs, which verl passes the function as keyword arguments: a misspelt one is
    # dropped by a **kwargs or fails in every reward worker, and one named as an argument verl passes replaces it
    if fn_kwargs:
        if not isinstance(fn_kwargs, Mapping):
            refuse(FN_KW, f"must be a mapping, got {fn_kwargs!r}")
        if not path:
            refuse(FN_KW, "set, but custom_reward_function.path is not: verl would ignore them")
        if clash := sorted(set(fn_kwargs) & {*REWARD_FN_ARGS, *REWARD_FN_ROUTER_ARGS}):
            refuse(FN_KW, f"{clash} would replace the argument(s) verl passes the reward function for each response")
        if unknown := _signature(function, fn_kwargs).get("unknown"):
            refuse(f"{FN_KW} (keyword arguments of {path}:{name})", unknown)
    # DAPO's group filter on a metric the reward does not report stops the run at its first step ("Finished groups
    # are missing DAPO metric ..."); a reward function whose module never names the key cannot report it
    groups = OmegaConf.select(config, "algorithm.filter_groups") or {}
    metric, manager = groups.get("metric"), config.reward.reward_manager.name
    if groups.get("enable", False) and metric not in (FILTER_GROUPS_REWARD_METRIC, *MANAGER_METRICS.get(manager, ())):
        source = function_source(path)
        if source is not None and not re.search(rf"""['"]{re.escape(str(metric))}['"]""", source):
            refuse(
                "algorithm.filter_groups.metric",
                f"{metric} is read from each response's reward_extra_info, but neither reward manager {manager} nor "
                f"the reward function ({path or DATA_SOURCE_DISPATCH}) reports it: use {FILTER_GROUPS_REWARD_METRIC} "
                "(the reward itself), a key the function returns, or "
                f"{', '.join(MANAGER_METRICS.get(manager, ())) or 'acc with the dapo manager'}",
            )


def check_reward_kwargs(config: DictConfig) -> None:
    """reward.reward_kwargs: keys the selected reward manager reads, and the DAPO manager's own checks of its overlong
    buffer (which it runs in every reward worker, after the models are up; it reads .enable first)."""
    kwargs, manager = plain(OmegaConf.select(config, KW)), config.reward.reward_manager
    if not kwargs:
        return
    if not isinstance(kwargs, Mapping):
        refuse(KW, f"must be a mapping, got {kwargs!r}")
    if manager.get("source", "register") != "register":  # a manager of the user's own reads what it reads
        return
    if manager.name not in REWARD_KWARGS:
        refuse(
            KW,
            f"{sorted(kwargs)} is read only by reward.reward_manager.name={', '.join(sorted(REWARD_KWARGS))} in verl "
            f"0.9.1: reward_manager.name={manager.name} would ignore it",
        )
    check_known(KW, kwargs, REWARD_KWARGS[manager.name])
    buffer = kwargs.get(BUFFER)
    if buffer is None:
        return
    if not isinstance(buffer, Mapping):
        refuse(BUF, f"must be a mapping, got {buffer!r}")
    check_known(BUF, buffer, BUFFER_KEYS)
    if buffer and "enable" not in buffer:
        refuse(
            f"{BUF}.enable",
            f"missing from {BUFFER} ({sorted(buffer)}): set it to true or false (a protocol=<name> sets it)",
        )
    for key, value in buffer.items():  # what DAPO's manager computes with, in every reward worker
        kind = bool if key in ("enable", "log") else (int, float)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool) != (kind is bool)):
            refuse(f"{BUF}.{key}", f"must be {'true or false' if kind is bool else 'a number'}, got {value!r}")
    if not buffer.get("enable"):
        return
    if missing := ", ".join(f"{BUFFER}.{key}" for key in sorted(BUFFER_KEYS - set(buffer))):
        refuse(BUF, f"enable=true, but the DAPO reward manager also reads {missing}; set them")
    if kwargs.get("max_resp_len") is None:
        refuse(f"{KW}.max_resp_len", f"missing: {BUF}.enable=true needs it")
    if not isinstance(kwargs["max_resp_len"], int) or isinstance(kwargs["max_resp_len"], bool):
        refuse(f"{KW}.max_resp_len", f"must be an integer (tokens), got {kwargs['max_resp_len']!r}")
    if not (buffer["len"] or 0) > 0:
        refuse(f"{BUF}.len", f"must be > 0 when the buffer is enabled, got {buffer['len']}")
    if kwargs["max_resp_len"] < buffer["len"]:
        refuse(f"{KW}.max_resp_len", f"{kwargs['max_resp_len']} must be >= {BUFFER}.len={buffer['len']}")
    if kwargs["max_resp_len"] != config.data.max_response_length:  # DAPO's shaping counts from the longest response
        refuse(
            f"{KW}.max_resp_len",
            f"{kwargs['max_resp_len']} must equal data.max_response_length={config.data.max_response_length}: "
            "longer, the penalty never reaches -penalty_factor; shorter, it goes below it (verl's DAPO recipe sets "
            "max_resp_len to it; ${data.max_response_length} does)",
        )
    if buffer["penalty_factor"] is None or buffer["penalty_factor"] < 0:  # verl multiplies by it; < 0 rewards length
        refuse(f"{BUF}.penalty_factor", f"must be >= 0, got {buffer['penalty_factor']}")


def check_function(config: DictConfig, written_as: str) -> Optional[Callable]:
    """The function verl's reward workers will load: its file or module exists, loads here, defines a function that
    takes the arguments verl passes by name; returns it (None: verl's data_source dispatch). ``written_as``: the
    block the user wrote it in, which a refusal names (verl's legacy one, as it moves)."""
    path, name = reward_function(config)
    if not path:
        return None
    if not isinstance(path, str):
        refuse(f"{written_as}.path", f"must be a file path or pkg://<module>, got {path!r}")
    if not isinstance(name, str):
        refuse(f"{written_as}.name", f"must be the name of a function, got {name!r}")
    module = path[6:] if path.startswith("pkg://") else None
    if module is not None and not _importable(module):
        refuse(f"{written_as}.path", f"{path}: no module {module} is importable here")
    if module is None and not os.path.isfile(os.path.expanduser(path)):
        refuse(
            f"{written_as}.path",
            f"{path} does not exist (a reward file every node can read: a path on shared storage, or pkg://<module>)",
        )
    function = _load(path, name, written_as)
    if not callable(function):
        refuse(f"{written_as}.name", f"{path}:{name} is not a function")
    fn_kwargs = plain(OmegaConf.select(config, FN_KW)) or {}
    signature = _signature(function, fn_kwargs if isinstance(fn_kwargs, Mapping) else {})
    if signature.get("missing"):
        refuse(
            f"{written_as}.name",
            f"{path}:{name}{signature['text']} cannot take {signature['missing']}: verl's reward managers call it with "
            + ", ".join(f"{a}=..." for a in REWARD_FN_ARGS),
        )
    if signature.get("required"):
        refuse(
            f"{written_as}.name",
            f"{path}:{name} requires {signature['required']}, which verl does not pass: give them a default or set "
            f"{written_as}.reward_kwargs",
        )
    return function


# the reward functions loaded in this process, by (path, name): a legacy block is checked as it moves, then the same
# function again under reward.*
_loaded: dict[tuple, Callable[..., Any]] = {}


def _load(path: str, name: str, written_as: str) -> Any:
    """The reward function, loaded as verl's reward workers load it."""
    local = None if path.startswith("pkg://") else os.path.realpath(os.path.expanduser(path))
    key = (path, name) if local is None else (local, os.stat(local).st_mtime_ns, name)  # a file edited: loaded again
    if key in _loaded:
        return _loaded[key]
    from verl.utils.import_utils import load_extern_object

    try:
        function = load_extern_object(module_path=path, object_name=name)
    except SystemExit as stop:  # a module that exits as it is imported would end the start-up with its status
        problem = f"{path} exits as it is imported (sys.exit({stop.code!r})): verl's reward workers import it"
        raise ConfigError(f"{written_as}.path", problem) from None
    except AttributeError:
        raise ConfigError(f"{written_as}.name", f"{path} defines no {name!r}") from None
    except Exception as err:
        cause = err.__cause__ or err  # verl wraps an import's error in its own RuntimeError
        raise ConfigError(f"{written_as}.path", f"{path} fails to load here: {type(cause).__name__}: {cause}") from None
    _loaded[key] = function
    return function


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _signature(function: Any, fn_kwargs: Mapping) -> dict[str, str]:
    """The problems verl's call meets in the reward function's signature ("" for none): {} where it has none to read
    (a builtin or C function: verl will find out)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return {}
    parameters, passed = signature.parameters.values(), {*REWARD_FN_ARGS, *fn_kwargs}
    named = {p.name: p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)  # a **kwargs reads what it reads
    unknown = ""
    if not takes_any:
        try:
            check_known("", fn_kwargs, set(named) - {*REWARD_FN_ARGS, *REWARD_FN_ROUTER_ARGS})
        except ConfigError as error:
            unknown = error.problem
    return {
        "text": str(signature),
        "missing": "" if takes_any else ", ".join(a for a in REWARD_FN_ARGS if a not in named),
        "required": ", ".join(n for n, p in named.items() if p.default is p.empty and n not in passed),
        "unknown": unknown,
    }


def migrate_legacy_reward(config: DictConfig, default: tuple[Optional[str], Optional[str]] = (None, None)) -> list[str]:
    """Move verl's legacy top-level reward keys into ``reward.*`` with verl's own migration, in place; returns one
    line per block moved. verl 0.9.1's V1 trainer reads only ``reward.*`` (only verl's fully-async entry point
    migrates them, with ``migrate_legacy_reward_impl``), so a launcher's ``custom_reward_function.path=my_reward.py``
    trains on it instead of being ignored. ``default``: (path, name) of the reward function the config names when the
    user names none (a recipe's own), which a legacy block replaces without a clash.

    Raises:
        ConfigError: a classic block that names no function verl could run, one that names another than
            ``reward.custom_reward_function``, or the function's checks under the legacy keys.
    """
    moved = [k for k in LEGACY_KEYS if isinstance(v := plain(config.get(k)), Mapping) and _set(v)]
    if not moved:
        return []
    lines = []
    if "custom_reward_function" in moved:
        classic = {"path": None, "name": None, **plain(config.custom_reward_function)}
        path, name = reward_function(config)
        # reward.custom_reward_function names a function of its own: the classic block may only repeat it, as verl's
        # migration replaces the whole block with the classic one
        own = path is not None and (path, name) != tuple(default)
        if classic["path"] is None and not own:  # verl would run None:<name>, its data_source dispatch
            refuse(
                "custom_reward_function.name",
                f"{classic['name']} without custom_reward_function.path: verl would run its data_source dispatch and "
                "ignore the name; set the path of the file that defines it",
            )
        if own and (
            clash := [k for k in ("path", "name") if classic[k] not in (None, {"path": path, "name": name}[k])]
        ):
            refuse(
                f"custom_reward_function.{clash[0]}",
                f"verl's legacy block ({classic['path']}:{classic['name']}), which the V1 trainer does not read, and "
                f"reward.custom_reward_function ({path}:{name}) name different reward functions "
                f"({' and '.join(clash)}): keep one, reward.custom_reward_function",
            )
        with open_dict(config):  # its unset keys from reward.*'s own function, so that the move keeps it
            for key, value in (("path", path), ("name", name)) if own else ():
                if classic[key] is None:
                    config.custom_reward_function[key] = value
    from verl.experimental.reward_loop import migrate_legacy_reward_impl

    migrate_legacy_reward_impl(config)
    if "custom_reward_function" in moved:
        block = config.reward.custom_reward_function
        with open_dict(config):
            if not block.get("name"):
                block.name = DEFAULT_REWARD_FN_NAME
        check_function(config, "custom_reward_function")  # named as the user wrote it
        lines.append(
            f"custom_reward_function (verl's legacy key) -> reward.custom_reward_function: {block.path}:{block.name}, "
            "moved as verl's migrate_legacy_reward_impl moves it"
        )
    return lines + [
        f"{key} (verl's legacy keys) -> reward.{key}, moved as verl's migrate_legacy_reward_impl moves them"
        for key in moved
        if key != "custom_reward_function"
    ]


def _set(values: Mapping) -> bool:
    """Whether a legacy block sets anything (verl's rule: a value that is not None)."""
    return any(_set(v) if isinstance(v, Mapping) else v is not None for v in values.values())
