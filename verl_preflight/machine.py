"""Checks of the machine a run starts from, each finding in seconds what verl would find minutes into a start-up, or in
a worker: the loggers and the data files (:func:`check_files_and_loggers`: their kind and content, for a dry run as for
a run), then the policy's weights (:func:`check_model_path`: a dry run only warns), the GPUs or the Ray cluster it
joins (:func:`check_accelerators`) and that the data files exist (:func:`check_data_files_exist`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from verl_preflight.errors import did_you_mean, plain, refuse

# a missing data file's hint, by its name: the names a project's own data preparation writes (an extension's), else
# the user's own file
OWN = "point data.train_files / data.val_files at a file that exists on this machine"
# either of these set true turns the Hugging Face hub off
HUB_OFF = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
# the values of these that let W&B run without an API key
WANDB_KEYLESS = {"WANDB_MODE": ("offline", "disabled", "dryrun"), "WANDB_DISABLED": ("true", "1", "yes")}
# a logger backend -> the module it imports in verl's Tracking (verl/utils/tracking.py): its own name but for two
LOGGER_MODULES = {name: name for name in ("wandb", "mlflow", "swanlab", "tensorboard", "clearml", "trackio")}
LOGGER_MODULES.update(vemlp_wandb="volcengine_ml_platform", tracking="wandb")
MODEL = "actor_rollout_ref.model.path"
DATA_FORMATS = (".parquet", ".json", ".jsonl")


def hub_off() -> bool:
    return any(os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in HUB_OFF)


def check_files_and_loggers(config: DictConfig) -> None:
    """``trainer.logger``'s backends exist, are installed and can log here; ``data.*_files`` name data files, and
    those that exist here are data verl's dataset reads, with the prompt column."""
    from verl.utils.tracking import Tracking

    loggers = OmegaConf.select(config, "trainer.logger")
    loggers = [loggers] if isinstance(loggers, str) else plain(loggers)
    if not isinstance(loggers, list) or not all(isinstance(name, str) for name in loggers):
        refuse("trainer.logger", f"must be a list of logger names (e.g. [console,wandb]), got {plain(loggers)!r}")
    known = list(Tracking.supported_backend)
    for backend in loggers:
        if backend not in (*known, "tracking"):
            hint = did_you_mean(backend, known, prefix=" (did you mean ")
            refuse(
                "trainer.logger",
                f"{backend!r} is not a backend verl knows{hint and hint + ')'}; known: {', '.join(known)}",
            )
        module = LOGGER_MODULES.get(backend)
        if module is not None and importlib.util.find_spec(module) is None:
            refuse(
                "trainer.logger",
                f"{backend} needs the {module} package, which is not installed here (pip install {module}, or drop it "
                "from trainer.logger)",
            )
    if {"wandb", "tracking"} & set(loggers) and not _wandb_login():
        refuse(
            "trainer.logger",
            "has wandb, but W&B has no API key here (WANDB_API_KEY, or `wandb login`) and is not offline: set "
            'WANDB_API_KEY, or WANDB_MODE=offline, or log without it (trainer.logger=\'["console","tensorboard"]\')',
        )
    # the columns verl's dataset and its reward managers read by name (a manager of the user's own reads its own)
    columns = [OmegaConf.select(config, "data.prompt_key") or "prompt"]
    if OmegaConf.select(config, "reward.reward_manager.source") in (None, "register"):
        columns += ["data_source", "reward_model"]
    rows = 0
    for key in ("data.train_files", "data.val_files"):
        value = plain(OmegaConf.select(config, key))
        files = data_files(value)
        if files is None:
            refuse(key, f"must be a data file or a list of them, got {value!r}")
        for path in files:  # verl's dataset would fail on these in a Ray actor; a file not here is the run's check
            problem, count = read_data_file(path, columns)
            if problem is not None:
                refuse(key, problem)
            if key == "data.train_files":
                rows = None if rows is None or count is None else rows + count
    batch = config.data.train_batch_size
    if rows is not None and rows < batch:  # verl's loader drops the last partial batch, then divides by 0 steps
        refuse(
            "data.train_batch_size", f"{batch} prompts a step, but data.train_files hold {rows}: an epoch has no step"
        )


