"""scripts/smoke_1gpu.sh and scripts/smoke_cpu.sh, the environments of the smoke (``python -m
tests.special_e2e.smoke run``): a real dry run through the GPU wrapper against verl 0.9.1 (tiny policy, data,
composed config), the CPU wrapper's machine-wide lock, and their help. What the smoke runs, in which order, is
tests/special_e2e/smoke/test_run.py's."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from recipe.gcpo.run_summary import DRY_RUN_MARKER
from tests.recipe.gcpo.conftest import compose_gcpo
from tests.special_e2e.smoke.run import RunDir

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "smoke_1gpu.sh"


def _run(*args, env=None):
    full_env = dict(os.environ, **(env or {}))
    for key in (
        "SMOKE_ATTN",
        "SMOKE_N_RESP",
        "SMOKE_GPU_MEM_UTIL",
        "SMOKE_MAX_RESPONSE_LENGTH",
        "PYTHON",
        "SMOKE_RUN_TIMEOUT",
        "VERL_PLATFORM",
        "VERL_USE_EXTERNAL_MODULES",
        "OMP_NUM_THREADS",
    ):
        full_env.pop(key, None)
    full_env.update(env or {})
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full_env, cwd=ROOT)


def _configs(stdout):
    """The composed configs a dry run printed, in order."""
    parts = stdout.split(DRY_RUN_MARKER)[1:]
    return [yaml.safe_load(part.split("# dry run (", 1)[0]) for part in parts]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    smoke_dir = tmp_path_factory.mktemp("smoke")
    proc = _run(
        "--dry-run",
        "actor_rollout_ref.rollout.temperature=0.9",
        env={"SMOKE_DIR": str(smoke_dir), "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return smoke_dir, proc, _configs(proc.stdout)


def test_dry_run_composes_the_run_against_verl(dry_run):
    smoke_dir, proc, configs = dry_run
    assert len(configs) == 1
    first = configs[0]
    run = RunDir(smoke_dir / "gcpo")
    rollout = first["actor_rollout_ref"]["rollout"]
    assert first["trainer"]["n_gpus_per_node"] == 1 and first["trainer"]["nnodes"] == 1
    assert rollout["name"] == "vllm" and rollout["enforce_eager"] is True and rollout["load_format"] == "dummy"
    assert rollout["tensor_model_parallel_size"] == 1 and rollout["gpu_memory_utilization"] <= 0.2
    assert first["algorithm"]["adv_estimator"] == "gcpo"
    assert first["trainer"]["default_local_dir"] == str(run.checkpoints)
    assert first["algorithm"]["gcpo"]["dump"]["directory"] == str(run.dumps)
    assert first["algorithm"]["gcpo"]["dump"]["every_n_steps"] == 1
    assert "file" in first["trainer"]["logger"] and first["trainer"]["resume_mode"] == "auto"
    assert first["trainer"]["total_training_steps"] == first["trainer"]["save_freq"] == 2
    assert rollout["temperature"] == 0.9  # the command line's overrides win
    assert first["reward"]["custom_reward_function"]["path"] == "pkg://tests.special_e2e.smoke.reward"
    assert "trainer.total_training_steps=3" in proc.stdout  # the resumed run, described
    # what other work changes is left to the recipe's YAML: the trainer mode, the credit actor's settings
    defaults = compose_gcpo()
    assert first["trainer"]["v1"]["trainer_mode"] == defaults.trainer.v1.trainer_mode
    assert first["algorithm"]["gcpo"]["actor"] == dict(defaults.algorithm.gcpo.actor)
    model = first["actor_rollout_ref"]["model"]
    if importlib.util.find_spec("flash_attn") is None:  # CI: padded batches through SDPA
        assert model["use_remove_padding"] is False and model["override_config"]["attn_implementation"] == "sdpa"
        assert "FSDP actor attention: sdpa" in proc.stderr
    else:  # verl's default: packed sequences through flash-attn
        assert model["use_remove_padding"] is True and "attn_implementation" not in model["override_config"]


def test_dry_run_builds_a_policy_transformers_loads_and_data_of_one_batch(dry_run):
    from transformers import AutoModelForCausalLM

    _, _, (config,) = dry_run
    model = AutoModelForCausalLM.from_pretrained(config["actor_rollout_ref"]["model"]["path"])
    assert model.config.model_type == "qwen3"
    frame = pd.read_parquet(config["data"]["train_files"])
    assert (
        len(frame) == config["data"]["train_batch_size"] == config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"]
    )
    assert Path(config["data"]["val_files"]).is_file()


def test_the_composed_reward_gives_about_half_correct_and_every_kind_of_group(dry_run):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    _, _, (config,) = dry_run
    reward_fn = get_custom_reward_fn(OmegaConf.create(config))  # how verl's reward loop loads it
    frame = pd.read_parquet(config["data"]["train_files"])
    n = config["actor_rollout_ref"]["rollout"]["n"]
    kinds, correct = [], 0
    for row in frame.itertuples():
        accs = [
            reward_fn(
                data_source=row.data_source,
                solution_str=f"random response {k} to {row.Index}",
                ground_truth=row.reward_model["ground_truth"],
                extra_info=dict(row.extra_info),
            )["acc"]
            for k in range(n)
        ]
        correct += sum(accs)
        kinds.append("all_wrong" if not any(accs) else "all_correct" if all(accs) else "mixed")
    assert kinds == ["all_wrong", "mixed", "all_correct"]
    assert abs(correct / (n * len(frame)) - 0.5) <= 1 / 6


def test_a_qwen3_shape_dry_run_builds_the_real_architecture_and_composes_its_sizes(tmp_path):
    """--shape qwen3-0.6b on a CPU: the 28-layer model (random weights) and 8 prompts are built, and verl
    composes and validates a run at the shape's sizes, with the start-up settings."""
    proc = _run("--dry-run", "--shape", "qwen3-0.6b", env={"SMOKE_DIR": str(tmp_path), "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr[-4000:]
    (config,) = _configs(proc.stdout)
    assert "471,725,056 parameters (28 layers, hidden 1024, vocabulary 30,525)" in proc.stdout
    model = json.loads((tmp_path / "qwen3-0.6b" / "model" / "config.json").read_text())
    assert (model["num_hidden_layers"], model["hidden_size"], model["num_key_value_heads"]) == (28, 1024, 8)
    rollout = config["actor_rollout_ref"]["rollout"]
    assert (config["data"]["train_batch_size"], rollout["n"], config["data"]["max_response_length"]) == (8, 16, 2048)
    assert len(pd.read_parquet(config["data"]["train_files"])) == 8
    assert config["trainer"]["total_training_steps"] == 3 and config["trainer"]["save_freq"] == -1
    assert config["transfer_queue"]["backend"]["SimpleStorage"]["num_data_storage_units"] == 2
    assert config["ray_kwargs"]["ray_init"]["include_dashboard"] is False
    assert "no checkpoint, no resume" in proc.stderr


def test_the_cpu_smoke_waits_for_another_one_on_the_machine(tmp_path):
    """Two CPU smokes do not fit in memory: the second waits for the first's lock, whatever their SMOKE_DIRs."""
    import fcntl
    import hashlib
    import time

    venv = tmp_path / "cpu-env"
    (venv / "bin").mkdir(parents=True)
    digest = hashlib.sha256(
        (ROOT / "scripts/cpu_env/lock.txt").read_bytes() + (ROOT / "scripts/setup_cpu_env.sh").read_bytes()
    ).hexdigest()
    (venv / ".gcpo-cpu-env").write_text(digest + "\n")  # built from the current pins: reused, nothing installed
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')  # the environment's python
    (venv / "bin" / "python").chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "GCPO_CPU_VENV": str(venv),
        "TMPDIR": str(tmp_path),
        "SMOKE_DIR": str(tmp_path / "elsewhere"),
    }
    with open(tmp_path / "gcpo-smoke-cpu.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.Popen(
            ["bash", str(ROOT / "scripts" / "smoke_cpu.sh"), "--frobnicate"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)
        assert proc.poll() is None  # waiting
        fcntl.flock(held, fcntl.LOCK_UN)
    _, err = proc.communicate(timeout=60)
    assert "another CPU run (smoke or miniature) holds" in err and "waiting for it" in err
    assert proc.returncode == 2 and "error: unknown option --frobnicate" in err  # then on to the smoke itself


@pytest.mark.parametrize("script", ["smoke_1gpu.sh", "smoke_cpu.sh"])
def test_the_wrappers_help_lists_the_smokes_options(script):
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / script), "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert proc.returncode == 0 and "--compare" in proc.stdout
    if script == "smoke_1gpu.sh":  # the smoke's own help, environment included
        assert "SMOKE_DIR" in proc.stdout and "SMOKE_RUN_TIMEOUT" in proc.stdout
    else:  # before the CPU environment is built: its usage, and where the shared options are
        assert "python -m tests.special_e2e.smoke run --help" in proc.stdout
