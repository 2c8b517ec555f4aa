"""The cluster smoke's jobs: what sbatch hands them (composed and validated against verl, as the launcher on the
head composes it), when a job is submitted again, how Slurm's answers are read, and the command's refusals."""

import os
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.gcpo.checks import validate
from tests.recipe.gcpo.conftest import compose_gcpo
from tests.scripts.launch import launcher_overrides
from tests.special_e2e import ROOT
from tests.special_e2e.smoke import cluster_run
from tests.special_e2e.smoke.__main__ import main
from tests.special_e2e.smoke.cluster_run import Paths, job_environment, job_overrides, parse_job, start_up_retry_reason

PATHS = Paths(Path("/var/tmp/gcpo-cluster-smoke"))


def _job_config(total_steps=3, save_freq=1, extra=()):
    """The config the launcher on the head composes for a cluster smoke's job: the job's environment, the sbatch's
    NNODES / GPUS_PER_NODE, the smoke's overrides after the launcher's."""
    env = job_environment(PATHS, "train", "marker", "t" * 64, {"PATH": os.environ["PATH"]})
    env.update(NNODES="2", GPUS_PER_NODE="1")
    args = job_overrides(PATHS, total_steps, save_freq, gcpo=True, extra=extra)
    composed = compose_gcpo(launcher_overrides("run_qwen3_4b_gcpo.sh", *args, env=env))
    config = OmegaConf.to_container(composed, resolve=True)  # as the job's command line has it
    validate(composed)  # which sets verl's device as verl's entry point does (cuda here: no CPU platform loaded)
    return config


def test_a_job_composes_the_launchers_config_at_the_smokes_sizes_on_two_nodes():
    config = _job_config()
    assert (config["trainer"]["nnodes"], config["trainer"]["n_gpus_per_node"]) == (2, 1)
    assert config["algorithm"]["adv_estimator"] == "gcpo" and config["trainer"]["device"] == "cpu"
    assert config["data"]["train_files"] == str(PATHS.smoke_data / "train.parquet")  # a group of every kind each step
    assert config["data"]["val_files"] == [str(PATHS.launcher_data / "val_smoke.parquet")]  # no outside data
    assert config["data"]["train_batch_size"] == 3 and config["actor_rollout_ref"]["rollout"]["n"] == 8
    reward = config["reward"]
    assert reward["custom_reward_function"]["path"] == "pkg://tests.special_e2e.smoke.reward"
    assert reward["reward_manager"]["name"] == "dapo"  # the launcher's own manager and shaping ...
    shaping = reward["reward_kwargs"]["overlong_buffer_cfg"]
    assert shaping["enable"] is True and shaping["len"] == 16
    assert shaping["penalty_factor"] == 0.5  # ... at half the penalty: a correct answer keeps a positive reward
    assert config["trainer"]["save_freq"] == 1 and config["trainer"]["total_training_steps"] == 3
    assert config["trainer"]["default_local_dir"] == str(PATHS.checkpoints)
    assert config["algorithm"]["gcpo"]["dump"]["directory"] == str(PATHS.dumps)
    assert config["transfer_queue"]["backend"]["SimpleStorage"]["num_data_storage_units"] == 1
    # a driver that joins a running cluster must not set up a Ray of its own
    assert "num_gpus" not in config["ray_kwargs"]["ray_init"] and "_temp_dir" not in config["ray_kwargs"]["ray_init"]


def test_the_command_lines_overrides_win():
    config = _job_config(extra=["algorithm.gcpo.credit.method=mc", "trainer.save_freq=2"])
    assert config["algorithm"]["gcpo"]["credit"]["method"] == "mc" and config["trainer"]["save_freq"] == 2


def test_the_job_environment_is_a_users_shell_with_the_cpu_platform():
    env = job_environment(
        PATHS,
        "resume",
        "mark-1",
        "t" * 64,
        {
            "PATH": "/bin",
            "TMPDIR": "/tmp/host-only",
            "RAY_ADDRESS": "1.2.3.4:6379",
            "X": "kept",
            "PYTHONPATH": "/elsewhere",
        },
    )
    assert env["X"] == "kept" and env["TMPDIR"] == "/tmp/host-only" and "RAY_ADDRESS" not in env
    assert env["RAY_TMPDIR"] == "/run/gcpo-node/ray-resume"  # each node's own folder
    assert env["CONTAINER_RUNTIME"] == "none" and env["VERL_PLATFORM"] == "cpu"
    assert env["HOME"] == str(PATHS.home) and env["RAY_AUTH_TOKEN"] == "t" * 64
    assert "RAY_AUTH_MODE" not in env  # the sbatch pins it
    assert env["VERL_FILE_LOGGER_PATH"] == str(PATHS.job_file("resume", "metrics"))
    assert env["GCPO_SMOKE_MARKER"] == "mark-1" and env["RAY_prestart_worker_first_driver"] == "0"
    # every process on every node imports the harness and the CPU platform from this checkout, ahead of the tests
    # package verl's wheel installs
    assert env["VERL_USE_EXTERNAL_MODULES"] == "tests.special_e2e.cpu_platform"
    assert env["PYTHONPATH"] == os.pathsep.join([str(ROOT), "/elsewhere"])