def data_files(value: Any) -> Optional[list[str]]:
    """A ``data.*_files`` value's paths; None where it is not a path or a non-empty list of them."""
    files = [value] if isinstance(value, str) else value if isinstance(value, list) else None
    return files if files and all(isinstance(f, str) and f.strip() for f in files) else None


def read_data_file(path: str, columns: list[str]) -> tuple[Optional[str], Optional[int]]:
    """(why ``path`` is no data verl's RLHFDataset reads, or None; its rows, None where it is not here to count). Not
    here (a remote URI, or a file the run's check will name): (None, None). Read as far as its schema or first
    record and its row count: a folder, another format, a file that is no table, no rows, or without ``columns``."""
    local = os.path.expanduser(path)
    if "://" in path or not os.path.exists(local):
        return None, None
    if os.path.isdir(local):
        return f"{path} is a folder, not a data file", None
    if not local.endswith(DATA_FORMATS):
        return f"{path} is not a parquet or JSON file (verl's RLHFDataset reads .parquet, .json and .jsonl)", None
    try:
        if local.endswith(".parquet"):
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(local)  # its footer only
            names, rows = meta.schema_arrow.names, meta.metadata.num_rows
        else:
            with open(local, encoding="utf-8") as handle:
                if local.endswith(".jsonl"):  # the first record, and a count of the others as they stream by
                    first = next((line for line in handle if line.strip()), None)
                    records, rows = [json.loads(first)] if first else [], int(first is not None)
                    rows += sum(1 for line in handle if line.strip())
                else:
                    records = json.loads(handle.read() or "[]")
                    rows = None
            if isinstance(records, dict) and all(isinstance(v, list) for v in records.values()):  # columns of values
                names, rows = list(records), len(next(iter(records.values()), []))
            else:
                records = records if isinstance(records, list) else [records]
                names = list(records[0]) if records and isinstance(records[0], dict) else []
                rows = len(records) if rows is None else rows
    except Exception as error:  # pyarrow's and json's errors say what the file is not
        return f"{path} cannot be read as {Path(local).suffix[1:]}: {type(error).__name__}: {error}", None
    if not rows:
        return f"{path} holds no rows", 0
    for column in columns:
        if column not in names:
            hint = did_you_mean(column, names)
            return f"{path} has no column {column!r}, which verl reads for each row{hint}; its columns: {names}", rows
    return None, rows


def check_model_path(config: DictConfig) -> None:
    """The policy's weights, which every worker loads: an absolute local folder with a model, or a hub id with the hub
    on."""
    path = OmegaConf.select(config, MODEL)
    if not isinstance(path, str) or not path:
        refuse(MODEL, f"must be a model folder or a hub id, got {path!r}")
    name = os.path.basename(path)
    download = (
        "set it (the launchers' MODEL_PATH) to the folder of a downloaded model (python scripts/prepare_model.py "
    )
    # a relative path of any form (./m, ../m, ~/m, models/qwen): a hub id (namespace/name) never names a folder here
    if (
        path.startswith(("~", "./", "../"))
        or path in (".", "..")
        or (not path.startswith("/") and os.path.isdir(os.path.expanduser(path)))
    ):
        refuse(
            MODEL,
            f"{path} is not an absolute path: the workers start in other folders and do not expand ~; give it (the "
            f"launchers' MODEL_PATH) as {os.path.abspath(os.path.expanduser(path))}",
        )
    if path.startswith("/") and not os.path.isdir(path):
        refuse(MODEL, f"{path} is not a folder on this machine: {download}<hub id> {path} downloads one there)")
    if path.startswith("/") and not os.path.isfile(os.path.join(path, "config.json")):
        refuse(MODEL, f"{path} holds no model (no config.json): {download}<hub id> <folder> downloads one)")
    # a hub id: every FSDP, vLLM and reward worker of every node would fail on it minutes into start-up
    if not path.startswith("/") and hub_off():
        refuse(
            MODEL,
            f"{path} is not a local folder, and the hub is off (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE): download it "
            f"once to shared storage (python scripts/prepare_model.py {path} /shared/models/{name}) and set it (the "
            "launchers' MODEL_PATH) to that folder",
        )


