"""Start-up checks of this machine, as tables: the encoder's weights, the loggers and the data files' kind
(:data:`CONFIG_CHECKS`, run by :func:`~recipe.gcpo.preflight.validate`), then, for a run that is to start here, the
policy's weights, the GPUs (or the Ray cluster it joins) and that the data files exist (:data:`RUN_CHECKS`, run by the
entry point). Each finds in seconds what verl would find minutes into a start-up, or in a worker.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import socket
from pathlib import Path
from typing import Any, Callable, Optional

from huggingface_hub import try_to_load_from_cache
from omegaconf import ListConfig, OmegaConf
from verl.utils.device import get_torch_device, is_device_available
from verl.utils.tracking import Tracking

from gcpo_core.encoding.encoder import resolve_model_path
from gcpo_core.training_data.prepare import prepared_file_names
from recipe.gcpo.config import Check, Facts, plain

# a missing data file's hint: scripts/prepare_data.py writes the launchers' own (train.parquet, ...); a user's own
# is theirs to point at
PREPARED = "scripts/prepare_data.py writes it (--out-dir: the launchers' DATA_DIR)"
OWN = "point data.train_files / data.val_files at a file that exists on this machine"
# either of these set true turns the Hugging Face hub off
HUB_OFF = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
# the values of these that let W&B run without an API key
WANDB_KEYLESS = {"WANDB_MODE": ("offline", "disabled", "dryrun"), "WANDB_DISABLED": ("true", "1", "yes")}
# a logger backend -> the module it imports in verl's Tracking (verl/utils/tracking.py): its own name but for one
LOGGER_MODULES = {name: name for name in ("wandb", "mlflow", "swanlab", "tensorboard", "clearml", "trackio")}
LOGGER_MODULES["vemlp_wandb"] = "volcengine_ml_platform"


def _ray_address(facts: Facts) -> Optional[str]:
    """The Ray cluster the run joins, by ray.init's own rule (RAY_ADDRESS, ``ray_init.address``, a cluster ``ray
    start``ed here); None: run_ppo's ray.init() starts a new Ray on this machine, with this machine's GPUs only."""
    ray_init = facts.config.ray_kwargs.get("ray_init") or {}
    try:
        from ray._private.services import canonicalize_bootstrap_address

        return canonicalize_bootstrap_address(ray_init.get("address"), ray_init.get("_temp_dir"))
    except Exception:  # a private API of Ray: if it moves, "" leaves the check to verl
        return ""


def _ray_unreachable(facts: Facts) -> Optional[str]:
    """Why nothing answers at the cluster's address (host:port of its GCS), or None: ray.init would retry for minutes."""
    host, _, port = facts["ray_address"].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5.0):
            return None
    except (OSError, ValueError) as error:
        return str(error)


def _encoder_source(facts: Facts) -> str:
    """Where the credit actors load the encoder from: "bundled" (the default model's copy), "folder" (a path, or a
    name that exists here), "hub", or "" where the estimator embeds nothing."""
    if facts["gcpo"] is None:
        return ""
    if resolve_model_path(name := facts["encoder"]) != name:
        return "bundled"
    return "folder" if name.startswith(("/", "./", "../", "~")) or os.path.exists(facts["encoder_folder"]) else "hub"


def _bad_logger(facts: Facts) -> Any:
    """The first backend of ``trainer.logger`` that verl does not know or whose package is not installed, or None."""
    for backend in facts["loggers"]:
        if backend not in (*facts["known_loggers"], "tracking"):
            return backend
        module = LOGGER_MODULES.get("wandb" if backend == "tracking" else backend)
        if module is not None and importlib.util.find_spec(module) is None:
            return backend
    return None


def _wandb_login(facts: Facts) -> bool:
    """W&B can log: an API key (WANDB_API_KEY, or ``wandb login``'s ~/.netrc), or a mode that needs none."""
    env = facts["environ"]
    if env.get("WANDB_API_KEY") or any(env.get(var, "").lower() in on for var, on in WANDB_KEYLESS.items()):
        return True
    netrc = Path(env.get("NETRC") or Path(env.get("HOME", "~")).expanduser() / ".netrc")
    try:
        return "api.wandb.ai" in netrc.read_text(encoding="utf-8")
    except OSError:
        return False


def _paths(value: Any) -> Optional[list[str]]:
    """A ``data.*_files`` value's paths; None where it is not a path or a non-empty list of them."""
    files = [value] if isinstance(value, str) else list(value) if isinstance(value, ListConfig) else None
    return files if files and all(isinstance(f, str) and f.strip() for f in files) else None


def _unreadable(files: list[str]) -> Optional[str]:
    """The first of ``files`` that exists here but is no file verl's dataset reads, with why; None if none is."""
    for path in files:
        if os.path.isdir(local := os.path.expanduser(path)):
            return f"{path} is a folder, not a data file"
        if os.path.exists(local) and not local.endswith((".parquet", ".json", ".jsonl")):
            return f"{path} is not a parquet or JSON file (verl's RLHFDataset reads .parquet, .json and .jsonl)"
    return None


