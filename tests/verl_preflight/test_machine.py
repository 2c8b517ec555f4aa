"""This machine's checks (verl_preflight/machine.py): the loggers, the data files (their kind and content, then that
they exist), the policy's weights, the GPUs or the Ray cluster; on verl's stock config, the environment set by each
test. The recipe's data files and its encoder are tests/recipe/gcpo/test_checks.py's."""

import json
import re
import socket
from types import SimpleNamespace

import pytest

from tests.verl_preflight.conftest import VERL_BASE, compose_verl, rows, write_parquet
from verl_preflight import ConfigError, machine

WANDB_VARS = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DISABLED", "NETRC")


def loggers(monkeypatch, value, **environ):
    """check_files_and_loggers on ``trainer.logger=value`` with only ``environ`` of W&B's variables set."""
    for var in WANDB_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, setting in environ.items():
        monkeypatch.setenv(var, setting)
    machine.check_files_and_loggers(compose_verl(VERL_BASE + [f"trainer.logger={value}"]))


# --- the loggers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, environ, message",
    [
        ('["console","tensorbord"]', {}, r"'tensorbord' is not a backend verl knows \(did you mean tensorboard\?\)"),
        ('["console","wandb"]', {"HOME": "/nonexistent"}, "W&B has no API key here"),
    ],
)
def test_a_logger_verl_would_fail_on_is_refused(monkeypatch, value, environ, message):
    with pytest.raises(ValueError, match=message):
        loggers(monkeypatch, value, **environ)


@pytest.mark.parametrize("environ", [{"WANDB_API_KEY": "k"}, {"WANDB_MODE": "offline"}, {"WANDB_MODE": "disabled"}])
def test_wandb_with_a_key_or_offline_passes(monkeypatch, environ):
    loggers(monkeypatch, '["console","wandb"]', HOME="/nonexistent", **environ)


def test_wandb_logged_in_through_netrc_passes(monkeypatch, tmp_path):
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    loggers(monkeypatch, '["wandb"]', HOME=str(tmp_path))


def test_a_logger_whose_package_is_missing_is_refused(monkeypatch):
    monkeypatch.setitem(machine.LOGGER_MODULES, "tensorboard", "no_such_tensorboard_package")
    with pytest.raises(ValueError, match="tensorboard needs the no_such_tensorboard_package package"):
        loggers(monkeypatch, '["console","tensorboard"]')


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "[console,null]",
            "trainer.logger: must be a list of logger names (e.g. [console,wandb]), got ['console', None]",
        ),
        ("1", "trainer.logger: must be a list of logger names (e.g. [console,wandb]), got 1"),
        ("null", "trainer.logger: must be a list of logger names (e.g. [console,wandb]), got None"),
    ],
)
def test_a_logger_list_verl_could_not_read_is_refused_in_one_line(monkeypatch, value, message):
    with pytest.raises(ConfigError) as refused:
        loggers(monkeypatch, value)
    assert str(refused.value) == message and refused.value.key == "trainer.logger"


@pytest.mark.parametrize("value", ["[]", "console", "[console,tracking]"])  # no logging; one name; wandb's old name
def test_a_logger_list_verl_reads_passes(monkeypatch, value):
    loggers(monkeypatch, value, WANDB_MODE="offline")


# --- the data files: kind and content ----------------------------------------------------------------------------


def check_data(train, val=None, batch: int = 2) -> None:
    files = [f"data.train_files={train}", f"data.train_batch_size={batch}"]
    machine.check_files_and_loggers(compose_verl(VERL_BASE + files + ([f"data.val_files={val}"] if val else [])))