def ray_address(config: DictConfig) -> Optional[str]:
    """The Ray cluster the run joins, by ray.init's own rule (RAY_ADDRESS, ``ray_init.address``, a cluster ``ray
    start``ed here); None: run_ppo's ray.init() starts a new Ray on this machine, with this machine's GPUs only."""
    ray_init = OmegaConf.select(config, "ray_kwargs.ray_init") or {}
    try:
        from ray._private.services import canonicalize_bootstrap_address

        return canonicalize_bootstrap_address(ray_init.get("address"), ray_init.get("_temp_dir"))
    except Exception:  # a private API of Ray: if it moves, "" leaves the check to verl
        return ""


def check_accelerators(config: DictConfig) -> None:
    """Found before Ray starts (verl finds out only after loading the tokenizer and the data sets, minutes later). A
    run that joins a running Ray cluster needs only the cluster to answer: verl checks its GPUs."""
    from verl.utils.device import get_torch_device, is_device_available

    trainer, address = config.trainer, ray_address(config)
    if address:
        host, _, port = address.rpartition(":")
        try:  # ray.init would retry for minutes
            socket.create_connection((host, int(port)), timeout=5.0).close()
        except (OSError, ValueError) as error:
            refuse(
                "ray_kwargs.ray_init.address",
                f"no Ray cluster answers at {address} (from RAY_ADDRESS or this key; {error}): start it (`ray start "
                "--head` on the head node; docker/slurm_gcpo.sbatch does it) or unset RAY_ADDRESS to train on this "
                "machine's GPUs",
            )
    if address is not None:
        return
    visible = get_torch_device().device_count() if is_device_available() else 0
    if visible == 0:
        refuse(
            "trainer.device",
            f"{trainer.device}, but no GPU found on this machine (0 visible) and no Ray cluster to join (RAY_ADDRESS): "
            "training needs GPUs. To check a config on a machine without GPUs, use the dry run (--dry-run / "
            "GCPO_DRY_RUN=1): it composes and validates the config and starts nothing.",
        )
    if trainer.nnodes > 1:
        refuse(
            "trainer.nnodes",
            f"{trainer.nnodes}, but no Ray cluster to join: start one over the {trainer.nnodes} nodes and set "
            "RAY_ADDRESS=<head-ip>:6379 (docker/slurm_gcpo.sbatch does both)",
        )
    if visible < trainer.n_gpus_per_node:
        refuse(
            "trainer.n_gpus_per_node",
            f"{trainer.n_gpus_per_node}, but this machine has {visible} visible {trainer.device} device(s): set it to "
            f"{visible} (GPUS_PER_NODE in the launchers)",
        )


def missing_data_files(config: DictConfig, prepared: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """(key, path, hint) of each data file not on this machine (remote URIs are not checked); ``prepared``: (file
    names, hint) of a project's data preparation, which a missing file of those names is told to run."""
    names, hint = prepared or ((), OWN)
    found = []
    for key in ("data.train_files", "data.val_files"):
        for path in data_files(plain(OmegaConf.select(config, key))) or []:
            if "://" not in path and not os.path.exists(os.path.expanduser(path)):
                found.append((key, path, hint if os.path.basename(path) in names else OWN))
    return found


def check_data_files_exist(config: DictConfig, prepared: tuple = ()) -> None:
    """verl finds a missing file only from inside a Ray actor."""
    if missing := missing_data_files(config, prepared):
        (key, path, hint), more = missing[0], len(missing) - 1
        refuse(key, f"{path} does not exist: {hint}{f' ({more} more missing)' if more else ''}")


def _wandb_login() -> bool:
    """W&B can log: an API key (WANDB_API_KEY, or ``wandb login``'s ~/.netrc), or a mode that needs none."""
    env = os.environ
    if env.get("WANDB_API_KEY") or any(env.get(var, "").lower() in on for var, on in WANDB_KEYLESS.items()):
        return True
    netrc = Path(env.get("NETRC") or Path(env.get("HOME", "~")).expanduser() / ".netrc")
    try:
        return "api.wandb.ai" in netrc.read_text(encoding="utf-8")
    except OSError:
        return False
