"""The launchers: their configs composed and validated against verl 0.9.1's (the main job's through a real dry run
of the entry point), and their shell logic with a stub python3."""

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from recipe.gcpo.checks import validate
from recipe.gcpo.run_summary import DRY_RUN_MARKER
from tests.recipe.gcpo.conftest import compose_gcpo
from tests.scripts.launch import launcher_overrides

ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS = {  # script: (estimator, model, DAPO filter on, what else it must set)
    "run_qwen3_4b_gcpo.sh": ("gcpo", "Qwen/Qwen3-4B-Base", False, {}),
    "run_qwen3_1.7b_gcpo.sh": ("gcpo", "Qwen/Qwen3-1.7B-Base", False, {}),
    "run_qwen3_4b_grpo.sh": ("grpo", "Qwen/Qwen3-4B-Base", False, {}),
    "run_qwen3_4b_dapo.sh": ("grpo", "Qwen/Qwen3-4B-Base", True, {"algorithm.filter_groups.metric": "acc"}),
    "run_qwen3_4b_copo.sh": ("copo", "Qwen/Qwen3-4B-Base", False, {}),
    "run_qwen3_4b_mc_grpo.sh": ("mc_grpo", "Qwen/Qwen3-4B-Base", False, {"actor_rollout_ref.rollout.n": 9}),
    "run_qwen3_4b_dqo.sh": ("dqo", "Qwen/Qwen3-4B-Base", False, {"algorithm.gcpo.credit.mix_coef": 2.0}),
    "run_qwen3_4b_dra_grpo.sh": ("dra_grpo", "Qwen/Qwen3-4B-Base", False, {}),
    "run_qwen3_4b_group_contrastive.sh": (
        "grpo",
        "Qwen/Qwen3-4B-Base",
        False,
        {"algorithm.group_contrastive.enable": True, "data.train_files": "/data/gcpo/train_math.parquet"},
    ),
    "run_qwen3_4b_gcpo_loo.sh": ("gcpo", "Qwen/Qwen3-4B-Base", False, {"algorithm.gcpo.credit.method": "loo"}),
    "run_qwen3_4b_gcpo_no_quality.sh": (
        "gcpo",
        "Qwen/Qwen3-4B-Base",
        False,
        {"algorithm.gcpo.credit.quality": "none", "algorithm.gcpo.credit.advantage": "mix"},
    ),
    "run_qwen3_4b_gcpo_bonus.sh": ("gcpo", "Qwen/Qwen3-4B-Base", False, {"algorithm.gcpo.credit.advantage": "mix"}),
}


def _run(script, *args, env=None, path_prefix=None, cwd=None):
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("WANDB_API_KEY", None)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    if path_prefix:
        full_env["PATH"] = f"{path_prefix}:{full_env['PATH']}"
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / script), *args], capture_output=True, text=True, env=full_env, cwd=cwd
    )


