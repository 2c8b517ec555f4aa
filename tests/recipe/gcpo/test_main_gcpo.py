"""The Hydra entry point: composition against verl 0.9.1's ppo_trainer, overrides, start-up failures."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from recipe.gcpo import main_gcpo
from recipe.gcpo.run_summary import DRY_RUN_MARKER
from tests.recipe.gcpo.conftest import compose_gcpo
from tests.scripts.launch import launcher_overrides

VALID = [
    "actor_rollout_ref.model.path=Qwen/Qwen3-0.6B",  # a hub id: the hub is on in these runs (_entry_point)
    "data.train_files=/data/train.parquet",
    "data.val_files=/data/val.parquet",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.name=vllm",  # verl's config leaves it ???
]


ROOT = Path(__file__).resolve().parents[3]


def _entry_point(*overrides, cwd, dry_run=True, **env):
    """``python -m recipe.gcpo.main_gcpo`` from ``cwd`` (this checkout first on the path, the hub on unless ``env``
    turns it off)."""
    # the hub on unless a test turns it off: with it off the start-up check refuses VALID's hub id
    dropped = ("RAY_ADDRESS", "HYDRA_FULL_ERROR", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    full_env = {key: value for key, value in os.environ.items() if key not in dropped}
    full_env.update(env, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    if dry_run:
        full_env["GCPO_DRY_RUN"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "recipe.gcpo.main_gcpo", *overrides],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
    )


def _assert_one_line_error(proc, line):
    """Exit 2 and the reason as the last line of standard error, once: no Hydra report, no traceback."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [text for text in proc.stderr.splitlines() if text.strip()]
    assert lines[-1] == line
    assert [text for text in lines if text.startswith("error: ")] == [line]
    assert "Traceback" not in proc.stderr and "Error executing job" not in proc.stderr


def test_composes_with_verls_ppo_trainer_and_sets_the_gcpo_defaults():
    config = compose_gcpo(VALID)
    assert config.algorithm.adv_estimator == "gcpo"
    assert config.trainer.v1.trainer_mode == "sync" and config.trainer.use_v1  # verl's V1 sync trainer
    assert config.reward.custom_reward_function.path == "pkg://recipe.gcpo.reward"
    assert "actor" in config.actor_rollout_ref and "rollout" in config.actor_rollout_ref  # verl's tree is there
    assert OmegaConf.select(config, "algorithm.gcpo.credit.permutations") == 64


def test_command_line_overrides_reach_the_gcpo_block():
    config = compose_gcpo(VALID + ["algorithm.gcpo.credit.method=mc", "algorithm.gcpo.encoder.text_span=reasoning"])
    assert config.algorithm.gcpo.credit.method == "mc" and config.algorithm.gcpo.encoder.text_span == "reasoning"


