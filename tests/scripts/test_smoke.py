"""scripts/smoke_1gpu.sh and scripts/smoke.sh (their shared body): a real dry run against verl 0.9.1 (tiny policy,
data, composed config), and the script's orchestration (two runs, the checks, GRPO, --compare, failures, the time
bound, the CPU device, faults, launchers) with a stand-in python."""

import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from recipe.gcpo.main_gcpo import DRY_RUN_MARKER
from tests.special_e2e.smoke.__main__ import RunDir
from tests.recipe.gcpo.conftest import compose_gcpo

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "smoke_1gpu.sh"
BODY = ROOT / "scripts" / "smoke.sh"


def _run(*args, env=None, script=SCRIPT):
    full_env = dict(os.environ, **(env or {}))
    for key in ("SMOKE_ATTN", "SMOKE_N_RESP", "SMOKE_GPU_MEM_UTIL", "SMOKE_MAX_RESPONSE_LENGTH", "PYTHON",
                "SMOKE_RUN_TIMEOUT", "VERL_PLATFORM", "VERL_USE_EXTERNAL_MODULES", "OMP_NUM_THREADS"):
        full_env.pop(key, None)
    full_env.update(env or {})
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=full_env, cwd=ROOT)


def _configs(stdout):
    """The composed configs a dry run printed, in order."""
    parts = stdout.split(DRY_RUN_MARKER)[1:]
    return [yaml.safe_load(part.split("# dry run (", 1)[0]) for part in parts]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    smoke_dir = tmp_path_factory.mktemp("smoke")
    proc = _run("--dry-run", "actor_rollout_ref.rollout.temperature=0.9", env={"SMOKE_DIR": str(smoke_dir), "PYTHON": sys.executable})
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
    assert len(frame) == config["data"]["train_batch_size"] == config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"]
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
        accs = [reward_fn(data_source=row.data_source, solution_str=f"random response {k} to {row.Index}",
                          ground_truth=row.reward_model["ground_truth"], extra_info=dict(row.extra_info))["acc"]
                for k in range(n)]
        correct += sum(accs)
        kinds.append("all_wrong" if not any(accs) else "all_correct" if all(accs) else "mixed")
    assert kinds == ["all_wrong", "mixed", "all_correct"]
    assert abs(correct / (n * len(frame)) - 0.5) <= 1 / 6


# --- orchestration, with a python that records its calls ---------------------------------------------------