def _composed(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return yaml.safe_load(proc.stdout.split(DRY_RUN_MARKER, 1)[1].rsplit("# dry run (", 1)[0])


@pytest.mark.parametrize("script", sorted(LAUNCHERS))
def test_every_launcher_composes_against_verl_with_its_estimator(script, tmp_path):
    estimator, model, filtered, specific = LAUNCHERS[script]
    if script == "run_qwen3_4b_gcpo.sh":  # the main job: a real dry run of the entry point, in its own process
        config = _composed(_run(script, "--dry-run", env={"DATA_DIR": "/data/gcpo"}, cwd=tmp_path))
        assert list(tmp_path.iterdir()) == []  # Hydra's run dir was a temporary one: no ./outputs/<date>/<time>/
    else:  # the launcher's own overrides, composed and validated here as the entry point does (13 s less each)
        composed = compose_gcpo(launcher_overrides(script, env={"DATA_DIR": "/data/gcpo"}))
        validate(composed)
        config = OmegaConf.to_container(composed, resolve=True)
    for key, value in specific.items():
        node = config
        for part in key.split("."):
            node = node[part]
        assert node == value, key
    assert config["algorithm"]["adv_estimator"] == estimator
    assert config["algorithm"]["filter_groups"]["enable"] is filtered
    assert config["actor_rollout_ref"]["model"]["path"] == model
    assert config["trainer"]["v1"]["trainer_mode"] == "sync" and config["trainer"]["use_v1"]
    if script != "run_qwen3_4b_group_contrastive.sh":
        assert config["data"]["train_files"] == "/data/gcpo/train.parquet"
    assert config["actor_rollout_ref"]["actor"]["clip_ratio_high"] == 0.28
    assert config["actor_rollout_ref"]["actor"]["optim"]["clip_grad"] == 1.0  # what verl 0.9.1 clips with
    assert config["reward"]["reward_manager"]["name"] == "dapo"


def test_baselines_share_every_setting_but_the_estimator():
    configs = {
        s: _composed(_run(s, "--dry-run", env={"EXPERIMENT_NAME": "same"}))
        for s in ("run_qwen3_4b_gcpo.sh", "run_qwen3_4b_grpo.sh")
    }
    for config in configs.values():
        config["algorithm"].pop("adv_estimator")
    assert configs["run_qwen3_4b_gcpo.sh"] == configs["run_qwen3_4b_grpo.sh"]


def test_a_command_line_override_wins_over_the_launchers_settings():
    config = _composed(
        _run(
            "run_qwen3_4b_gcpo.sh",
            "--dry-run",
            "actor_rollout_ref.rollout.n=8",
            "algorithm.gcpo.credit.method=mc",
            env={"N_RESP": "4"},
        )
    )
    assert config["actor_rollout_ref"]["rollout"]["n"] == 8
    assert config["algorithm"]["gcpo"]["credit"]["method"] == "mc"


def test_environment_variables_set_the_shared_settings():
    config = _composed(
        _run(
            "run_qwen3_4b_gcpo.sh",
            "--dry-run",
            env={
                "N_RESP": "8",
                "NNODES": "4",
                "GPUS_PER_NODE": "4",
                "VAL_SETS": "aime24 gsm8k",
                "DATA_DIR": "/d",
                "MAX_RESPONSE_LENGTH": "4096",
                "CKPT_DIR": "/ckpt",
                "EXPERIMENT_NAME": "exp1",
            },
        )
    )
    assert config["actor_rollout_ref"]["rollout"]["n"] == 8
    assert (config["trainer"]["nnodes"], config["trainer"]["n_gpus_per_node"]) == (4, 4)
    assert config["data"]["val_files"] == ["/d/val_aime24.parquet", "/d/val_gsm8k.parquet"]
    assert config["reward"]["reward_kwargs"]["max_resp_len"] == 4096
    assert config["trainer"]["default_local_dir"] == "/ckpt/gcpo-verl/exp1"


def test_a_bad_override_fails_with_one_short_line(tmp_path):
    """Standard error holds the reason and nothing else of ours: no Hydra report of the ~60 overrides, no
    traceback; nothing is left in the working directory."""
    proc = _run("run_qwen3_4b_gcpo.sh", "--dry-run", "algorithm.gcpo.credit.method=banana", cwd=tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert (
        lines[-1] == "error: algorithm.gcpo.credit.method: must be one of ['auto', 'exact', 'mc', 'loo'], got 'banana'"
    )
    assert not any(line.startswith(("+ python3", "Error executing job", "Traceback")) for line in lines)
    # verl's import-time warnings, and the launcher's warning that the hub is off (the tests run offline)
    assert sum(len(line) for line in lines if not line.startswith(("WARNING:", "# warning"))) < 200
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def stub_python(tmp_path):
    """A python3 that prints its environment and arguments instead of training."""
    stub = tmp_path / "python3"
    stub.write_text(
        '#!/usr/bin/env bash\necho "RAY_ADDRESS=${RAY_ADDRESS:-}"\necho "GCPO_DRY_RUN=${GCPO_DRY_RUN:-}"\n'
        'printf "%s\\n" "$@"\n'
    )
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def test_an_existing_ray_cluster_is_joined_through_ray_address(stub_python):
    proc = _run(
        "run_qwen3_4b_gcpo.sh", env={"RAY_ADDRESS": "10.0.0.1:6379", "RAY_NUM_CPUS": "32"}, path_prefix=stub_python
    )
    assert "RAY_ADDRESS=10.0.0.1:6379" in proc.stdout
    assert "ray_kwargs.ray_init.num_cpus=32" not in proc.stdout  # the cluster has its own counts
    proc = _run("run_qwen3_4b_gcpo.sh", env={"RAY_NUM_CPUS": "32"}, path_prefix=stub_python)
    assert "ray_kwargs.ray_init.num_cpus=32" in proc.stdout and "GCPO_DRY_RUN=\n" in proc.stdout


def test_dry_run_by_environment_and_overrides_come_last(stub_python):
    proc = _run("run_qwen3_4b_gcpo.sh", "trainer.save_freq=3", env={"DRY_RUN": "1"}, path_prefix=stub_python)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("+ python3 -m recipe.gcpo.main_gcpo ")  # the launcher's echo, on standard output
    assert "GCPO_DRY_RUN=1" in lines and lines[-1] == "trainer.save_freq=3"
    assert lines[3:5] == ["-m", "recipe.gcpo.main_gcpo"]
    assert proc.stderr == ""


def test_wandb_is_used_when_a_key_is_set(stub_python):
    proc = _run("run_qwen3_4b_gcpo.sh", env={"WANDB_API_KEY": "x"}, path_prefix=stub_python)
    assert 'trainer.logger=["console"]' in proc.stdout  # _run drops the key: console only
    env = dict(
        os.environ,
        WANDB_API_KEY="x",
        PATH=f"{stub_python}:{os.environ['PATH']}",
        HF_HUB_OFFLINE="0",
        TRANSFORMERS_OFFLINE="0",
    )
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/run_qwen3_4b_gcpo.sh")], capture_output=True, text=True, env=env
    ).stdout
    assert 'trainer.logger=["console","wandb"]' in out


@pytest.mark.parametrize(
    "variable, value, message",
    [
        ("N_RESP", "abc", "error: N_RESP must be a positive integer, got 'abc'"),
        ("MAX_RESPONSE_LENGTH", "8k", "error: MAX_RESPONSE_LENGTH must be a positive integer, got '8k'"),
        ("TRAIN_BATCH_SIZE", "0", "error: TRAIN_BATCH_SIZE must be a positive integer, got '0'"),
        ("OVERLONG_BUFFER", "-1", "error: OVERLONG_BUFFER must be an integer >= 0, got '-1'"),
        ("LR", "fast", "error: LR must be a number > 0, got 'fast'"),
        ("GPU_MEM_UTIL", "0", "error: GPU_MEM_UTIL must be a number > 0, got '0'"),
        ("RAY_NUM_CPUS", "lots", "error: RAY_NUM_CPUS must be a positive integer, got 'lots'"),
    ],
)
def test_a_setting_that_is_not_a_number_is_named_in_one_line(variable, value, message):
    """Before: N_RESP=abc ended in a bare TypeError from Hydra, MAX_RESPONSE_LENGTH=8k in a bash arithmetic error."""
    proc = _run("run_qwen3_4b_gcpo.sh", "--dry-run", env={variable: value})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [message]


def test_numbers_as_people_write_them_pass():
    config = _composed(
        _run("run_qwen3_4b_gcpo.sh", "--dry-run", env={"LR": "3.0e-7", "GPU_MEM_UTIL": ".55", "OVERLONG_BUFFER": "16"})
    )
    assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3.0e-7
    assert config["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"] == 0.55