def test_dry_run_validates_and_prints_the_config_without_starting_anything(tmp_path):
    proc = _entry_point(*VALID, "algorithm.gcpo.credit.permutations=128", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "permutations: 128" in proc.stdout and "trainer_mode: sync" in proc.stdout
    assert "nothing was started" in proc.stdout
    # the launchers' own file names are written by prepare_data.py; a file of the user's own is theirs to fix
    assert (
        "# warning: /data/train.parquet does not exist here (scripts/prepare_data.py writes it (--out-dir: the "
        "launchers' DATA_DIR))"
    ) in proc.stdout
    assert (
        "# warning: /data/val.parquet does not exist here (point data.train_files / data.val_files at a file "
        "that exists on this machine)"
    ) in proc.stdout
    # what will run, before the config
    head = proc.stdout.split(DRY_RUN_MARKER)[0]
    assert "gcpo: estimator: algorithm.adv_estimator=gcpo: Shapley credit" in head
    assert "gcpo: reward: manager naive (register); function pkg://recipe.gcpo.reward:compute_score" in head
    assert "gcpo: scale: 1 node(s) x 8" in head
    assert "gcpo: protocol: none: verl's trainer settings and the config's own (protocol=dapo-recipe|shared|" in head
    assert list(tmp_path.iterdir()) == []  # no outputs/<date>/<time>/ from Hydra


@pytest.mark.parametrize(
    "override, line",
    [
        (
            "algorithm.gcpo.credit.methd=mc",
            "error: algorithm.gcpo.credit.methd: not a key verl 0.9.1 or the recipe reads: did you mean "
            "algorithm.gcpo.credit.method? (verl would ignore it; a free-form block takes any key: "
            "docs/training.md#keys-verl-does-not-check)",
        ),
        (  # added with a +, the recipe's block refuses it as it is parsed
            "+algorithm.gcpo.credit.methd=mc",
            "error: algorithm.gcpo.credit: unknown key(s) ['methd'] (did you mean 'method'?); known: [",
        ),
    ],
)
def test_a_misspelt_key_is_one_line_with_the_closest_key_and_writes_nothing(tmp_path, override, line):
    """A key the composition does not have, with or without a +: one line, the key and the closest one, exit 2 (it
    was Hydra's report, advising to add the typo with a +)."""
    proc = _entry_point(*VALID, override, cwd=tmp_path, dry_run=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert [text for text in proc.stderr.splitlines() if text.strip()][-1].startswith(line)
    assert "To append to your config" not in proc.stderr and list(tmp_path.iterdir()) == []


def test_hydra_full_error_puts_the_traceback_between_two_copies_of_the_reason(tmp_path):
    proc = _entry_point(*VALID, "algorithm.gcpo.credit.kernel=laplace", cwd=tmp_path, HYDRA_FULL_ERROR="1")
    assert proc.returncode == 2
    line = "error: algorithm.gcpo.credit.kernel: must be one of ['cosine', 'rbf'], got 'laplace'"
    lines = [text for text in proc.stderr.splitlines() if text.strip()]
    assert lines[-1] == line and lines.index(line) < lines.index("Traceback (most recent call last):")


def test_a_machine_without_gpus_stops_before_ray_with_one_line(tmp_path):
    proc = _entry_point(
        *VALID,
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        cwd=tmp_path,
        dry_run=False,
        CUDA_VISIBLE_DEVICES="",
        RAY_TMPDIR=str(tmp_path),
    )  # no Ray cluster `ray start`ed here
    _assert_one_line_error(
        proc,
        (
            "error: trainer.device: cuda, but no GPU found on this machine (0 visible) and no Ray cluster to join "
            "(RAY_ADDRESS): "
            "training needs GPUs. To check a config on a machine without GPUs, use the dry run (--dry-run / "
            "GCPO_DRY_RUN=1): it composes and validates the config and starts nothing."
        ),
    )
    assert "ray init kwargs" not in proc.stdout  # what verl prints as it starts Ray
    assert "No supported accelerator detected" not in proc.stderr  # verl's warning, before the one line


@pytest.mark.parametrize(
    "override, shown",
    [("trainer.nnodes=abc", "'abc'"), ("trainer.n_gpus_per_node=0", "0"), ("trainer.nnodes=1.5", "1.5")],
)
def test_the_cluster_shape_must_be_positive_integers(override, shown):
    from recipe.gcpo.checks import validate

    key = override.split("=")[0]
    with pytest.raises(ValueError, match=f"{key}: must be an integer >= 1, got {shown}"):
        validate(compose_gcpo(VALID + [override]))


def test_the_legacy_trainer_is_refused():
    from recipe.gcpo.checks import validate

    with pytest.raises(ValueError, match="trainer.use_v1: false selects verl's legacy trainer"):
        validate(compose_gcpo(VALID + ["algorithm.adv_estimator=grpo", "trainer.use_v1=false"]))


def test_the_register_module_refuses_what_needs_the_gcpo_trainer_under_a_stock_trainer():
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    import recipe.gcpo.register  # noqa: F401

    with pytest.raises(ValueError, match="needs the GCPO trainer.*trainer class PPOTrainerSync"):
        PPOTrainerSync(compose_gcpo(VALID))
    with pytest.raises(ValueError, match="group_contrastive.enable=true needs the GCPO trainer.*recipe.gcpo.main_gcpo"):
        PPOTrainerSync(
            compose_gcpo(VALID + ["algorithm.adv_estimator=grpo", "algorithm.group_contrastive.enable=true"])
        )
    # COPO's loss blend (its default) needs the recipe's trainer; its advantage blend needs only rewards
    with pytest.raises(ValueError, match="copo.blend=loss needs the GCPO trainer.*blend=advantage"):
        PPOTrainerSync(compose_gcpo(VALID + ["algorithm.adv_estimator=copo"]))
    advantage_blend = ["algorithm.adv_estimator=copo", "algorithm.copo.blend=advantage"]
    assert PPOTrainerSync(compose_gcpo(VALID + advantage_blend)).trainer_mode == "sync"
    assert PPOTrainerSync(compose_gcpo(VALID + ["algorithm.adv_estimator=mc_grpo"])).trainer_mode == "sync"
    assert core_algos.get_adv_estimator_fn("copo") is not None


def test_verls_stock_entry_point_gets_the_check_through_verl_use_external_modules(tmp_path):
    """What ``VERL_USE_EXTERNAL_MODULES=recipe.gcpo.register python -m verl.trainer.main_ppo`` does in verl's task
    runner: importing verl imports the register module, so verl's own trainer refuses GCPO when it is built."""
    script = (
        "import verl\n"
        "from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync\n"
        "from tests.recipe.gcpo.conftest import compose_gcpo\n"
        f"PPOTrainerSync(compose_gcpo({VALID!r}))\n"
    )
    env = dict(
        os.environ,
        VERL_USE_EXTERNAL_MODULES="recipe.gcpo.register",
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode != 0
    assert "ValueError: algorithm.adv_estimator=gcpo needs the GCPO trainer" in proc.stderr
    assert "python -m recipe.gcpo.main_gcpo" in proc.stderr


@pytest.fixture
def visible_gpus(monkeypatch, tmp_path):
    """Set how many GPUs this machine shows; no Ray cluster to join unless a test sets RAY_ADDRESS."""
    from types import SimpleNamespace

    import verl.utils.device as device

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # where Ray looks for a cluster `ray start`ed on this machine

    def set_count(count):  # what the machine's check reads, as it imports it
        monkeypatch.setattr(device, "is_device_available", lambda: count > 0)
        monkeypatch.setattr(device, "get_torch_device", lambda: SimpleNamespace(device_count=lambda: count))

    return set_count


def accelerator_problem(config):
    """The message (None: none) of the start-up check of this machine's GPUs."""
    from verl_preflight import ConfigError, machine

    try:
        machine.check_accelerators(config)
    except ConfigError as error:
        return str(error)
    return None


def test_the_machine_is_checked_before_ray_starts_unless_a_cluster_is_joined(visible_gpus, monkeypatch):
    config = compose_gcpo(VALID + ["trainer.n_gpus_per_node=8"])
    visible_gpus(8)
    assert accelerator_problem(config) is None
    two_nodes = accelerator_problem(compose_gcpo(VALID + ["trainer.n_gpus_per_node=8", "trainer.nnodes=2"]))
    assert two_nodes.startswith("trainer.nnodes: 2, but no Ray cluster to join")
    visible_gpus(4)
    assert accelerator_problem(config).startswith("trainer.n_gpus_per_node: 8, but this machine has 4 visible cuda")
    visible_gpus(0)
    assert accelerator_problem(config).startswith("trainer.device: cuda, but no GPU found on this machine")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # the cluster's GPUs are verl's to check
    assert accelerator_problem(config) is None


def test_a_misspelt_reward_kwarg_fails_the_dry_run_with_one_line(tmp_path):
    proc = _entry_point(
        *VALID, "reward.reward_manager.name=dapo", "+reward.reward_kwargs.max_response_len=8192", cwd=tmp_path
    )
    _assert_one_line_error(
        proc,
        (
            "error: reward.reward_kwargs: unknown key(s) ['max_response_len'] (did you mean 'max_resp_len'?); "
            "known: ['max_resp_len', 'overlong_buffer_cfg']"
        ),
    )


def test_the_training_data_loaders_workers_are_stopped_when_training_ends():
    """verl keeps trainer.train_dataloader_it (and its worker processes) after fit; left alive, Ray kills them at
    shutdown and torch prints a 'DataLoader worker ... killed' traceback after a run that succeeded."""
    from types import SimpleNamespace

    import psutil
    from torchdata.stateful_dataloader import StatefulDataLoader

    from recipe.gcpo.main_gcpo import stop_dataloader_workers

    loader = StatefulDataLoader(list(range(64)), batch_size=4, num_workers=2)
    trainer = SimpleNamespace(train_dataloader_it=iter(loader))
    next(trainer.train_dataloader_it)
    workers = [psutil.Process(w.pid) for w in trainer.train_dataloader_it._workers]
    assert all(w.is_running() for w in workers)
    stop_dataloader_workers(trainer)
    assert trainer.train_dataloader_it is None
    for worker in workers:
        try:
            assert worker.wait(timeout=10) is not None or not worker.is_running()
        except psutil.NoSuchProcess:
            pass
    stop_dataloader_workers(trainer)  # nothing left: a no-op
    stop_dataloader_workers(None)


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "trainer.total_training_steps=abc",
            "trainer.total_training_steps: must be an integer >= 1 or null, got 'abc'",
        ),
        ("data.train_batch_size=0", "data.train_batch_size: must be an integer >= 1, got 0"),
        ("data.train_batch_size=3.5", "data.train_batch_size: must be an integer >= 1, got 3.5"),
        (
            "actor_rollout_ref.actor.ppo_epochs=true",
            "actor_rollout_ref.actor.ppo_epochs: must be an integer >= 1, got True",
        ),
        ("actor_rollout_ref.actor.optim.lr=0", "actor_rollout_ref.actor.optim.lr: must be a number > 0, got 0"),
        ("actor_rollout_ref.actor.optim.lr=fast", "actor_rollout_ref.actor.optim.lr: must be a number > 0, got 'fast'"),
        ("data.max_response_length=-8", "data.max_response_length: must be an integer >= 1, got -8"),
    ],
)
def test_numeric_keys_are_checked_by_type_and_range(override, message):
    from recipe.gcpo.checks import validate

    with pytest.raises(ValueError, match=re.escape(message)):
        validate(compose_gcpo(VALID + [override]))
    validate(compose_gcpo(VALID + ["trainer.total_training_steps=null", "actor_rollout_ref.actor.optim.lr=3e-6"]))


