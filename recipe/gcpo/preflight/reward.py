"""Start-up checks of the reward verl's reward workers will run (:data:`CHECKS`), which would otherwise fail in every
reward worker after the models are up, or be ignored. verl's legacy top-level reward keys are moved into ``reward.*``
first (:mod:`recipe.gcpo.preflight.legacy_reward`).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import weakref
from typing import Any, Callable, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from recipe.gcpo.config import GCPO_FILTER_METRIC, Check, ConfigError, Facts, check_known, plain

# the recipe's own reward (config/gcpo_trainer.yaml): what runs when a config names no other
RECIPE_REWARD = ("pkg://recipe.gcpo.reward", "compute_score")
RECIPE_REWARD_WHAT = "the recipe's math-verify reward: +1 / -1, acc, pred, timeout, gcpo_signal"
# verl's built-in reward when reward.custom_reward_function.path is null: a scorer chosen by each row's data_source
DATA_SOURCE_DISPATCH = "verl's data_source dispatch (verl.utils.reward_score.default_compute_score)"
# the arguments verl 0.9.1's reward managers pass a custom reward function by name (verl/experimental/reward_loop/
# reward_manager/*.py)
REWARD_FN_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
# those it passes only when a reward model serves the run; custom_reward_function.reward_kwargs merged over both
# would replace one of the same name
REWARD_FN_ROUTER_ARGS = ("reward_router_address", "reward_model_tokenizer")
# modules whose reward function takes **kwargs only to absorb REWARD_FN_ROUTER_ARGS: its named parameters are every
# keyword it reads
STRICT_REWARD_MODULES = ("recipe.gcpo.reward",)
# DAPO's group filter reads "reward" (the reward itself) or a key of each response's reward_extra_info (verl/trainer/
# ppo/v1/replay_buffer.py): these the reward managers add themselves; any other must come from the reward function
FILTER_GROUPS_REWARD_METRIC = "reward"
MANAGER_METRICS = {"dapo": ("acc", "overlong_reward", "overlong"), "gdpo": ("acc",), "rate_limited": ("acc", "timeout")}
# verl's name of a custom reward function when its config names none
DEFAULT_REWARD_FN_NAME = "compute_score"
# reward.reward_kwargs as verl 0.9.1's reward managers read it from the raw config (key -> its sub-keys, None for a
# value; only verl/experimental/reward_loop/reward_manager/dapo.py reads any): added with "+" outside verl's schema, a
# misspelt key would be a silent no-op. tests/recipe/gcpo/preflight/test_reward.py reads verl's source to keep it true.
REWARD_KWARGS: dict[str, dict[str, frozenset[str] | None]] = {
    "dapo": {"max_resp_len": None, "overlong_buffer_cfg": frozenset({"enable", "len", "penalty_factor", "log"})},
}
BUFFER, BUFFER_KEYS = "overlong_buffer_cfg", REWARD_KWARGS["dapo"]["overlong_buffer_cfg"]
KW, BUF, FN_KW = "reward.reward_kwargs", f"reward.reward_kwargs.{BUFFER}", "reward.custom_reward_function.reward_kwargs"
PATH, NAME, METRIC = "{written_as}.path", "{written_as}.name", "algorithm.filter_groups.metric"


def reward_function(config: DictConfig) -> tuple[Optional[str], str]:
    """(path, name) of the custom reward function the config names: path None for verl's data_source dispatch, name
    verl's default when the config gives none."""
    block = OmegaConf.select(config, "reward.custom_reward_function") or {}
    return block.get("path"), block.get("name") or DEFAULT_REWARD_FN_NAME


# the reward function loaded for each config, by (the config's identity, path, name): loaded once, though a legacy
# block is checked as it moves (with facts of its own) before validate checks the same config
_loaded: dict[tuple[int, str, str], Callable[..., Any]] = {}