@pytest.fixture
def stub(tmp_path):
    """A python3 stand-in: logs each call (arguments, file-logger path, dry-run flag, run marker, platform), finds
    flash-attn when STUB_FLASH=1, fails a call whose arguments contain STUB_FAIL, sleeps in one that contains
    STUB_HANG, and fails the first trainer run with EADDRINUSE when STUB_PORT_TAKEN_ONCE names a file to create. The helpers the script starts beside a run (samplers, fault injector) and its clean-up calls
    (``reap``) are left out of ``calls``: ``run.helpers`` has them."""
    log = tmp_path / "calls.log"
    script = tmp_path / "python"
    script.write_text(
        "#!/usr/bin/env bash\n"
        # one write per call: helpers run in the background, and separate writes of two of them interleave
        "line=\"CALL$(printf ' %s' \"$@\")$(printf ' | RAY=%s LOGGER=%s DRY=%s MARK=%s PLATFORM=%s TMP=%s PYPATH=%s' "
        "\"${RAY_ADDRESS:-}\" \"${VERL_FILE_LOGGER_PATH:-}\" \"${GCPO_DRY_RUN:-}\" \"${GCPO_SMOKE_MARKER:-}\" "
        "\"${VERL_PLATFORM:-}\" \"${TMPDIR:-}\" \"${PYTHONPATH:-}\")\"\n"
        "printf '%s\\n' \"$line\" >> \"$STUB_LOG\"\n"
        "if [[ \"$1\" == \"-c\" ]]; then [[ \"${STUB_FLASH:-0}\" == 1 ]]; exit $?; fi\n"
        "if [[ -n \"${STUB_FAIL:-}\" && \"$*\" == *\"${STUB_FAIL}\"* ]]; then echo 'boom' >&2; exit 3; fi\n"
        "if [[ -n \"${STUB_HANG:-}\" && \"$*\" == *\"${STUB_HANG}\"* ]]; then sleep 60; fi\n"
        # the first trainer run dies at start-up of a taken port (vLLM's engine on a busy machine)
        "if [[ -n \"${STUB_PORT_TAKEN_ONCE:-}\" && \"$*\" == *main_gcpo* && ! -e \"$STUB_PORT_TAKEN_ONCE\" ]]; then\n"
        "  touch \"$STUB_PORT_TAKEN_ONCE\"; echo 'OSError: [Errno 98] Address already in use'; exit 1; fi\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    helper_commands = (" reap ", " host-memory ", " gpu-memory ", " fault ")

    def run(*args, script_path=SCRIPT, **env):
        smoke_dir = tmp_path / "smoke"
        proc = _run(*args, env={"PYTHON": str(script), "STUB_LOG": str(log), "SMOKE_DIR": str(smoke_dir), **env},
                    script=script_path)
        lines = [line for line in log.read_text().splitlines() if not line.startswith("CALL -c")] if log.exists() else []
        log.unlink(missing_ok=True)
        calls = [line for line in lines if not any(h in line for h in helper_commands)]
        run.helpers = [line for line in lines if any(h in line for h in helper_commands)]
        return proc, calls, smoke_dir

    return run


def _module(call):
    return call.split()[2]


def _trainings(calls):
    return [c for c in calls if "recipe.gcpo.main_gcpo" in c]


def test_two_runs_then_the_checks(stub):
    proc, calls, smoke_dir = stub("trainer.seed=7", RAY_ADDRESS="10.0.0.1:6379")
    assert proc.returncode == 0, proc.stderr
    assert [_module(c) for c in calls] == ["tests.special_e2e.smoke", "recipe.gcpo.main_gcpo", "recipe.gcpo.main_gcpo",
                                           "tests.special_e2e.smoke"]
    assert calls[0].startswith(f"CALL -m tests.special_e2e.smoke build --out {smoke_dir} ")
    run = RunDir(smoke_dir / "gcpo")
    first, resumed = _trainings(calls)
    # a local Ray of its own (the metrics file's path reaches the trainer through the environment)
    assert "trainer.total_training_steps=2" in first and f"RAY= LOGGER={run.metrics(1)} DRY=" in first
    assert "trainer.total_training_steps=3" in resumed and f"RAY= LOGGER={run.metrics(2)} DRY=" in resumed
    for call in (first, resumed):
        assert call.split(" | ")[0].endswith("trainer.seed=7")  # overrides come last
        assert "algorithm.adv_estimator=gcpo" in call and "trainer.v1.trainer_mode" not in call
        assert "algorithm.gcpo.actor" not in call
    assert f"check --run-dir {run.root} --estimator gcpo --steps 2 --groups-per-step 3" in calls[-1]
    assert float(run.wall(1).read_text()) >= 0 and run.wall(2).is_file()
    assert "[PASS] gcpo run 1 (to step 2) exited 0" in proc.stdout
    # every run carries a marker of its own, and what it left behind is stopped by that marker after it
    markers = [c.split("MARK=")[1].split()[0] for c in (first, resumed)]
    assert all(markers) and markers[0] != markers[1]
    reaps = [h for h in stub.helpers if " reap " in h]
    assert [r.split("--marker ")[1].split()[0] for r in reaps[:2]] == markers
    assert "PLATFORM= " in first  # a GPU smoke leaves verl's platform detection alone
    # the harness (tests/special_e2e, not in the wheel) from this checkout, first on the path of every process
    assert all(c.split("PYPATH=")[1].split()[0].split(os.pathsep)[0] == str(ROOT) for c in calls)


def test_grpo_and_more_steps(stub):
    proc, calls, _ = stub("--estimator", "grpo", "--steps", "3")
    assert proc.returncode == 0, proc.stderr
    first, resumed = _trainings(calls)
    assert "algorithm.adv_estimator=grpo" in first and "algorithm.gcpo.dump" not in first
    assert "trainer.total_training_steps=3" in first and "trainer.total_training_steps=4" in resumed
    assert "trainer.save_freq=3" in first
    assert "--estimator grpo --steps 3" in calls[-1]


def test_compare_runs_both_then_prints_the_ratio(stub):
    proc, calls, smoke_dir = stub("--compare")
    assert proc.returncode == 0, proc.stderr
    estimators = [c.split("algorithm.adv_estimator=")[1].split()[0] for c in _trainings(calls)]
    assert estimators == ["gcpo", "gcpo", "grpo", "grpo"]
    assert calls[-1].startswith(
        f"CALL -m tests.special_e2e.smoke compare --gcpo {smoke_dir}/gcpo --grpo {smoke_dir}/grpo")


def test_a_failed_run_fails_the_smoke_without_checks_or_comparison(stub):
    proc, calls, _ = stub("--compare", STUB_FAIL="trainer.experiment_name=gcpo")
    assert proc.returncode == 1
    assert "[FAIL] gcpo run 1 (to step 2) exited 3" in proc.stdout and "smoke FAILED: gcpo" in proc.stderr
    assert len(_trainings(calls)) == 3  # gcpo stopped after its first run; grpo ran both
    assert not any(" compare " in c for c in calls)


def test_a_failed_check_fails_the_smoke(stub):
    proc, _, _ = stub(STUB_FAIL="check --run-dir")
    assert proc.returncode == 1 and "smoke FAILED: gcpo" in proc.stderr


def test_dry_run_only_composes(stub):
    proc, calls, smoke_dir = stub("--dry-run", "--compare")
    assert proc.returncode == 0, proc.stderr
    assert all("DRY=1 " in c for c in _trainings(calls)) and len(_trainings(calls)) == 2
    assert not any(" check " in c or " compare " in c for c in calls)
    assert not (smoke_dir / "gcpo").exists()


def test_flash_attn_when_installed(stub):
    proc, calls, _ = stub(STUB_FLASH="1")
    first = _trainings(calls)[0]
    assert "actor_rollout_ref.model.use_remove_padding=true" in first and "attn_implementation" not in first
    proc, calls, _ = stub(STUB_FLASH="1", SMOKE_ATTN="sdpa")
    assert "+actor_rollout_ref.model.override_config.attn_implementation=sdpa" in _trainings(calls)[0]


def test_an_earlier_run_is_cleared_but_a_foreign_folder_is_not(stub, tmp_path):
    proc, _, smoke_dir = stub()
    stale = smoke_dir / "gcpo" / "ckpt" / "global_step_9"
    stale.mkdir(parents=True)
    proc, _, _ = stub()
    assert proc.returncode == 0 and not stale.exists()  # resume_mode=auto would have resumed from it
    foreign = smoke_dir / "grpo"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep")
    proc, calls, _ = stub("--estimator", "grpo")
    assert proc.returncode == 1 and "is not a smoke run folder" in proc.stderr
    assert (foreign / "precious.txt").read_text() == "keep" and not _trainings(calls)


@pytest.mark.parametrize("args, env, message", [
    (["--estimator", "ppo"], {}, "--estimator must be gcpo or grpo, got 'ppo'"),
    (["--steps", "0"], {}, "--steps must be a positive integer"),
    (["--compare", "--estimator", "grpo"], {}, "--compare runs gcpo and grpo"),
    (["--estimator=gcpo", "--compare"], {}, "--compare runs gcpo and grpo"),
    (["--frobnicate"], {}, "unknown option --frobnicate"),
    ([], {"SMOKE_ATTN": "xformers"}, "SMOKE_ATTN must be auto, flash_attention_2 or sdpa"),
])
def test_bad_arguments_are_refused_before_anything_runs(stub, args, env, message):
    proc, calls, _ = stub(*args, **env)
    assert proc.returncode == 2 and message in proc.stderr and not calls


def test_help_lists_the_options(stub):
    proc, calls, _ = stub("--help")
    assert proc.returncode == 0 and "--compare" in proc.stdout and "SMOKE_DIR" in proc.stdout and not calls


def test_the_check_module_reads_what_the_script_names(tmp_path):
    """The script and RunDir agree on file names (the script cannot import RunDir)."""
    text = BODY.read_text()
    run = RunDir(tmp_path)
    for name in (run.metrics(1).name.replace("1", "${run}"), run.wall(1).name.replace("1", "${run}"),
                 run.gpu_memory(1).name.replace("1", "${run}"), run.host_memory(1).name.replace("1", "${run}"),
                 run.fault("credit").name.replace("credit", "${target}"), run.device.name, run.checkpoints.name,
                 run.dumps.name):
        assert name in text, name


def test_the_cpu_device_selects_the_cpu_platform_and_its_settings(stub):
    proc, calls, smoke_dir = stub("--device", "cpu", script_path=BODY)
    assert proc.returncode == 0, proc.stderr
    first, resumed = _trainings(calls)
    for call in (first, resumed):
        assert "PLATFORM=cpu" in call and "trainer.device=cpu" in call
        assert "actor_rollout_ref.actor.strategy=fsdp2" in call and "+ray_kwargs.ray_init.num_gpus=1" in call
        assert "+actor_rollout_ref.rollout.enable_sleep_mode=false" in call
        assert "param_dtype:fp32" in call and "actor_rollout_ref.rollout.dtype=float32" in call
    ray_dirs = [c.split("+ray_kwargs.ray_init._temp_dir=")[1].split()[0] for c in (first, resumed)]
    assert ray_dirs[0] != ray_dirs[1] and not any(Path(d).exists() for d in ray_dirs)  # its own, removed after
    # the run's temporary files (vLLM's sockets, verl's locks) go with it
    assert [c.split("TMP=")[1].split()[0] for c in (first, resumed)] == ray_dirs
    assert sum(" host-memory " in h for h in stub.helpers) == 2  # one memory sampler per run
    assert (smoke_dir / "gcpo" / "device.txt").is_file() or any(" describe-host" in c for c in calls)


def test_a_run_past_the_time_limit_is_stopped_and_its_processes_reaped(stub):
    proc, calls, _ = stub(STUB_HANG="trainer.total_training_steps=2", SMOKE_RUN_TIMEOUT="2")
    assert proc.returncode == 1
    assert "[FAIL] gcpo run 1 (to step 2) did not finish in SMOKE_RUN_TIMEOUT=2 s" in proc.stdout
    assert len(_trainings(calls)) == 1 and any(" reap " in h for h in stub.helpers)


def test_fault_injection_is_started_with_the_first_run_and_checked(stub):
    proc, calls, smoke_dir = stub("--steps", "3", "--kill-credit-actor-after", "1", "--kill-reward-worker-after", "2")
    assert proc.returncode == 0, proc.stderr
    faults = sorted(h for h in stub.helpers if " fault " in h)  # started in the background: any order
    assert len(faults) == 2  # both in the first run, none in the resumed one
    assert "--target credit --after-step 1" in faults[0] and "--target reward --after-step 2" in faults[1]
    assert f"--metrics {smoke_dir}/gcpo/metrics_run1.jsonl" in faults[0]
    assert "--fault credit --fault reward" in calls[-1]


@pytest.mark.parametrize("args, message", [
    (["--kill-credit-actor-after", "2"], "--kill-credit-actor-after must be a step from 1 to 1"),
    (["--kill-reward-worker-after", "x"], "--kill-reward-worker-after must be a step"),
    (["--estimator", "grpo", "--kill-credit-actor-after", "1", "--steps", "2"], "needs the gcpo estimator"),
    (["--launcher", "run_nothing.sh"], "--launcher must be one of: run_qwen3_1.7b_gcpo.sh"),
    (["--launcher", "run_qwen3_4b_gcpo.sh", "--compare"], "--launcher runs the launcher's own method"),
])
def test_bad_fault_and_launcher_arguments_are_refused(stub, args, message):
    proc, calls, _ = stub(*args)
    assert proc.returncode == 2 and message in proc.stderr and not calls


def test_the_body_needs_a_device(stub):
    proc, calls, _ = stub(script_path=BODY)
    assert proc.returncode == 2 and "--device must be gpu or cpu" in proc.stderr and not calls


def test_the_cpu_smoke_waits_for_another_one_on_the_machine(tmp_path):
    """Two CPU smokes do not fit in memory: the second waits for the first's lock, whatever their SMOKE_DIRs."""
    import fcntl
    import hashlib
    import time

    venv = tmp_path / "cpu-env"
    (venv / "bin").mkdir(parents=True)
    digest = hashlib.sha256((ROOT / "scripts/cpu_env/lock.txt").read_bytes()
                            + (ROOT / "scripts/setup_cpu_env.sh").read_bytes()).hexdigest()
    (venv / ".gcpo-cpu-env").write_text(digest + "\n")  # built from the current pins: reused, nothing installed
    env = {"PATH": os.environ["PATH"], "GCPO_CPU_VENV": str(venv), "TMPDIR": str(tmp_path),
           "SMOKE_DIR": str(tmp_path / "elsewhere")}
    with open(tmp_path / "gcpo-smoke-cpu.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "smoke_cpu.sh"), "--frobnicate"], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert proc.poll() is None  # waiting
        fcntl.flock(held, fcntl.LOCK_UN)
    _, err = proc.communicate(timeout=60)
    assert "another CPU run (smoke or miniature) holds" in err and "waiting for it" in err
    assert proc.returncode == 2 and "unknown option --frobnicate" in err  # then on to the smoke itself


@pytest.mark.parametrize("launcher, dynamic", [("run_qwen3_4b_gcpo.sh", False), ("run_qwen3_4b_dapo.sh", True),
                                               ("run_qwen3_4b_gcpo_dynamic.sh", True)])
def test_a_launcher_runs_its_own_config_small_with_the_devices_settings(stub, tmp_path, launcher, dynamic):
    source = tmp_path / "data"
    source.mkdir()
    (source / "aime24.jsonl").write_text('{"problem": "p", "answer": "1"}\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").symlink_to(tmp_path / "python")  # the launchers run python3
    (tmp_path / "smoke" / "model").mkdir(parents=True)  # what `build` writes (the stub writes nothing)
    proc, calls, smoke_dir = stub("--device", "cpu", "--launcher", launcher, "trainer.seed=3", script_path=BODY,
                                  SMOKE_DATA_SOURCE=str(source), PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    (training,) = _trainings(calls)
    assert "trainer.device=cpu" in training and "PLATFORM=cpu" in training
    assert f"actor_rollout_ref.model.path={smoke_dir}/model" in training
    assert "data.train_batch_size=3" in training and "actor_rollout_ref.rollout.n=4" in training
    assert "trainer.total_training_steps=2" in training and training.split(" | ")[0].endswith("trainer.seed=3")
    # a random policy solves nothing: the smoke's prompts and reward, at half the overlong penalty, for every
    # launcher, so that mixed and all-correct groups occur and correct answers keep a positive reward
    assert "reward.custom_reward_function.path=pkg://tests.special_e2e.smoke.reward" in training
    assert "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5" in training
    assert f"data.train_files={smoke_dir}/data/train.parquet" in training
    run_dir = f"{smoke_dir}/launcher-{launcher[:-3]}"
    assert (f"algorithm.gcpo.dump.directory={run_dir}/gcpo_dumps" in training) == ("gcpo" in launcher)
    assert "TMP=" + training.split("+ray_kwargs.ray_init._temp_dir=")[1].split()[0] in training
    assert any(f"check-launcher --run-dir {smoke_dir}/launcher-{launcher[:-3]} --launcher {launcher} --steps 2" in c
               for c in calls)


def test_a_run_that_dies_at_start_up_of_a_taken_port_is_run_once_more(stub, tmp_path):
    proc, calls, smoke_dir = stub(STUB_PORT_TAKEN_ONCE=str(tmp_path / "taken"))
    assert proc.returncode == 0, proc.stderr
    first, again, resumed = _trainings(calls)
    assert first.split(" | ")[0] == again.split(" | ")[0]  # the same run, once more
    assert "died at start-up with EADDRINUSE" in proc.stderr and "running it once more" in proc.stderr
    assert "[FAIL]" not in proc.stdout and "[PASS] gcpo run 1 (to step 2) exited 0" in proc.stdout
    assert (smoke_dir / "gcpo" / "log_run1.attempt1.txt").read_text().count("Address already in use") == 1


def test_a_failure_that_is_not_a_taken_port_is_not_run_again(stub):
    proc, calls, _ = stub(STUB_FAIL="trainer.total_training_steps=2")
    assert proc.returncode == 1 and len(_trainings(calls)) == 1  # another failure: not retried