def test_a_missing_data_file_stops_the_run_before_ray_with_one_line(tmp_path):
    """On a machine that can start the run (here: the CPU smoke's platform), a data file that is not there stops it
    before Ray starts; it used to end in a FileNotFoundError traceback from inside a Ray actor after a minute."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = tmp_path / "train.parquet"
    rows = {"prompt": [[{"role": "user", "content": "1+1?"}]] * 1024, "data_source": ["x"] * 1024}
    pq.write_table(pa.table({**rows, "reward_model": [{"ground_truth": "2"}] * 1024}), train)
    absent = tmp_path / "val_absent.parquet"
    overrides = [
        VALID[0],
        f"data.train_files={train}",
        f"data.val_files={absent}",
        *VALID[3:],
        "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",  # the recipe's 2 would not fit one device
        "trainer.device=cpu",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
    ]

    def start():  # a real start on the CPU smoke's platform, not a dry run
        return _entry_point(
            *overrides,
            cwd=tmp_path,
            dry_run=False,
            VERL_PLATFORM="cpu",
            VERL_USE_EXTERNAL_MODULES="tests.special_e2e.cpu_platform",
            RAY_TMPDIR=str(tmp_path),
        )

    proc = start()
    _assert_one_line_error(
        proc,
        f"error: data.val_files: {absent} does not exist: point "
        "data.train_files / data.val_files at a file that exists on this machine",
    )
    assert "ray init kwargs" not in proc.stdout
    # a file of the launchers' own is written by prepare_data.py, and the message says so
    launchers = tmp_path / "val_aime24.parquet"
    overrides[2] = f"data.val_files={launchers}"
    proc = start()
    _assert_one_line_error(
        proc,
        f"error: data.val_files: {launchers} does not exist: "
        "scripts/prepare_data.py writes it (--out-dir: the launchers' DATA_DIR)",
    )


@pytest.mark.parametrize(
    "extra, reason",
    [
        ([], "no GPU found on this machine"),
        (["data.train_batch_size=0"], "data.train_batch_size: must be an integer >= 1, got 0"),
    ],
)
def test_a_refused_run_writes_nothing(tmp_path, extra, reason):
    """Hydra's run directory (checkpoints/<project>/<experiment>/hydra/...) is made only for an accepted run."""
    proc = _entry_point(
        *VALID, *extra, cwd=tmp_path, dry_run=False, CUDA_VISIBLE_DEVICES="", RAY_TMPDIR=str(tmp_path / "ray")
    )
    assert proc.returncode == 2 and reason in proc.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name != "ray"] == []