def test_data_files_must_be_paths_and_an_existing_one_must_be_data(tmp_path):
    (tmp_path / "prepare.py").write_text("")
    for value, problem in [
        ("null", "must be a data file or a list of them, got None"),
        ("[]", "must be a data file or a list of them, got []"),
        ("123", "must be a data file or a list of them, got 123"),
        (str(tmp_path), f"{tmp_path} is a folder, not a data file"),
        (str(tmp_path / "prepare.py"), "is not a parquet or JSON file"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(problem)) as error:
            machine.check_files_and_loggers(compose_verl(VERL_BASE + [f"data.train_files={value}"]))
        assert error.value.key == "data.train_files"
    machine.check_files_and_loggers(compose_verl(VERL_BASE))  # missing: the run's check


def _text_parquet(tmp_path):
    path = tmp_path / "train.parquet"
    path.write_text("prompt,answer\nWhat is 1 + 1?,2\n")
    return path


def _empty(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"")
    return path


@pytest.mark.parametrize(
    "make, key, message",
    [
        (
            lambda tmp: _empty(tmp, "train.parquet"),
            "data.train_files",
            "{path} cannot be read as parquet: ArrowInvalid: Parquet file size is 0 bytes",
        ),
        (
            _text_parquet,
            "data.train_files",
            "{path} cannot be read as parquet: ArrowInvalid: Parquet magic bytes not found in footer. Either the file "
            "is corrupted or this is not a parquet file.",
        ),
        (
            lambda tmp: write_parquet(tmp / "train.parquet", 0),
            "data.train_files",
            "{path} holds no rows",
        ),
        (
            lambda tmp: _empty(tmp, "train.jsonl"),
            "data.train_files",
            "{path} holds no rows",
        ),
        (
            lambda tmp: write_parquet(tmp / "val.parquet", 3, drop=("prompt",)),
            "data.val_files",
            "{path} has no column 'prompt', which verl reads for each row; its columns: ['data_source', "
            "'reward_model']",
        ),
    ],
    ids=["empty parquet", "text named parquet", "parquet of no rows", "empty jsonl", "no prompt column"],
)
def test_a_data_file_that_is_not_data_verl_reads_is_refused_in_one_line(tmp_path, make, key, message):
    path = make(tmp_path)
    good = write_parquet(tmp_path / "good.parquet", 4)
    train, val = (path, good) if key == "data.train_files" else (good, path)
    with pytest.raises(ConfigError) as refused:
        check_data(train, val)
    assert str(refused.value) == f"{key}: " + message.format(path=path)


def test_a_step_larger_than_the_training_rows_is_refused(tmp_path):
    """verl's loader drops the last partial batch: an epoch of no step divides by zero after the validation pass."""
    train = write_parquet(tmp_path / "train.parquet", 2)
    with pytest.raises(ConfigError) as refused:
        check_data(train, batch=4)
    assert str(refused.value) == (
        "data.train_batch_size: 4 prompts a step, but data.train_files hold 2: an epoch has no step"
    )
    check_data(train, batch=2)
    check_data(f"[{train},{train}]", batch=4)  # the files together hold a step


def test_data_files_verl_reads_pass(tmp_path):
    records = tmp_path / "train.json"
    records.write_text(json.dumps(rows(3), indent=2))  # a list of records, pretty-printed
    lines = tmp_path / "val.jsonl"
    lines.write_text("\n".join(json.dumps(row) for row in rows(3)) + "\n")
    check_data(records, lines, batch=3)
    check_data(write_parquet(tmp_path / "train.parquet", 3), records, batch=3)


# --- data files that are not here -----------------------------------------------------------------------------


def test_a_missing_data_file_is_refused_naming_the_key_that_lists_it(tmp_path):
    present = tmp_path / "train.parquet"
    present.write_text("x")
    for train, val, key in (
        (present, tmp_path / "val.parquet", "data.val_files"),
        (tmp_path / "t.parquet", present, "data.train_files"),
    ):
        with pytest.raises(ConfigError, match="does not exist") as refused:
            machine.check_data_files_exist(compose_verl([f"data.train_files={train}", f"data.val_files=[{val}]"]))
        assert refused.value.key == key
    machine.check_data_files_exist(compose_verl([f"data.train_files={present}", f"data.val_files={present}"]))


def test_a_missing_file_a_data_preparation_writes_is_told_to_run_it(tmp_path):
    config = compose_verl(
        [f"data.train_files=[{tmp_path}/train.parquet,{tmp_path}/mine.parquet]", "data.val_files=s3://b/v.parquet"]
    )
    prepared = (("train.parquet",), "prepare.py writes it")
    assert machine.missing_data_files(config, prepared) == [
        ("data.train_files", f"{tmp_path}/train.parquet", "prepare.py writes it"),
        ("data.train_files", f"{tmp_path}/mine.parquet", machine.OWN),
    ]  # a remote URI is not checked
    with pytest.raises(ConfigError) as refused:
        machine.check_data_files_exist(config, prepared)
    assert str(refused.value) == (
        f"data.train_files: {tmp_path}/train.parquet does not exist: prepare.py writes it (1 more missing)"
    )


# --- the policy's weights ---------------------------------------------------------------------------------------


def _problem(path, monkeypatch, offline=False):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    if offline:
        monkeypatch.setenv(*offline)
    try:
        machine.check_model_path(compose_verl([f"actor_rollout_ref.model.path='{path}'"]))
    except ConfigError as error:
        assert error.key == "actor_rollout_ref.model.path"
        return str(error)
    return None


def test_a_hub_id_is_refused_when_the_hub_is_off_with_the_download_command(monkeypatch):
    for offline in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "true")):
        problem = _problem("Qwen/Qwen3-4B-Base", monkeypatch, offline)
        assert problem.startswith("actor_rollout_ref.model.path: Qwen/Qwen3-4B-Base is not a local folder, and the hub")
        assert "scripts/prepare_model.py Qwen/Qwen3-4B-Base /shared/models/Qwen3-4B-Base" in problem
        assert "MODEL_PATH" in problem
    assert _problem("Qwen/Qwen3-4B-Base", monkeypatch, ("HF_HUB_OFFLINE", "0")) is None


