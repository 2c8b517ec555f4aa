"""Start-up checks of the reward verl's reward workers will run, before any of them starts: the function
(``reward.custom_reward_function``) loads here and takes what verl passes, its keyword arguments and the reward
manager's (``reward.reward_kwargs``) are ones they read, and DAPO's filter on ``gcpo_signal`` has a reward that
reports it. What would otherwise fail in every reward worker after the models are up, or be ignored.

verl's legacy top-level reward keys are moved into ``reward.*`` first (:mod:`recipe.gcpo.preflight.legacy_reward`).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import weakref
from typing import Any, Callable, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from recipe.gcpo.config import GCPO_FILTER_METRIC, ConfigError, check_known, plain

# the recipe's own reward (config/gcpo_trainer.yaml): what runs when a config names no other
RECIPE_REWARD = ("pkg://recipe.gcpo.reward", "compute_score")
RECIPE_REWARD_WHAT = "the recipe's math-verify reward: +1 / -1, acc, pred, timeout, gcpo_signal"
# verl's built-in reward when reward.custom_reward_function.path is null: a scorer chosen by each row's data_source
DATA_SOURCE_DISPATCH = "verl's data_source dispatch (verl.utils.reward_score.default_compute_score)"
# the arguments verl 0.9.1's reward managers pass a custom reward function by name (verl/experimental/reward_loop/
# reward_manager/*.py)
REWARD_FN_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
# DAPO's group filter (algorithm.filter_groups.metric) reads "reward" (the reward itself) or a key of each response's
# reward_extra_info (verl/trainer/ppo/v1/replay_buffer.py): these keys the reward managers add themselves (verl/
# experimental/reward_loop/reward_manager/*.py); any other must come from the reward function
FILTER_GROUPS_REWARD_METRIC = "reward"
MANAGER_METRICS = {"dapo": ("acc", "overlong_reward", "overlong"), "gdpo": ("acc",), "rate_limited": ("acc", "timeout")}
# verl's name of a custom reward function when its config names none
DEFAULT_REWARD_FN_NAME = "compute_score"
# reward.reward_kwargs as verl 0.9.1's reward managers read it (key -> its sub-keys, None for a value): only the
# DAPO manager reads it, from the raw config (verl/experimental/reward_loop/reward_manager/dapo.py); the keys are
# added with "+" outside verl's schema, so a misspelt one would be a silent no-op. tests/recipe/gcpo/
# test_config.py reads verl's source to keep this table true.
REWARD_KWARGS: dict[str, dict[str, frozenset[str] | None]] = {
    "dapo": {"max_resp_len": None, "overlong_buffer_cfg": frozenset({"enable", "len", "penalty_factor", "log"})},
}


def reward_function(config: DictConfig) -> tuple[Optional[str], str]:
    """(path, name) of the custom reward function the config names: path None for verl's data_source dispatch, name
    verl's default when the config gives none."""
    block = OmegaConf.select(config, "reward.custom_reward_function") or {}
    return block.get("path"), block.get("name") or DEFAULT_REWARD_FN_NAME


# the reward function each config's start-up loaded, by the config's identity: loaded once (a legacy block is
# checked as it is migrated, then validate reads the same config)
_loaded: dict[int, tuple[weakref.ref, tuple[str, str], Callable]] = {}