def test_a_baselines_dry_run_names_its_estimator_not_gcpo(tmp_path):
    proc = _entry_point(*VALID, "algorithm.adv_estimator=grpo", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "# dry run (adv_estimator=grpo): the config composes and validates; nothing was started." in proc.stdout
    assert "GCPO" not in proc.stdout.split("# composed config", 1)[0] + proc.stdout.rsplit("\n", 3)[-2]


def test_a_ray_address_where_nothing_answers_stops_the_run_in_seconds(tmp_path):
    import socket
    import time

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.monotonic()
    proc = _entry_point(*VALID, cwd=tmp_path, dry_run=False, RAY_ADDRESS=f"127.0.0.1:{port}")
    assert time.monotonic() - start < 60  # ray.init would retry for minutes
    assert proc.returncode == 2  # the address in the line is Ray's (the node's IP): its port is pinned
    assert "error: ray_kwargs.ray_init.address: no Ray cluster answers at " in proc.stderr
    assert f":{port} (from RAY_ADDRESS or this key" in proc.stderr
    assert "unset RAY_ADDRESS" in proc.stderr and "Traceback" not in proc.stderr


def test_ctrl_c_during_start_up_is_one_line(monkeypatch, capsys):
    def interrupted(composition, request):
        raise KeyboardInterrupt

    monkeypatch.setattr(main_gcpo, "check", interrupted)
    with pytest.raises(SystemExit) as stop:
        main_gcpo.cli(VALID)
    assert stop.value.code == 130 and capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"


def _own_config(tmp_path, body="trainer:\n  project_name: mine\n"):
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "my_ppo.yaml").write_text(
        f"hydra:\n  searchpath:\n    - pkg://verl.trainer.config\ndefaults:\n  - ppo_trainer\n  - _self_\n{body}"
    )
    return folder