def _missing_files(facts: Facts) -> list[dict[str, str]]:
    """The data files not on this machine (remote URIs are not checked), each with the key that lists it and a hint."""
    return [
        {"key": f"data.{key}", "path": p, "hint": PREPARED if os.path.basename(p) in prepared_file_names() else OWN}
        for key in ("train_files", "val_files")
        for p in facts[key]
        if "://" not in p and not os.path.exists(os.path.expanduser(p))
    ]


MODEL, ENCODER = "actor_rollout_ref.model.path", "algorithm.gcpo.encoder.model"
FACTS: dict[str, Callable[[Facts], Any]] = {
    "environ": lambda f: os.environ,
    "hub_off": lambda f: any(f["environ"].get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in HUB_OFF),
    "model_path": lambda f: str(OmegaConf.select(f.config, MODEL) or ""),
    # a relative path of any form (./m, ../m, ~/m, models/qwen): a hub id (namespace/name) never names a folder here
    "model_relative": lambda f: (
        (path := f["model_path"]).startswith(("~", "./", "../"))
        or path in (".", "..")
        or (not path.startswith("/") and os.path.isdir(os.path.expanduser(path)))
    ),
    "model_absolute": lambda f: os.path.abspath(os.path.expanduser(f["model_path"])),
    "model_name": lambda f: os.path.basename(f["model_path"]),
    "trainer": lambda f: f.config.trainer,
    "ray_address": _ray_address,
    "ray_unreachable": _ray_unreachable,
    "visible": lambda f: get_torch_device().device_count() if is_device_available() else 0,
    "encoder": lambda f: f["gcpo"].encoder.model,
    "encoder_source": _encoder_source,
    "encoder_folder": lambda f: os.path.expanduser(f["encoder"]),
    "encoder_is_folder": lambda f: os.path.isdir(f["encoder_folder"]),
    "encoder_has_model": lambda f: any(
        os.path.isfile(os.path.join(f["encoder_folder"], name)) for name in ("modules.json", "config.json")
    ),
    "encoder_repo": lambda f: f["encoder"] if "/" in f["encoder"] else f"sentence-transformers/{f['encoder']}",
    "encoder_cached": lambda f: isinstance(try_to_load_from_cache(f["encoder_repo"], "config.json"), str),
    "loggers": lambda f: [v] if isinstance(v := OmegaConf.select(f.config, "trainer.logger"), str) else list(v or []),
    "known_loggers": lambda f: list(Tracking.supported_backend),
    "known_logger_list": lambda f: ", ".join(f["known_loggers"]),
    "bad_logger": _bad_logger,
    "logger_close": lambda f: difflib.get_close_matches(str(f["bad_logger"]), f["known_loggers"], n=1),
    "logger_hint": lambda f: "".join(f" (did you mean {close}?)" for close in f["logger_close"]),
    "logger_module": lambda f: LOGGER_MODULES.get("wandb" if f["bad_logger"] == "tracking" else f["bad_logger"]),
    "wandb_login": _wandb_login,
    "train_files_value": lambda f: plain(OmegaConf.select(f.config, "data.train_files")),
    "val_files_value": lambda f: plain(OmegaConf.select(f.config, "data.val_files")),
    "train_files": lambda f: _paths(f["train_files_value"]),
    "val_files": lambda f: _paths(f["val_files_value"]),
    "train_unreadable": lambda f: _unreadable(f["train_files"]),
    "val_unreadable": lambda f: _unreadable(f["val_files"]),
    "missing_files": _missing_files,
    "missing": lambda f: f["missing_files"][0],
    "more_missing": lambda f: f" ({len(f['missing_files']) - 1} more missing)" if len(f["missing_files"]) > 1 else "",
}