def _load(f: Facts) -> Any:
    """The reward function, loaded as verl's reward workers load it (its file or module exists: checked first). Its
    import's refusals stay here, with the exception they name (as a fact it would need an entry per kind)."""
    path, name, at = f["fn_path"], f["fn_name"], f["written_as"]
    if (key := (id(f.config), path, name)) in _loaded:
        return _loaded[key]
    from verl.utils.import_utils import load_extern_object

    try:
        function = load_extern_object(module_path=path, object_name=name)
    except SystemExit as stop:  # a module that exits as it is imported would end the start-up with its status
        problem = f"{path} exits as it is imported (sys.exit({stop.code!r})): verl's reward workers import it"
        raise ConfigError(f"{at}.path", problem) from None
    except AttributeError:
        raise ConfigError(f"{at}.name", f"{path} defines no {name!r}") from None
    except Exception as err:
        cause = err.__cause__ or err  # verl wraps an import's error in its own RuntimeError
        raise ConfigError(f"{at}.path", f"{path} fails to load here: {type(cause).__name__}: {cause}") from None
    weakref.finalize(f.config, _loaded.pop, key, None)  # forgotten with the config, before its id is reused
    _loaded[key] = function
    return function


def _found(f: Facts) -> bool:
    """Whether the reward function's module (``pkg://<module>``) is importable here, or its file exists."""
    if f["fn_module"] is None:
        return os.path.isfile(os.path.expanduser(f["fn_path"]))
    try:
        return importlib.util.find_spec(f["fn_module"]) is not None
    except (ImportError, ValueError):
        return False


def _signature(f: Facts) -> dict[str, str]:
    """The problems verl's call meets in the reward function's signature ("" for none): {} where it has none to read
    (a builtin or C function: verl will find out)."""
    try:
        signature = inspect.signature(f["fn"])
    except (TypeError, ValueError):
        return {}
    parameters, passed = signature.parameters.values(), {*REWARD_FN_ARGS, *f["fn_kwargs"]}
    named = {p.name: p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)
    # a function of the user's own that takes **kwargs reads what it reads
    reads_any = takes_any and getattr(f["fn"], "__module__", None) not in STRICT_REWARD_MODULES
    return {
        "text": str(signature),
        "missing": "" if takes_any else ", ".join(a for a in REWARD_FN_ARGS if a not in named),
        "required": ", ".join(n for n, p in named.items() if p.default is p.empty and n not in passed),
        "unknown": "" if reads_any else _unknown(f["fn_kwargs"], set(named) - {*REWARD_FN_ARGS}),
    }


def _source(f: Facts) -> Optional[str]:
    """The text of the reward function's module (verl's scorers' where the config names none); None where it is not
    here (it may exist only on the cluster: verl reports that)."""
    path = f["fn_path"] or "pkg://verl.utils.reward_score"
    try:
        origin = importlib.util.find_spec(path[6:]).origin if path.startswith("pkg://") else os.path.expanduser(path)
        with open(origin, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, TypeError, ValueError, ImportError, AttributeError):
        return None


def _unknown(block: Mapping, known: set[str]) -> str:
    """:func:`check_known`'s problem with ``block``'s keys, "" where each is ``known``."""
    try:
        check_known("", block, known)
    except ConfigError as error:
        return error.problem
    return ""