def check_reward_function(
    config: DictConfig, written_as: str = "reward.custom_reward_function"
) -> Optional[Callable[..., Any]]:
    """The reward function verl's reward workers will load: the file (or package module) exists, loads here, defines
    the function, and the function takes the arguments verl passes by name. ``written_as``: the block the user wrote
    it in, which the messages name (verl's legacy ``custom_reward_function`` is read here after its migration).
    Returns the function (loaded once per config), None for verl's data_source dispatch.

    Raises:
        ConfigError: a missing file or module, a module that fails to import, a missing or uncallable name, or a
            function that cannot take ``data_source``, ``solution_str``, ``ground_truth`` and ``extra_info``.
    """
    path, name = reward_function(config)
    if not path:
        return None
    hit = _loaded.get(id(config))
    if hit is not None and hit[0]() is config and hit[1] == (path, name):
        return hit[2]
    key, name_key = f"{written_as}.path", f"{written_as}.name"
    if path.startswith("pkg://"):
        module = path[len("pkg://") :]
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ConfigError(key, f"{path}: no module {module} is importable here")
    elif not os.path.isfile(os.path.expanduser(path)):
        raise ConfigError(
            key,
            f"{path} does not exist (a reward file every node can read: a path on shared storage, or pkg://<module>)",
        )
    from verl.utils.import_utils import load_extern_object

    try:
        function = load_extern_object(module_path=path, object_name=name)
    except SystemExit as stop:  # a module that exits as it is imported would end the start-up with its status
        raise ConfigError(
            key, f"{path} exits as it is imported (sys.exit({stop.code!r})): verl's reward workers import it"
        ) from None
    except AttributeError:
        raise ConfigError(name_key, f"{path} defines no {name!r}") from None
    except Exception as err:
        cause = err.__cause__ or err  # verl wraps an import's error in its own RuntimeError
        raise ConfigError(key, f"{path} fails to load here: {type(cause).__name__}: {cause}") from None
    if not callable(function):
        raise ConfigError(name_key, f"{path}:{name} is not a function")
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return _remember(config, path, name, function)  # a builtin or C function: verl will find out
    kinds = {p.kind for p in parameters.values()}
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        takes = {
            n
            for n, p in parameters.items()
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }
        missing = [arg for arg in REWARD_FN_ARGS if arg not in takes]
        if missing:
            raise ConfigError(
                name_key,
                f"{path}:{name}{inspect.signature(function)} cannot take {', '.join(missing)}: verl's "
                f"reward managers call it with {', '.join(f'{a}=...' for a in REWARD_FN_ARGS)}",
            )
    given = set(OmegaConf.select(config, "reward.custom_reward_function.reward_kwargs") or {})
    required = [
        n
        for n, p in parameters.items()
        if p.default is inspect.Parameter.empty
        and n not in REWARD_FN_ARGS
        and n not in given
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    if required:
        raise ConfigError(
            name_key,
            f"{path}:{name} requires {', '.join(required)}, which verl does not pass: give them a default "
            f"or set {written_as}.reward_kwargs",
        )
    return _remember(config, path, name, function)


def _remember(config: DictConfig, path: str, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as the checked reward function of ``config`` (for as long as the config lives)."""
    forget = weakref.ref(config, lambda _, key=id(config): _loaded.pop(key, None))
    _loaded[id(config)] = (forget, (path, name), function)
    return function


def check_reward_kwargs(config: DictConfig) -> None:
    """Start-up checks of ``reward.reward_kwargs``: only keys the selected reward manager reads, and the DAPO
    manager's own overlong-buffer checks (which verl runs in every reward worker, after the models are up).

    Raises:
        ConfigError: a key the reward manager does not read, a manager that reads none, or an overlong buffer
            that is enabled without the values the DAPO manager needs.
    """
    kwargs = plain(OmegaConf.select(config, "reward.reward_kwargs"))
    if not kwargs:
        return
    if not isinstance(kwargs, Mapping):
        raise ConfigError("reward.reward_kwargs", f"must be a mapping, got {kwargs!r}")
    manager = config.reward.reward_manager
    if manager.get("source", "register") != "register":
        return  # a reward manager of the user's own (source=importlib) reads what it reads
    accepted = REWARD_KWARGS.get(manager.name)
    if accepted is None:
        readers = ", ".join(sorted(REWARD_KWARGS))
        raise ConfigError(
            "reward.reward_kwargs",
            f"{sorted(kwargs)} is read only by reward.reward_manager.name="
            f"{readers} in verl 0.9.1: reward_manager.name={manager.name} would ignore it",
        )
    check_known("reward.reward_kwargs", kwargs, set(accepted))
    for key, fields in accepted.items():
        value = kwargs.get(key)
        if fields is not None and value is not None:
            if not isinstance(value, Mapping):
                raise ConfigError(f"reward.reward_kwargs.{key}", f"must be a mapping, got {value!r}")
            check_known(f"reward.reward_kwargs.{key}", value, set(fields))
    buffer = kwargs.get("overlong_buffer_cfg") or {}
    if buffer and "enable" not in buffer:  # verl's DAPO manager reads .enable first, in every reward worker
        raise ConfigError(
            "reward.reward_kwargs.overlong_buffer_cfg.enable",
            f"missing from overlong_buffer_cfg ({sorted(buffer)}): set it to true or false (a protocol=<name> sets it)",
        )
    if buffer.get("enable"):
        missing = sorted(REWARD_KWARGS["dapo"]["overlong_buffer_cfg"] - set(buffer))
        if missing:
            raise ConfigError(
                "reward.reward_kwargs.overlong_buffer_cfg",
                f"enable=true, but the DAPO reward manager also reads "
                f"{', '.join(f'overlong_buffer_cfg.{key}' for key in missing)}; set them",
            )
        max_len, length = kwargs.get("max_resp_len"), buffer["len"]
        if max_len is None:
            raise ConfigError(
                "reward.reward_kwargs.max_resp_len",
                "missing: reward.reward_kwargs.overlong_buffer_cfg.enable=true needs it",
            )
        if not length or length <= 0:
            raise ConfigError(
                "reward.reward_kwargs.overlong_buffer_cfg.len",
                f"must be > 0 when the buffer is enabled, got {length}",
            )
        if max_len < length:
            raise ConfigError(
                "reward.reward_kwargs.max_resp_len",
                f"{max_len} must be >= overlong_buffer_cfg.len={length}",
            )


# the arguments verl passes a custom reward function only when a reward model serves the run (its router's): like
# REWARD_FN_ARGS, custom_reward_function.reward_kwargs of the same name would replace them (verl merges the kwargs
# over them)
REWARD_FN_ROUTER_ARGS = ("reward_router_address", "reward_model_tokenizer")
# modules whose reward function takes **kwargs only to absorb REWARD_FN_ROUTER_ARGS, so its named parameters are
# every keyword it reads
STRICT_REWARD_MODULES = ("recipe.gcpo.reward",)


def check_custom_reward_kwargs(config: DictConfig, function: Optional[Callable[..., Any]] = None) -> None:
    """Start-up check of ``reward.custom_reward_function.reward_kwargs``: verl passes them to the reward function as
    keyword arguments, so a misspelt one is dropped by a ``**kwargs`` or fails in every reward worker after the
    models are up. Each name must be a keyword parameter of the function (any name, where the function takes
    ``**kwargs`` for its own use), and none may replace an argument verl passes. ``function``: the reward function
    as :func:`check_reward_function` loaded it (None: loaded here).

    Raises:
        ConfigError: an unknown or clashing keyword, or a reward function that cannot be loaded to check it.
    """
    function_config = OmegaConf.select(config, "reward.custom_reward_function") or {}
    kwargs = plain(function_config.get("reward_kwargs")) or {}
    if not kwargs:
        return
    if not isinstance(kwargs, Mapping):
        raise ConfigError("reward.custom_reward_function.reward_kwargs", f"must be a mapping, got {kwargs!r}")
    path, name = function_config.get("path"), function_config.get("name")
    if not path:
        raise ConfigError(
            "reward.custom_reward_function.reward_kwargs",
            "set, but custom_reward_function.path is not: verl would ignore them",
        )
    clash = sorted(set(kwargs) & set(REWARD_FN_ARGS + REWARD_FN_ROUTER_ARGS))
    if clash:
        raise ConfigError(
            "reward.custom_reward_function.reward_kwargs",
            f"{clash} would replace the argument(s) verl passes the reward function for each response",
        )
    from verl.utils.import_utils import load_extern_object

    try:
        function = function or load_extern_object(module_path=path, object_name=name)
    except Exception as err:
        raise ConfigError(
            "reward.custom_reward_function",
            f"{path}:{name} cannot be loaded here to check its reward_kwargs: {type(err).__name__}: {err}",
        ) from err
    parameters = inspect.signature(function).parameters.values()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    if takes_any and getattr(function, "__module__", None) not in STRICT_REWARD_MODULES:
        return  # a function of the user's own that reads **kwargs: what it reads is its business
    accepted = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    } - set(REWARD_FN_ARGS)
    check_known(f"reward.custom_reward_function.reward_kwargs (keyword arguments of {path}:{name})", kwargs, accepted)


def check_filter_signal(config: DictConfig) -> None:
    """Start-up check of DAPO's group filter (``algorithm.filter_groups.metric``): a metric other than ``reward``
    comes from the reward manager or the reward function (verl's replay buffer reads it from each row's
    reward_extra_info), and a reward that does not report it stops the run at its first step ("Finished groups are
    missing DAPO metric ..."). A reward function whose module never names the key cannot report it.

    Raises:
        ConfigError: filtering on a metric neither the manager nor the reward function reports (``gcpo_signal``:
            with the recipe's advice).
    """
    filter_groups = OmegaConf.select(config, "algorithm.filter_groups") or {}
    if not filter_groups.get("enable", False):
        return
    function_config = OmegaConf.select(config, "reward.custom_reward_function") or {}
    path, name = function_config.get("path"), function_config.get("name")
    metric = filter_groups.get("metric")
    if metric != GCPO_FILTER_METRIC:
        manager = OmegaConf.select(config, "reward.reward_manager.name")
        if metric == FILTER_GROUPS_REWARD_METRIC or metric in MANAGER_METRICS.get(manager, ()):
            return
        source = _reward_source(path) if path else _reward_source("pkg://verl.utils.reward_score")
        if source is None or re.search(rf"""['"]{re.escape(str(metric))}['"]""", source):
            return
        raise ConfigError(
            "algorithm.filter_groups.metric",
            f"{metric} is read from each response's reward_extra_info, but neither "
            f"reward manager {manager} nor the reward function ({path or DATA_SOURCE_DISPATCH}) reports it: use "
            f"{FILTER_GROUPS_REWARD_METRIC} (the reward itself), a key the function returns, or "
            f"{', '.join(MANAGER_METRICS.get(manager, ())) or 'acc with the dapo manager'}",
        )
    fix = (
        "return it from the reward function (0 for a wrong response, 1 + a tiny fingerprint of the text for a "
        "correct one: recipe/gcpo/reward.py does), use the recipe's reward (reward.custom_reward_function.path="
        "pkg://recipe.gcpo.reward), or filter on acc (algorithm.filter_groups.metric=acc)"
    )
    if not path:
        raise ConfigError(
            "algorithm.filter_groups.metric",
            f"{GCPO_FILTER_METRIC} is read from the reward, but verl's built-in reward does not report it: {fix}",
        )
    source = _reward_source(path)
    if source is not None and GCPO_FILTER_METRIC not in source:
        raise ConfigError(
            "algorithm.filter_groups.metric",
            f"{GCPO_FILTER_METRIC} is read from the reward, but the reward function {path}:{name} never reports "
            f"{GCPO_FILTER_METRIC!r}: {fix}",
        )


def _reward_source(path: str) -> str | None:
    """The text of a ``reward.custom_reward_function.path`` module (``pkg://a.b`` or a file); None when it cannot be
    found here (it may exist only on the cluster: verl reports that)."""
    try:
        if path.startswith("pkg://"):
            spec = importlib.util.find_spec(path[len("pkg://") :])
            origin = spec.origin if spec is not None else None
        else:
            origin = os.path.expanduser(path)
        with open(origin, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, TypeError, ValueError, ImportError):
        return None
