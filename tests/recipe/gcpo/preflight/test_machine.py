"""This machine's start-up checks (recipe/gcpo/preflight/machine.py): the encoder's and the policy's weights, the
loggers, the data files; the GPUs and the Ray cluster through the entry point are tests/recipe/gcpo/test_main_gcpo.py's."""

import re

import pytest

from recipe.gcpo.config import ConfigError, Facts, run_checks
from recipe.gcpo.preflight import config_facts, machine, validate
from tests.recipe.gcpo.conftest import BASE, compose_gcpo


def run(checks, config, **facts):
    """Runs ``checks`` (of machine.py's tables) on ``config``'s facts, those in ``facts`` as the test sets them."""
    known = config_facts(config)
    known.update(facts)
    run_checks(checks, known)


LOGGER_CHECKS = [check for check in machine.CONFIG_CHECKS if check.key == "trainer.logger"]

# --- the encoder --------------------------------------------------------------------------------------------


def test_the_bundled_encoder_and_a_local_model_folder_pass(tmp_path):
    validate(compose_gcpo(BASE))
    folder = tmp_path / "encoder"
    folder.mkdir()
    (folder / "modules.json").write_text("[]")
    validate(compose_gcpo(BASE + [f"algorithm.gcpo.encoder.model={folder}"]))


@pytest.mark.parametrize(
    "model, message",
    [
        ("/no/such/encoder", "algorithm.gcpo.encoder.model: /no/such/encoder is not a folder"),
        ("EMPTY", r"holds no model \(no modules.json or config.json\)"),
        ("someone/not-cached-encoder", "is not in the Hugging Face cache and the hub is off"),
    ],
)
def test_an_encoder_the_credit_actors_could_not_load_is_refused(tmp_path, monkeypatch, model, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    if model == "EMPTY":
        (tmp_path / "empty").mkdir()
        model = str(tmp_path / "empty")
    config = compose_gcpo(BASE + [f"algorithm.gcpo.encoder.model={model}"])
    with pytest.raises(ValueError, match=message):
        validate(config)


def test_a_grpo_run_does_not_check_an_encoder_it_never_loads():
    validate(compose_gcpo(BASE + ["algorithm.adv_estimator=grpo", "algorithm.gcpo.encoder.model=/no/such/encoder"]))


# --- the loggers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "loggers, environ, message",
    [
        ('["console","tensorbord"]', {}, r"'tensorbord' is not a backend verl knows \(did you mean tensorboard\?\)"),
        ('["console","wandb"]', {"HOME": "/nonexistent"}, "W&B has no API key here"),
    ],
)
def test_a_logger_verl_would_fail_on_is_refused(loggers, environ, message):
    config = compose_gcpo(BASE + [f"trainer.logger={loggers}"])
    with pytest.raises(ValueError, match=message):
        run(LOGGER_CHECKS, config, environ=environ)


@pytest.mark.parametrize("environ", [{"WANDB_API_KEY": "k"}, {"WANDB_MODE": "offline"}, {"WANDB_MODE": "disabled"}])
def test_wandb_with_a_key_or_offline_passes(environ):
    run(LOGGER_CHECKS, compose_gcpo(BASE + ['trainer.logger=["console","wandb"]']), environ=environ)


def test_wandb_logged_in_through_netrc_passes(tmp_path):
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    run(LOGGER_CHECKS, compose_gcpo(BASE + ['trainer.logger=["wandb"]']), environ={"HOME": str(tmp_path)})


def test_a_logger_whose_package_is_missing_is_refused(monkeypatch):
    monkeypatch.setitem(machine.LOGGER_MODULES, "tensorboard", "no_such_tensorboard_package")
    config = compose_gcpo(BASE + ['trainer.logger=["console","tensorboard"]'])
    with pytest.raises(ValueError, match="tensorboard needs the no_such_tensorboard_package package"):
        run(LOGGER_CHECKS, config, environ={})


# --- data files ------------------------------------------------------------------------------------


def test_only_the_launchers_own_files_point_at_prepare_data(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # ~/data/gcpo/train.parquet: not there
    files = "['/data/gcpo/val_aime24.parquet','~/data/gcpo/train.parquet']"
    config = compose_gcpo([f"data.train_files={files}", "data.val_files=/mine/my_train.parquet"])
    hints = [missing["hint"] for missing in Facts(config, machine.FACTS)["missing_files"]]
    assert ["scripts/prepare_data.py" in hint for hint in hints] == [True, True, False]


def _problem(path, monkeypatch, offline=False):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    if offline:
        monkeypatch.setenv(*offline)
    try:
        run(machine.MODEL_CHECKS, compose_gcpo([f"actor_rollout_ref.model.path='{path}'"]))
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


def test_a_missing_data_file_is_refused_naming_the_key_that_lists_it(tmp_path):
    present = tmp_path / "train.parquet"
    present.write_text("x")
    for train, val, key in (
        (present, tmp_path / "val.parquet", "data.val_files"),
        (tmp_path / "t.parquet", present, "data.train_files"),
    ):
        with pytest.raises(ConfigError, match="does not exist") as refused:
            run(machine.DATA_CHECKS, compose_gcpo([f"data.train_files={train}", f"data.val_files=[{val}]"]))
        assert refused.value.key == key
    run(machine.DATA_CHECKS, compose_gcpo([f"data.train_files={present}", f"data.val_files={present}"]))


def test_an_absolute_folder_without_a_model_is_refused_and_one_with_a_config_passes(tmp_path, monkeypatch):
    """``model.path=/tmp`` reached training: every worker failed on it minutes in."""
    assert "holds no model (no config.json)" in _problem(tmp_path, monkeypatch)
    (tmp_path / "config.json").write_text("{}")
    assert _problem(tmp_path, monkeypatch) is None


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
            run(machine.CONFIG_CHECKS, compose_gcpo([f"data.train_files={value}"]))
        assert error.value.key == "data.train_files"
    run(machine.CONFIG_CHECKS, compose_gcpo(["data.train_files=/nowhere/train.parquet"]))  # missing: the run's check