# those of algorithm.filter_groups (filter_groups, filter_metric) are recipe_blocks.FACTS'
FACTS: dict[str, Callable[[Facts], Any]] = {
    # the block the user wrote the function in, which the refusals name (verl's legacy one, as it moves)
    "written_as": lambda f: "reward.custom_reward_function",
    "fn_path": lambda f: reward_function(f.config)[0],
    "fn_name": lambda f: reward_function(f.config)[1],
    "fn_module": lambda f: f["fn_path"][6:] if f["fn_path"].startswith("pkg://") else None,
    "fn_found": _found,
    "fn": _load,
    "fn_sig": _signature,
    "fn_source": _source,
    "fn_what": lambda f: f["fn_path"] or DATA_SOURCE_DISPATCH,
    "fn_kwargs": lambda f: plain(OmegaConf.select(f.config, FN_KW)) or {},
    "fn_kwargs_clash": lambda f: sorted(set(f["fn_kwargs"]) & {*REWARD_FN_ARGS, *REWARD_FN_ROUTER_ARGS}),
    "manager": lambda f: f.config.reward.reward_manager,
    "manager_metrics": lambda f: ", ".join(MANAGER_METRICS.get(f["manager"].name, ())) or "acc with the dapo manager",
    "reward_kwargs": lambda f: plain(OmegaConf.select(f.config, KW)),
    "reward_kwargs_keys": lambda f: sorted(f["reward_kwargs"]),
    # set for one of verl's managers (one of the user's own, reward_manager.source=importlib, reads what it reads)
    "manager_reads": lambda f: bool(f["reward_kwargs"]) and f["manager"].get("source", "register") == "register",
    "reward_kwargs_unknown": lambda f: _unknown(f["reward_kwargs"], set(REWARD_KWARGS[f["manager"].name])),
    "buffer": lambda f: f["reward_kwargs"].get(BUFFER) or {},
    "buffer_keys": lambda f: sorted(f["buffer"]),
    "buffer_unknown": lambda f: _unknown(f["buffer"], set(BUFFER_KEYS)),
    "buffer_on": lambda f: f["manager_reads"] and bool(f["buffer"].get("enable")),
    "buffer_missing": lambda f: ", ".join(f"{BUFFER}.{key}" for key in sorted(BUFFER_KEYS - set(f["buffer"]))),
    "filtering": lambda f: bool(f["filter_groups"].get("enable", False)),
    "gcpo_filter": lambda f: f["filtering"] and f["filter_metric"] == GCPO_FILTER_METRIC,
    # the reward manager adds the metric, or the reward function's module names it (or is not here to read)
    "metric_reported": lambda f: (
        f["filter_metric"]
        in (FILTER_GROUPS_REWARD_METRIC, GCPO_FILTER_METRIC, *MANAGER_METRICS.get(f["manager"].name, ()))
        or f["fn_source"] is None
        or re.search(rf"""['"]{re.escape(str(f["filter_metric"]))}['"]""", f["fn_source"]) is not None
    ),
}