def test_an_absolute_folder_passes_offline_and_a_hub_id_online(monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text("{}")  # a model's folder
    assert _problem(str(tmp_path), monkeypatch, ("HF_HUB_OFFLINE", "1")) is None
    assert _problem("Qwen/Qwen3-4B-Base", monkeypatch) is None  # the hub is reachable


def test_a_path_that_is_not_an_absolute_folder_is_refused_hub_or_not_with_advice_that_fits(monkeypatch, tmp_path):
    absent = tmp_path / "models" / "Qwen3-4B-Base"
    problem = _problem(str(absent), monkeypatch)  # the hub is reachable, but this is no hub id
    assert problem.startswith(f"actor_rollout_ref.model.path: {absent} is not a folder on this machine")
    assert f"python scripts/prepare_model.py <hub id> {absent} downloads one there" in problem
    assert "/shared/models/" not in problem  # the hub-id advice does not fit a path
    # relative or ~: the workers start elsewhere and expand nothing, so even an existing folder is refused
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "models").mkdir()
    problem = _problem("~/models", monkeypatch, ("HF_HUB_OFFLINE", "1"))
    assert problem == (
        "actor_rollout_ref.model.path: ~/models is not an absolute path: the workers start in other folders and do "
        f"not expand ~; give it (the launchers' MODEL_PATH) as {tmp_path / 'models'}"
    )
    monkeypatch.chdir(tmp_path)
    assert _problem("./models", monkeypatch).endswith(f"as {tmp_path / 'models'}")
    assert "is not an absolute path" in _problem("../models", monkeypatch)


def test_an_absolute_folder_without_a_model_is_refused_and_one_with_a_config_passes(tmp_path, monkeypatch):
    """``model.path=/tmp`` reached training: every worker failed on it minutes in."""
    assert "holds no model (no config.json)" in _problem(tmp_path, monkeypatch)
    (tmp_path / "config.json").write_text("{}")
    assert _problem(tmp_path, monkeypatch) is None


# --- the GPUs, or the Ray cluster --------------------------------------------------------------------------------


def gpus(monkeypatch, count: int) -> None:
    """This machine has ``count`` GPUs as verl sees them (verl.utils.device), and no Ray cluster of its own."""
    import verl.utils.device as device

    monkeypatch.setattr(device, "is_device_available", lambda: count > 0)
    monkeypatch.setattr(device, "get_torch_device", lambda: SimpleNamespace(device_count=lambda: count))
    monkeypatch.setattr(machine, "ray_address", lambda config: None)


@pytest.mark.parametrize(
    "visible, overrides, message",
    [
        (
            0,
            [],
            "trainer.device: cuda, but no GPU found on this machine (0 visible) and no Ray cluster to join "
            "(RAY_ADDRESS): training needs GPUs. To check a config on a machine without GPUs, use the dry run "
            "(--dry-run / GCPO_DRY_RUN=1): it composes and validates the config and starts nothing.",
        ),
        (
            8,
            ["trainer.nnodes=2"],
            "trainer.nnodes: 2, but no Ray cluster to join: start one over the 2 nodes and set "
            "RAY_ADDRESS=<head-ip>:6379 (docker/slurm_gcpo.sbatch does both)",
        ),
        (
            4,
            [],
            "trainer.n_gpus_per_node: 8, but this machine has 4 visible cuda device(s): set it to 4 (GPUS_PER_NODE in "
            "the launchers)",
        ),
    ],
)
def test_a_machine_without_the_gpus_the_config_asks_for_is_refused(monkeypatch, visible, overrides, message):
    gpus(monkeypatch, visible)
    with pytest.raises(ConfigError) as refused:
        machine.check_accelerators(compose_verl(VERL_BASE + overrides))
    assert str(refused.value) == message


def test_a_machine_with_the_gpus_passes(monkeypatch):
    gpus(monkeypatch, 8)
    machine.check_accelerators(compose_verl(VERL_BASE))
    machine.check_accelerators(compose_verl(VERL_BASE + ["trainer.n_gpus_per_node=2"]))


def test_a_ray_cluster_is_joined_when_it_answers_and_refused_when_it_does_not(monkeypatch):
    """ray_address reads RAY_ADDRESS, as ray.init does (a local address as this node's); the cluster's GPUs are
    verl's to check (none here)."""
    import verl.utils.device as device

    monkeypatch.setattr(device, "is_device_available", lambda: False)
    config = compose_verl(VERL_BASE)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    host = machine.ray_address(config).rpartition(":")[0]
    with socket.socket() as server:
        server.bind((host, 0))
        server.listen()
        monkeypatch.setenv("RAY_ADDRESS", f"{host}:{server.getsockname()[1]}")
        machine.check_accelerators(config)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"{host}:{port}")
    with pytest.raises(ConfigError) as refused:
        machine.check_accelerators(config)
    assert refused.value.key == "ray_kwargs.ray_init.address"
    assert str(refused.value).startswith(
        f"ray_kwargs.ray_init.address: no Ray cluster answers at {host}:{port} (from RAY_ADDRESS or this key; "
    )
    assert str(refused.value).endswith("or unset RAY_ADDRESS to train on this machine's GPUs")