PATHS = "must be a data file or a list of them, got "
# validate()'s, the dry run's as a run's
CONFIG_CHECKS: tuple[Check, ...] = (
    Check(ENCODER, lambda f: f["encoder_source"] != "folder" or f["encoder_is_folder"], "{encoder} is not a folder"),
    Check(
        ENCODER,
        lambda f: f["encoder_source"] != "folder" or f["encoder_has_model"],
        "{encoder} holds no model (no modules.json or config.json)",
    ),
    # a hub id, downloaded by the credit actors at start-up unless the hub is off
    Check(
        ENCODER,
        lambda f: f["encoder_source"] != "hub" or not f["hub_off"] or f["encoder_cached"],
        "{encoder} is not in the Hugging Face cache and the hub is off (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE): "
        "download it once (huggingface-cli download {encoder_repo}) or set it to a local folder every node can read",
    ),
    Check(
        "trainer.logger",
        lambda f: f["bad_logger"] in (None, "tracking", *f["known_loggers"]),
        "{bad_logger!r} is not a backend verl knows{logger_hint}; known: {known_logger_list}",
    ),
    Check(
        "trainer.logger",
        lambda f: f["bad_logger"] is None,
        "{bad_logger} needs the {logger_module} package, which is not installed here (pip install {logger_module}, "
        "or drop it from trainer.logger)",
    ),
    Check(
        "trainer.logger",
        lambda f: not ("wandb" in f["loggers"] or "tracking" in f["loggers"]) or f["wandb_login"],
        "has wandb, but W&B has no API key here (WANDB_API_KEY, or `wandb login`) and is not offline: set "
        'WANDB_API_KEY, or WANDB_MODE=offline, or log without it (trainer.logger=\'["console","tensorboard"]\')',
    ),
    # verl's dataset would fail on these in a Ray actor; a file that does not exist here is the run's check
    Check("data.train_files", lambda f: f["train_files"] is not None, PATHS + "{train_files_value!r}"),
    Check("data.train_files", lambda f: f["train_unreadable"] is None, "{train_unreadable}"),
    Check("data.val_files", lambda f: f["val_files"] is not None, PATHS + "{val_files_value!r}"),
    Check("data.val_files", lambda f: f["val_unreadable"] is None, "{val_unreadable}"),
)

DOWNLOAD = "set it (the launchers' MODEL_PATH) to the folder of a downloaded model (python scripts/prepare_model.py "
# the policy's weights, which every worker loads: a dry run only warns
MODEL_CHECKS: tuple[Check, ...] = (
    Check(
        MODEL,
        lambda f: not f["model_relative"],
        "{model_path} is not an absolute path: the workers start in other folders and do not expand ~; give it (the "
        "launchers' MODEL_PATH) as {model_absolute}",
    ),
    Check(
        MODEL,
        lambda f: not f["model_path"].startswith("/") or os.path.isdir(f["model_path"]),
        "{model_path} is not a folder on this machine: " + DOWNLOAD + "<hub id> {model_path} downloads one there)",
    ),
    Check(
        MODEL,
        lambda f: not f["model_path"].startswith("/") or os.path.isfile(os.path.join(f["model_path"], "config.json")),
        "{model_path} holds no model (no config.json): " + DOWNLOAD + "<hub id> <folder> downloads one)",
    ),
    # a hub id: every FSDP, vLLM and reward worker of every node would fail on it minutes into start-up
    Check(
        MODEL,
        lambda f: f["model_path"].startswith("/") or not f["hub_off"],
        "{model_path} is not a local folder, and the hub is off (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE): download it "
        "once to shared storage (python scripts/prepare_model.py {model_path} /shared/models/{model_name}) and set it "
        "(the launchers' MODEL_PATH) to that folder",
    ),
)
# found before Ray starts (verl finds out only after loading the tokenizer and the data sets, minutes later). A run
# that joins a running Ray cluster needs only the cluster to answer: verl checks its GPUs
ACCELERATOR_CHECKS: tuple[Check, ...] = (
    Check(
        "ray_kwargs.ray_init.address",
        lambda f: not f["ray_address"] or f["ray_unreachable"] is None,
        "no Ray cluster answers at {ray_address} (from RAY_ADDRESS or this key; {ray_unreachable}): start it (`ray "
        "start --head` on the head node; docker/slurm_gcpo.sbatch does it) or unset RAY_ADDRESS to train on this "
        "machine's GPUs",
    ),
    Check(
        "trainer.device",
        lambda f: f["ray_address"] is not None or f["visible"] > 0,
        "{trainer.device}, but no GPU found on this machine (0 visible) and no Ray cluster to join (RAY_ADDRESS): "
        "training needs GPUs. To check a config on a machine without GPUs, use the dry run (--dry-run / "
        "GCPO_DRY_RUN=1): it composes and validates the config and starts nothing.",
    ),
    Check(
        "trainer.nnodes",
        lambda f: f["ray_address"] is not None or f["trainer"].nnodes <= 1,
        "{trainer.nnodes}, but no Ray cluster to join: start one over the {trainer.nnodes} nodes and set "
        "RAY_ADDRESS=<head-ip>:6379 (docker/slurm_gcpo.sbatch does both)",
    ),
    Check(
        "trainer.n_gpus_per_node",
        lambda f: f["ray_address"] is not None or f["visible"] >= f["trainer"].n_gpus_per_node,
        "{trainer.n_gpus_per_node}, but this machine has {visible} visible {trainer.device} device(s): set it to "
        "{visible} (GPUS_PER_NODE in the launchers)",
    ),
)
# verl finds a missing file only from inside a Ray actor
DATA_CHECKS: tuple[Check, ...] = (
    Check(
        "{missing[key]}",
        lambda f: not f["missing_files"],
        "{missing[path]} does not exist: {missing[hint]}{more_missing}",
    ),
)
# the entry point's, in this order, once the start-up lines have said what will run
RUN_CHECKS = (*MODEL_CHECKS, *ACCELERATOR_CHECKS, *DATA_CHECKS)