def test_with_a_container_every_step_runs_in_the_image_with_the_work_folder_shared():
    env = job_environment(PATHS, "train", "m", "t" * 64, {"PATH": "/bin"}, container="localhost/gcpo-verl-cpu:0.1.0")
    assert env["CONTAINER_RUNTIME"] == "podman" and env["CONTAINER_IMAGE"] == "localhost/gcpo-verl-cpu:0.1.0"
    assert env["CONTAINER_MOUNTS"] == f"{PATHS.root}:{PATHS.root}"  # the policy, data, checkpoints, logs
    for path in (env["MODEL_PATH"], env["DATA_DIR"], env["CKPT_DIR"], env["VERL_FILE_LOGGER_PATH"]):
        assert path.startswith(f"{PATHS.root}/")
    assert env["CONTAINER_GPUS"] == "none" and "--runtime runc" in env["CONTAINER_OPTIONS"]
    assert env["PYTHONPATH"] == "/opt/gcpo-verl"  # the image's harness and CPU platform, not the host checkout's
    assert env["RAY_TMPDIR"] == "/run/gcpo-node/ray-train"  # the sbatch binds it into every container
    assert env["CONTAINER_OPTIONS"].endswith(" --label gcpo.smoke=m")  # the job's containers, found after it


def test_the_containers_a_job_left_are_removed_by_its_label(tmp_path, monkeypatch, capsys):
    # a podman that lists two containers for the job's label, and records every call
    calls = tmp_path / "calls"
    fake = tmp_path / "podman"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\ncase "$1" in ps) [ "$5" = label=gcpo.smoke=job-1 ] && echo a1 && echo b2 ;; esac\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert cluster_run.remove_containers("job-1") == 2
    assert calls.read_text().splitlines()[-1] == "rm --force a1 b2"
    calls.unlink()
    assert cluster_run.remove_containers("job-2") == 0  # none of its own: nothing removed
    assert calls.read_text().splitlines() == ["ps --all --quiet --filter label=gcpo.smoke=job-2"]
    fake.write_text("#!/bin/sh\necho 'Error: no storage' >&2\nexit 125\n")
    assert cluster_run.remove_containers("job-3") == 0
    assert "cluster smoke: podman ps failed: Error: no storage" in capsys.readouterr().err  # said, not swallowed


def test_the_container_smoke_refuses_an_image_podman_does_not_have(capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    if shutil.which("podman") is None:
        assert main(["cluster", "--container"]) == 2
        assert (
            capsys.readouterr().err.strip()
            == "error: --container needs podman (scripts/smoke_cluster_cpu.sh installs it)"
        )
        return
    assert main(["cluster", "--container", "--container-image", "localhost/no-such-image:0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --container: podman has no image localhost/no-such-image:0 (build it")
    assert "\n" not in err


def test_slurms_job_record_is_read_from_one_line():
    text = (
        "JobId=3 JobName=gcpo-train UserId=root(0) JobState=COMPLETING Reason=NonZeroExitCode Dependency=(null) "
        "ExitCode=1:0 RunTime=00:04:22 Command=/work/main/docker/slurm_gcpo.sbatch"
    )
    fields = parse_job(text)
    assert (fields["JobState"], fields["ExitCode"], fields["JobId"]) == ("COMPLETING", "1:0", "3")
    assert parse_job("slurm_load_jobs error: Invalid job id specified") == {}


@pytest.mark.parametrize(
    "state, trained, log, attempts, retried",
    [
        ("FAILED", False, "OSError: [Errno 98] Address already in use", 1, True),
        ("FAILED", False, "RuntimeError: The server socket has failed to listen ... (errno: 98 - EADDRINUSE)", 1, True),
        ("FAILED", False, "OSError: [Errno 98] Address already in use", 2, False),  # once only
        ("FAILED", True, "OSError: [Errno 98] Address already in use", 1, False),  # it had trained: a real failure
        ("FAILED", False, "ValueError: something else", 1, False),
        ("COMPLETED", False, "Address already in use", 1, False),
    ],
)
def test_only_a_first_start_up_death_by_a_taken_port_is_submitted_again(state, trained, log, attempts, retried):
    reason = start_up_retry_reason(state, trained, log, attempts)
    assert (reason is not None) is retried
    if retried:
        assert reason.startswith("died at start-up with ")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "2", "--kill-node-after", "2"], "--kill-node-after must be a step from 1 to 1"),
        (["--steps", "3", "--kill-credit-actor-after", "5"], "--kill-credit-actor-after must be a step from 1 to 2"),
        (["--nodes", "1"], "--nodes must be 2 or more"),
        (["--launcher", "run_nothing.sh", "--work-dir", "/var/tmp/x"], "--launcher must be one of scripts/run_*.sh"),
    ],
)
def test_the_command_refuses_bad_options_in_one_line(argv, message, capsys):
    assert main(["cluster", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_command_needs_root(capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["cluster"]) == 2
    assert "needs root" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the wrapper as another user (setpriv needs root)")
def test_the_wrapper_refuses_non_root_before_installing_anything():
    import subprocess

    root = Path(cluster_run.__file__).resolve().parents[3]
    script = (root / "scripts" / "smoke_cluster_cpu.sh").read_text()
    # the script on standard input: the checkout may be in a folder only root can read
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-s", "--", "--steps", "2"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert proc.returncode == 2 and "needs root" in proc.stderr and "installing" not in proc.stderr