def test_a_users_own_config_gets_the_gcpo_keys_and_keeps_its_own_reward(tmp_path):
    """A config of the user's own (defaults: verl's ppo_trainer) lacks algorithm.gcpo: the start-up checks add the
    recipe's keys (a line says so), the user's reward stays."""
    folder = _own_config(tmp_path)
    proc = _entry_point(
        "--config-path",
        str(folder),
        "--config-name",
        "my_ppo",
        *VALID,
        "algorithm.adv_estimator=gcpo",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gcpo: your config (my_ppo) has no algorithm.gcpo, algorithm.diver, " in proc.stdout
    config = yaml.safe_load(proc.stdout.split(DRY_RUN_MARKER, 1)[1].rsplit("# dry run (", 1)[0])
    assert config["algorithm"]["gcpo"]["credit"]["method"] == "auto"
    assert config["algorithm"]["gcpo"]["credit"]["permutations"] == 64  # the whole block, with its defaults
    assert config["algorithm"]["diver"]["metric"] == "equation"  # the baselines' blocks come with it
    assert config["trainer"]["project_name"] == "mine"
    assert config["reward"]["custom_reward_function"]["path"] is None  # verl's data_source dispatch, as before
    assert "function verl's data_source dispatch" in proc.stdout
    assert "gcpo: protocol: none: verl's trainer settings and the config's own (+protocol=dapo-recipe|" in proc.stdout


def test_a_users_own_config_takes_a_protocol_with_a_plus_and_keeps_its_reward_function(tmp_path):
    """docs/training.md: a comparison protocol is not in a user's defaults list, so it is added (+protocol=...)
    from the recipe's config folder, which the entry point puts on the search path; the user's reward function
    stays theirs, and the protocol's trainer settings apply."""
    folder = _own_config(tmp_path)
    proc = _entry_point(
        "--config-path",
        str(folder),
        "--config-name",
        "my_ppo",
        *VALID,
        "algorithm.adv_estimator=gcpo",
        "+protocol=shared",
        "data.max_response_length=8192",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = yaml.safe_load(proc.stdout.split(DRY_RUN_MARKER, 1)[1].rsplit("# dry run (", 1)[0])
    assert config["actor_rollout_ref"]["actor"]["clip_ratio_high"] == 0.28
    assert config["reward"]["reward_manager"]["name"] == "dapo"
    assert config["reward"]["reward_kwargs"]["max_resp_len"] == 8192
    assert config["reward"]["custom_reward_function"]["path"] is None  # theirs: verl's data_source dispatch
    assert config["trainer"]["project_name"] == "mine"
    assert "gcpo: protocol: shared: the trainer settings of " in proc.stdout.split(DRY_RUN_MARKER)[0]


def test_a_users_config_with_its_own_gcpo_block_is_left_as_it_is(tmp_path):
    folder = _own_config(tmp_path, body="algorithm:\n  adv_estimator: gcpo\n  gcpo:\n    credit:\n      method: loo\n")
    proc = _entry_point("--config-path", str(folder), "--config-name", "my_ppo", *VALID, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "has no algorithm.gcpo" not in proc.stdout  # the baselines' blocks it lacks are added
    config = yaml.safe_load(proc.stdout.split(DRY_RUN_MARKER, 1)[1].rsplit("# dry run (", 1)[0])
    assert config["algorithm"]["gcpo"] == {"credit": {"method": "loo"}}  # its own block: the rest are defaults
    assert "method loo" in proc.stdout


def test_the_entry_point_stops_on_the_model_path_before_starting_anything_and_a_dry_run_warns(tmp_path):
    """The path the run will use (the last override: the launchers' MODEL_PATH or a command-line one after it) is
    checked where the config is composed: a run stops with one line, exit 2, before Ray; a dry run warns."""
    keys = launcher_overrides("run_qwen3_4b_gcpo.sh", f"trainer.default_local_dir={tmp_path}")
    proc = _entry_point(
        *keys, "actor_rollout_ref.model.path=Qwen/Qwen3-8B-Base", cwd=tmp_path, dry_run=False, HF_HUB_OFFLINE="1"
    )
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "error: actor_rollout_ref.model.path: Qwen/Qwen3-8B-Base is not a local folder, and the hub is off"
    )
    _assert_one_line_error(proc, line)
    proc = _entry_point(*keys, f"actor_rollout_ref.model.path={tmp_path}/absent", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        f"# warning (a run stops here): actor_rollout_ref.model.path: {tmp_path}/absent is not a folder" in proc.stderr
    )


# ---- the same one line from the recipe's config and from a user's own (verl's ppo_trainer plus a few keys) ------

OWN_CONFIG = "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\ndefaults:\n  - ppo_trainer\n  - _self_\n"


@pytest.fixture(scope="module")
def own_config_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own_config")
    (folder / "my_ppo.yaml").write_text(OWN_CONFIG + "trainer:\n  project_name: mine\n")
    return folder


@pytest.fixture(params=["recipe", "own"])
def entry(request, own_config_folder, monkeypatch, capsys, tmp_path):
    """``main_gcpo.cli`` in this process on the recipe's config or on a user's own (a GCPO run of it), as a dry run
    or a run (which must be refused: training is replaced by a failure); returns (exit status, stdout, stderr)."""
    config = [] if request.param == "recipe" else ["--config-path", str(own_config_folder), "--config-name", "my_ppo"]
    for var in ("RAY_ADDRESS", "HYDRA_FULL_ERROR", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "GCPO_DRY_RUN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")  # ppo_trainer's own logger list has wandb
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(main_gcpo, "train", lambda config: pytest.fail("a refused run reached training"))

    def run(*overrides, dry_run=True, plus_keys=True):
        monkeypatch.setenv("GCPO_DRY_RUN", "1" if dry_run else "0")
        # a user's config takes the recipe's keys with a + before its command line overrides them
        keys = ["+gcpo_keys=recipe"] if plus_keys and "algorithm.gcpo" in " ".join(overrides) else []
        estimator = [] if request.param == "recipe" else [*keys, "algorithm.adv_estimator=gcpo"]
        try:
            main_gcpo.cli([*config, *VALID, *estimator, f"trainer.default_local_dir={tmp_path}/ckpt", *overrides])
            code = 0
        except SystemExit as stop:
            code = stop.code
        out, err = capsys.readouterr()
        return code, out, err

    run.config = request.param
    return run


def _one_line(result, line):
    code, _, err = result
    assert code == 2, err[-3000:]
    lines = [text for text in err.splitlines() if text.strip()]
    assert lines[-1] == f"error: {line}" and [t for t in lines if t.startswith("error: ")] == [f"error: {line}"]
    assert "Traceback" not in err and "Could not override" not in err


KEY_HINT = "(verl would ignore it; a free-form block takes any key: docs/training.md#keys-verl-does-not-check)"


@pytest.mark.parametrize(
    "overrides, line",
    [
        (
            ["algorithm.gcpo.credit.methd=mc"],
            "algorithm.gcpo.credit.methd: not a key verl 0.9.1 or the recipe reads: did you mean "
            f"algorithm.gcpo.credit.method? {KEY_HINT}",
        ),
        (
            ["trainer.total_training_step=3"],
            "trainer.total_training_step: not a key verl 0.9.1 or the recipe reads: did you mean "
            f"trainer.total_training_steps? {KEY_HINT}",
        ),
        (
            ["algorithm.gcpoo.credit.method=mc"],
            f"algorithm.gcpoo: not a key verl 0.9.1 or the recipe reads: did you mean algorithm.gcpo? {KEY_HINT}",
        ),
        (
            ["algorithm.gcpo.credit={methd:mc}"],
            "algorithm.gcpo.credit.methd: not a key verl 0.9.1 or the recipe reads: did you mean "
            f"algorithm.gcpo.credit.method? {KEY_HINT}",
        ),
        # Hydra's grammar cannot lex an unquoted ~ (and no worker would expand it): the override, named
        (
            ["actor_rollout_ref.model.path=~/models/qwen"],
            "actor_rollout_ref.model.path=~/models/qwen: Hydra cannot read this override (LexerNoViableAltException: "
            "actor_rollout_ref.model.path=~/models/qwen): quote a value with spaces or special characters "
            "(key='\"~/x\"'), and give paths absolute",
        ),
        (
            ["--cfg", "bogus"],
            "argument --cfg/-c: invalid choice: 'bogus' (choose from 'job', 'hydra', 'all') (this command takes "
            "key=value overrides and --config-path/-cp, --config-name/-cn, --cfg job|hydra|all [--resolve] "
            "[--package KEY], --help)",
        ),
        (
            ["--no-such-flag"],
            "unrecognized arguments: --no-such-flag (this command takes key=value overrides and --config-path/-cp, "
            "--config-name/-cn, --cfg job|hydra|all [--resolve] [--package KEY], --help)",
        ),
        (["--cfg", "job", "--package", "no.such"], "package 'no.such' not found in config"),
        (
            ["protocol=shard"],
            {  # the recipe's config chooses a protocol (none); a user's does not
                "recipe": "protocol=shard: no option 'shard' in config group protocol: did you mean shared? (options: "
                "dapo-recipe, shared, verl-grpo)",
                "own": "protocol: a config group your config does not choose: add one with a + (+protocol=<option>; "
                "options: dapo-recipe, shared, verl-grpo)",
            },
        ),
        (["reward=null"], "reward: a config group of verl's, not a value: set its keys (reward.<key>=...)"),
        (["=5"], "'=5': an override is key=value (+key=value adds a key, ~key removes one)"),
        (["--resolve"], "--resolve goes with --cfg job|hydra|all"),
        (
            ["--info"],
            "--info is Hydra's own and not taken here: this command composes with Hydra's compose API "
            "(--config-path/-cp, --config-name/-cn, --cfg job|hydra|all [--resolve] [--package KEY], --help)",
        ),
        (["~trainer"], "trainer: must be verl's block of trainer.* keys: it is missing (removed with ~trainer?)"),
        (
            ["~data"],
            "~data: removes verl's data, which a later override sets a key of (and verl reads): drop it",
        ),
    ],
)
def test_what_hydra_meets_first_is_one_line_naming_the_key_or_flag(entry, overrides, line):
    """Hydra's parser and composition meet these before the start-up checks: one line naming the key, override or
    flag, exit 2, no traceback and no multi-line report (HYDRA_FULL_ERROR unset), nothing written."""
    code, out, err = entry(*overrides, dry_run=False)
    _one_line((code, out, err), line[entry.config] if isinstance(line, dict) else line)
    assert "gcpo: " not in out


def test_a_users_own_config_takes_the_recipes_keys_with_or_without_a_plus(entry):
    """The recipe's blocks a user's config lacks are added (said in a line); the command line overrides them as it
    does the recipe's own config, with or without +gcpo_keys=recipe."""
    code, out, err = entry()
    assert code == 0, err[-2000:]
    added = "gcpo: your config (my_ppo) has no algorithm.gcpo, algorithm.diver, algorithm.div_r1, algorithm.copo, "
    assert (added in out) == (entry.config == "own") and "(method auto:" in out
    for plus_keys in (True, False):
        code, out, err = entry("algorithm.gcpo.credit.method=mc", plus_keys=plus_keys)
        assert code == 0 and "method mc;" in out, err[-2000:]


@pytest.fixture
def accepted_run(monkeypatch, tmp_path):
    """``main_gcpo.cli`` as a run this machine accepts (its checks of the machine pass) with ``training`` in place of
    verl's run; returns the run directory Hydra is given."""
    monkeypatch.delenv("GCPO_DRY_RUN", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)
    from verl_preflight import machine

    for check in ("check_model_path", "check_accelerators", "check_data_files_exist"):  # none of them is here
        monkeypatch.setattr(machine, check, lambda *args: None)
    run_dir = tmp_path / "run"

    def run(training, *overrides):
        monkeypatch.setattr(main_gcpo, "train", training)
        main_gcpo.cli([*VALID, f"hydra.run.dir={run_dir}", *overrides])

    run.dir = run_dir
    return run


def test_a_run_trains_on_the_checked_config_with_hydras_record_in_its_run_directory(accepted_run):
    """Hydra's record (hydra.run.dir/.hydra/: the config and the overrides), made once the checks passed; the run
    trains on the config the checks read and adapted (verl's legacy reward keys migrated), without Hydra's node,
    with the protocol's values."""
    Path("r.py").write_text(REWARD_FILE)
    seen = []

    def training(config):
        assert accepted_run.dir.is_dir()  # the task runs in it
        seen.append(config)

    accepted_run(
        training,
        "custom_reward_function.path=r.py",
        "custom_reward_function.name=legacy_score",
        "protocol=dapo-recipe",
        "data.max_response_length=8192",  # the protocol's overlong buffer is 4,096 tokens
    )
    (config,) = seen
    assert config.algorithm.adv_estimator == "gcpo" and "hydra" not in config
    assert config.reward.custom_reward_function.name == "legacy_score"  # migrated by the checks, not by the task
    assert config.algorithm.filter_groups.max_inflight_gen_batches == 3  # the protocol's own value
    assert (accepted_run.dir / ".hydra" / "config.yaml").is_file()
    assert "custom_reward_function.name=legacy_score" in (accepted_run.dir / ".hydra" / "overrides.yaml").read_text()


def test_a_failure_in_training_is_its_own_error_not_a_config_refusal(accepted_run, capsys):
    def broken(config):
        raise RuntimeError("a worker died")

    with pytest.raises(RuntimeError, match="a worker died"):  # Python's exit 1 and traceback, not the config's 2
        accepted_run(broken)
    assert "error: " not in capsys.readouterr().err


REWARD_FILE = "def my_score(data_source, solution_str, ground_truth, extra_info):\n    return 0.0\n\n\n" + (
    "def legacy_score(data_source, solution_str, ground_truth, extra_info):\n    return 1.0\n"
)


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_estimator_nobody_registers_is_one_line_with_the_closest_name(entry, dry_run):
    """verl looks the name up only at the first advantage step, after the models are loaded."""
    code, _, err = entry("algorithm.adv_estimator=gcp", dry_run=dry_run)
    line = err.strip().splitlines()[-1]
    assert line.startswith(
        "error: algorithm.adv_estimator: gcp is not an estimator verl or the recipe registers: did you mean gcpo? "
        "(known: copo, diver, dqo, dra_grpo, gae, gcpo, "
    ), line
    _one_line((code, "", err), line[len("error: ") :])


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize(
    "classic, clash",
    [
        (
            ["custom_reward_function.path=r.py", "custom_reward_function.name=legacy_score"],
            ("r.py:legacy_score", "name"),
        ),
        (["custom_reward_function.name=legacy_score"], ("None:legacy_score", "name")),  # verl: None:legacy_score
        (["custom_reward_function.path=other.py"], ("other.py:None", "path")),
    ],
)
def test_a_classic_reward_block_that_differs_from_reward_is_refused_naming_both(entry, classic, clash, dry_run):
    Path("r.py").write_text(REWARD_FILE)
    function, differs = clash
    mine = ["reward.custom_reward_function.path=r.py", "reward.custom_reward_function.name=my_score"]
    _one_line(
        entry(*mine, *classic, dry_run=dry_run),
        f"custom_reward_function.{differs.split()[0]}: verl's legacy block ({function}), which the V1 trainer does not "
        f"read, and reward.custom_reward_function (r.py:my_score) name different reward functions ({differs}): keep "
        "one, reward.custom_reward_function",
    )


def test_a_classic_reward_block_alone_or_repeating_reward_is_migrated(entry):
    Path("r.py").write_text(REWARD_FILE)
    code, out, err = entry("custom_reward_function.path=r.py", "custom_reward_function.name=legacy_score")
    assert code == 0, err[-2000:]
    assert "gcpo: reward: manager naive (register); function r.py:legacy_score;" in out  # alone: migrated
    mine = ["reward.custom_reward_function.path=r.py", "reward.custom_reward_function.name=my_score"]
    code, out, err = entry(*mine, "custom_reward_function.name=my_score")  # the same function: no clash
    assert code == 0, err[-2000:]
    assert "gcpo: reward: manager naive (register); function r.py:my_score;" in out  # not None:my_score


def test_a_relative_model_path_of_any_form_is_refused_in_a_run_and_a_warning_in_a_dry_run(entry, tmp_path):
    """models/qwen exists where the driver runs, but every worker resolves it in another folder."""
    (tmp_path / "models" / "qwen").mkdir(parents=True)
    problem = (
        "actor_rollout_ref.model.path: models/qwen is not an absolute path: the workers start in other folders and "
        f"do not expand ~; give it (the launchers' MODEL_PATH) as {tmp_path}/models/qwen"
    )
    _one_line(entry("actor_rollout_ref.model.path=models/qwen", dry_run=False), problem)
    code, _, err = entry("actor_rollout_ref.model.path=models/qwen")
    assert code == 0 and f"# warning (a run stops here): {problem}" in err


@pytest.mark.parametrize("dry_run", [True, False])
def test_under_diver_a_bad_credit_value_is_refused_at_start_up(entry, dry_run):
    """diver normalises with algorithm.gcpo.credit, which the trainer parsed only after Ray was up."""
    _one_line(
        entry("algorithm.adv_estimator=diver", "algorithm.gcpo.credit.epsilon=0", dry_run=dry_run),
        "algorithm.gcpo.credit.epsilon: must be a finite number > 0.0, got 0",
    )


# ---- Hydra's own commands: the composition a run gets, or a refusal in one line ------------------------------


def test_cfg_job_shows_a_users_own_config_with_the_recipes_keys_taken_with_a_plus(tmp_path):
    """``--cfg job`` prints Hydra's composition (the start-up checks do not run): a user's config takes the recipe's
    keys from the recipe's config folder, which the entry point puts on its search path."""
    folder = _own_config(tmp_path)
    command = ["--config-path", str(folder), "--config-name", "my_ppo", "--cfg", "job", "+gcpo_keys=recipe"]
    proc = _entry_point(*command, "algorithm.adv_estimator=gcpo", "algorithm.gcpo.credit.method=mc", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = yaml.safe_load(proc.stdout)  # the config alone
    assert config["algorithm"]["gcpo"]["credit"]["method"] == "mc" and config["trainer"]["project_name"] == "mine"
    assert list(tmp_path.iterdir()) == [folder]  # nothing written


def test_from_a_folder_outside_the_checkout_a_users_config_takes_the_recipes_keys_and_groups(tmp_path):
    """With the README's install (no PYTHONPATH: the editable install's finder) and a working directory outside the
    checkout, a user's config takes algorithm.gcpo.* and +protocol=... on the command line (issue 69: the search
    path plugin was not found there, and the documented +gcpo_keys=recipe failed)."""
    folder = _own_config(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "HF_HUB_OFFLINE")}
    command = [sys.executable, "-m", "recipe.gcpo.main_gcpo", "--config-path", str(folder), "--config-name", "my_ppo"]
    overrides = ["algorithm.adv_estimator=gcpo", "algorithm.gcpo.credit.method=mc", "+protocol=shared"]
    proc = subprocess.run(
        [*command, *VALID, *overrides, "data.max_response_length=8192"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "GCPO_DRY_RUN": "1", "WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "method mc;" in proc.stdout and "gcpo: protocol: shared: " in proc.stdout
    assert "has no algorithm.gcpo, " in proc.stdout and list(tmp_path.iterdir()) == [folder]


@pytest.mark.parametrize("flag", ["-m", "--multirun"])
def test_a_multirun_is_refused_in_one_line(entry, flag):
    """Each job of a sweep would be a training run of its own, in this one process, outside the one composition."""
    _one_line(
        entry("algorithm.gcpo.credit.method=mc,loo", flag, dry_run=False),
        "--multirun (-m) is not supported: the entry point composes, checks and starts one training run per "
        "call; start one call per setting (python -m recipe.gcpo.main_gcpo key=value ..., or a launcher with its "
        "overrides)",
    )


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize(
    "overrides, line",
    [
        (
            ["trainer.project_name=${oops}"],  # the dry run's print of the config ended in a 163-line traceback
            "trainer.project_name: ${oops} does not resolve: Interpolation key 'oops' not found",
        ),
        (
            ["trainer.experiment_name=${oc.env:GCPO_TEST_NO_SUCH_VAR}"],
            "trainer.experiment_name: ${oc.env:GCPO_TEST_NO_SUCH_VAR} does not resolve: KeyError raised while "
            "resolving interpolation: \"Environment variable 'GCPO_TEST_NO_SUCH_VAR' not found\"",
        ),
        (
            ["+algorithm.adq_estimator=gcpo"],
            "algorithm.adq_estimator: not a key verl 0.9.1 or the recipe reads: did you mean "
            "algorithm.adv_estimator? (verl would ignore it; a free-form block takes any key: "
            "docs/training.md#keys-verl-does-not-check)",
        ),
        (
            ["actor_rollout_ref.rollout.temperature=nan"],
            "actor_rollout_ref.rollout.temperature: must be a number >= 0, got nan",
        ),
        (
            ["algorithm.norm_adv_by_std_in_grpo='false'"],  # bool('false') is True: normalisation was on
            "algorithm.norm_adv_by_std_in_grpo: must be true or false, got 'false'",
        ),
        (["data.train_files=123"], "data.train_files: must be a data file or a list of them, got 123"),
        (["actor_rollout_ref.rollout.n=abc"], "actor_rollout_ref.rollout.n: must be an integer >= 1, got 'abc'"),
        (
            ["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=3"],
            "actor_rollout_ref.actor.ppo_mini_batch_size: 3 must divide data.train_batch_size=4: each step is split "
            "into mini-batches of 3 prompts",
        ),
        (
            ["algorithm.adv_estimator=grpo", "algorithm.gcpo.credit.method=bogus"],
            "algorithm.gcpo.credit.method: must be one of ['auto', 'exact', 'mc', 'loo'], got 'bogus'",
        ),
    ],
)
def test_the_fuzzs_named_mistakes_are_one_line_from_either_config(entry, overrides, line, dry_run):
    """Issue 53's examples, each through the real entry point in both kinds of config, a dry run and a run."""
    _one_line(entry(*overrides, dry_run=dry_run), line)


@pytest.mark.parametrize(
    "yaml_block, line",
    [
        (
            "actor_rollout_ref:\n  rollout:\n    temprature: 0.7\n",
            "actor_rollout_ref.rollout.temprature: not a key verl 0.9.1 or the recipe reads: did you mean "
            "actor_rollout_ref.rollout.temperature?",
        ),
        ("algoritm:\n  gamma: 1.0\n", "algoritm: not a key verl 0.9.1 or the recipe reads: did you mean algorithm?"),
        (
            # the start-up line used to say "function verl's data_source dispatch": the user's reward dropped
            "reward:\n  custom_reward_function:\n    pth: r.py\n",
            "reward.custom_reward_function.pth: not a key verl 0.9.1 or the recipe reads: did you mean "
            "reward.custom_reward_function.path?",
        ),
        (
            "trainer:\n  project_name: ${oc.env:GCPO_TEST_NO_SUCH_VAR}\n",
            "trainer.project_name: ${oc.env:GCPO_TEST_NO_SUCH_VAR} does not resolve",
        ),
    ],
)
def test_a_mistake_in_a_users_own_yaml_is_one_line(tmp_path, monkeypatch, capsys, yaml_block, line):
    (tmp_path / "mine.yaml").write_text(OWN_CONFIG + yaml_block)
    monkeypatch.setenv("GCPO_DRY_RUN", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main_gcpo.cli(["--config-path", str(tmp_path), "--config-name", "mine", *VALID, "algorithm.adv_estimator=gcpo"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert [text for text in err.splitlines() if text.strip()][-1].startswith(f"error: {line}"), err


def test_a_reward_file_that_exits_at_import_is_refused_not_a_silent_exit_0(entry, tmp_path):
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\n\nsys.exit(0)\n")
    _one_line(
        entry(f"reward.custom_reward_function.path={exits}"),
        f"reward.custom_reward_function.path: {exits} exits as it is imported (sys.exit(0)): verl's reward "
        "workers import it",
    )