# the function verl's reward workers will load: its file or module exists, loads here, defines a function that takes
# the arguments verl passes by name (the legacy migration runs these as it moves the legacy block)
FUNCTION_CHECKS: tuple[Check, ...] = (
    Check(
        PATH,
        lambda f: not f["fn_path"] or f["fn_module"] is None or f["fn_found"],
        "{fn_path}: no module {fn_module} is importable here",
    ),
    Check(
        PATH,
        lambda f: not f["fn_path"] or f["fn_found"],
        "{fn_path} does not exist (a reward file every node can read: a path on shared storage, or pkg://<module>)",
    ),
    Check(NAME, lambda f: not f["fn_path"] or callable(f["fn"]), "{fn_path}:{fn_name} is not a function"),
    Check(
        NAME,
        lambda f: not f["fn_path"] or not f["fn_sig"].get("missing"),
        "{fn_path}:{fn_name}{fn_sig[text]} cannot take {fn_sig[missing]}: verl's reward managers call it with "
        + ", ".join(f"{a}=..." for a in REWARD_FN_ARGS),
    ),
    Check(
        NAME,
        lambda f: not f["fn_path"] or not f["fn_sig"].get("required"),
        "{fn_path}:{fn_name} requires {fn_sig[required]}, which verl does not pass: give them a default or set "
        "{written_as}.reward_kwargs",
    ),
)
FIX = (
    "return it from the reward function (0 for a wrong response, 1 + a tiny fingerprint of the text for a correct "
    "one: recipe/gcpo/reward.py does), use the recipe's reward (reward.custom_reward_function.path="
    "pkg://recipe.gcpo.reward), or filter on acc (algorithm.filter_groups.metric=acc)"
)
CHECKS: tuple[Check, ...] = (
    # reward.reward_kwargs: keys the selected reward manager reads, and the DAPO manager's own checks of its overlong
    # buffer (which it runs in every reward worker, after the models are up; it reads .enable first)
    Check(
        KW,
        lambda f: not f["reward_kwargs"] or isinstance(f["reward_kwargs"], Mapping),
        "must be a mapping, got {reward_kwargs!r}",
    ),
    Check(
        KW,
        lambda f: not f["manager_reads"] or f["manager"].name in REWARD_KWARGS,
        "{reward_kwargs_keys} is read only by reward.reward_manager.name="
        f"{', '.join(sorted(REWARD_KWARGS))} in verl 0.9.1: reward_manager.name={{manager.name}} would ignore it",
    ),
    Check(KW, lambda f: not f["manager_reads"] or not f["reward_kwargs_unknown"], "{reward_kwargs_unknown}"),
    Check(
        BUF,
        lambda f: (
            not f["manager_reads"]
            or f["reward_kwargs"].get(BUFFER) is None
            or isinstance(f["reward_kwargs"][BUFFER], Mapping)
        ),
        "must be a mapping, got {reward_kwargs[overlong_buffer_cfg]!r}",
    ),
    Check(BUF, lambda f: not f["manager_reads"] or not f["buffer_unknown"], "{buffer_unknown}"),
    Check(
        f"{BUF}.enable",
        lambda f: not f["manager_reads"] or not f["buffer"] or "enable" in f["buffer"],
        f"missing from {BUFFER} ({{buffer_keys}}): set it to true or false (a protocol=<name> sets it)",
    ),
    Check(
        BUF,
        lambda f: not f["buffer_on"] or not f["buffer_missing"],
        "enable=true, but the DAPO reward manager also reads {buffer_missing}; set them",
    ),
    Check(
        f"{KW}.max_resp_len",
        lambda f: not f["buffer_on"] or f["reward_kwargs"].get("max_resp_len") is not None,
        f"missing: {BUF}.enable=true needs it",
    ),
    Check(
        f"{BUF}.len",
        lambda f: not f["buffer_on"] or (f["buffer"]["len"] or 0) > 0,
        "must be > 0 when the buffer is enabled, got {buffer[len]}",
    ),
    Check(
        f"{KW}.max_resp_len",
        lambda f: not f["buffer_on"] or not f["reward_kwargs"]["max_resp_len"] < f["buffer"]["len"],
        f"{{reward_kwargs[max_resp_len]}} must be >= {BUFFER}.len={{buffer[len]}}",
    ),
    *FUNCTION_CHECKS,
    # custom_reward_function.reward_kwargs, which verl passes the function as keyword arguments: a misspelt one is
    # dropped by a **kwargs or fails in every reward worker, and one named as an argument verl passes replaces it
    Check(
        FN_KW,
        lambda f: not f["fn_kwargs"] or isinstance(f["fn_kwargs"], Mapping),
        "must be a mapping, got {fn_kwargs!r}",
    ),
    Check(
        FN_KW,
        lambda f: not f["fn_kwargs"] or f["fn_path"],
        "set, but custom_reward_function.path is not: verl would ignore them",
    ),
    Check(
        FN_KW,
        lambda f: not f["fn_kwargs"] or not f["fn_kwargs_clash"],
        "{fn_kwargs_clash} would replace the argument(s) verl passes the reward function for each response",
    ),
    Check(
        FN_KW + " (keyword arguments of {fn_path}:{fn_name})",
        lambda f: not f["fn_kwargs"] or not f["fn_sig"].get("unknown"),
        "{fn_sig[unknown]}",
    ),
    # DAPO's group filter on a metric the reward does not report stops the run at its first step ("Finished groups
    # are missing DAPO metric ..."); a reward function whose module never names the key cannot report it
    Check(
        METRIC,
        lambda f: not f["filtering"] or f["metric_reported"],
        "{filter_metric} is read from each response's reward_extra_info, but neither reward manager {manager.name} "
        f"nor the reward function ({{fn_what}}) reports it: use {FILTER_GROUPS_REWARD_METRIC} (the reward itself), a "
        "key the function returns, or {manager_metrics}",
    ),
    Check(
        METRIC,
        lambda f: not f["gcpo_filter"] or f["fn_path"],
        f"{GCPO_FILTER_METRIC} is read from the reward, but verl's built-in reward does not report it: {FIX}",
    ),
    Check(
        METRIC,
        lambda f: not f["gcpo_filter"] or f["fn_source"] is None or GCPO_FILTER_METRIC in f["fn_source"],
        f"{GCPO_FILTER_METRIC} is read from the reward, but the reward function {{fn_path}}:{{fn_name}} never reports "
        f"{GCPO_FILTER_METRIC!r}: {FIX}",
    ),
)
