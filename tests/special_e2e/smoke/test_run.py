"""The smoke's driver (``python -m tests.special_e2e.smoke run``, :mod:`.run`): its command line, and what it runs
in which order with a stand-in Python for the trainer and the helpers and the report commands recorded: two runs
then the checks, GRPO, --compare, failures, the time bound, clean-up, the CPU device, faults, launchers, the
EADDRINUSE retry. The real dry run against verl is tests/scripts/test_smoke.py's (through the wrapper)."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.special_e2e import ROOT
from tests.special_e2e.cpu_platform import cpu_overrides
from tests.special_e2e.smoke import run as smoke_run
from tests.special_e2e.smoke.run import RunDir, parse_options

# a python3 stand-in: logs each call (arguments, and the environment the smoke gives it), finds flash-attn when
# STUB_FLASH=1, trains for STUB_TRAIN_S seconds, fails a call whose arguments contain STUB_FAIL, hangs (in a child,
# whose pid it records) in one that contains STUB_HANG, and fails the first trainer run with EADDRINUSE when
# STUB_PORT_TAKEN_ONCE names a file to create
STUB = r"""#!/usr/bin/env bash
# one write per call: helpers run in the background, and separate writes of two of them interleave
line="CALL$(printf ' %s' "$@")$(printf ' | RAY=%s LOGGER=%s DRY=%s MARK=%s PLATFORM=%s TMP=%s PYPATH=%s' \
  "${RAY_ADDRESS:-}" "${VERL_FILE_LOGGER_PATH:-}" "${GCPO_DRY_RUN:-}" "${GCPO_SMOKE_MARKER:-}" \
  "${VERL_PLATFORM:-}" "${TMPDIR:-}" "${PYTHONPATH:-}")"
printf '%s\n' "$line" >> "$STUB_LOG"
if [[ "$1" == "-c" ]]; then [[ "${STUB_FLASH:-0}" == 1 ]]; exit $?; fi
if [[ "$*" == *main_gcpo* ]]; then sleep "${STUB_TRAIN_S:-0}"; fi
if [[ -n "${STUB_FAIL:-}" && "$*" == *"${STUB_FAIL}"* ]]; then echo 'boom' >&2; exit 3; fi
if [[ -n "${STUB_HANG:-}" && "$*" == *"${STUB_HANG}"* ]]; then
  sleep 60 & echo $! > "$STUB_HANG_PID"; wait; fi
if [[ -n "${STUB_PORT_TAKEN_ONCE:-}" && "$*" == *main_gcpo* && ! -e "$STUB_PORT_TAKEN_ONCE" ]]; then
  touch "$STUB_PORT_TAKEN_ONCE"; echo 'OSError: [Errno 98] Address already in use'; exit 1; fi
exit 0
"""
HELPERS = (" host-memory ", " gpu-memory ", " fault ")
# the caller's settings of the smoke, which would change what a test expects
CLEARED = (
    "SMOKE_ATTN",
    "SMOKE_N_RESP",
    "SMOKE_GPU_MEM_UTIL",
    "SMOKE_MAX_RESPONSE_LENGTH",
    "PYTHON",
    "SMOKE_DIR",
    "SMOKE_RUN_TIMEOUT",
    "VERL_PLATFORM",
    "VERL_USE_EXTERNAL_MODULES",
    "OMP_NUM_THREADS",
    "SMOKE_DATA_SOURCE",
)


@dataclass
class Result:
    status: int
    stdout: str
    stderr: str
    calls: list[str]  # the stand-in's calls (trainer runs, build, data) and the report commands, in order
    helpers: list[str] = field(default_factory=list)  # samplers and fault injectors (in the background)
    reaped: list[str] = field(default_factory=list)  # the markers the smoke stopped processes by


@pytest.fixture
def smoke(tmp_path, monkeypatch, capfd):
    """Runs the smoke in this process with the stand-in as PYTHON; the report commands (check, compare, ...)
    are recorded in the same log, and fail when their arguments contain STUB_FAIL."""
    log, python = tmp_path / "calls.log", tmp_path / "python"
    python.write_text(STUB)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "tmp").mkdir()
    smoke_dir = tmp_path / "smoke"
    reaped: list[str] = []
    failing = {"text": ""}

    def harness(argv):
        with log.open("a") as out:
            out.write("HARNESS " + " ".join(argv) + "\n")
        if argv[0] == "describe-host":
            print("CPU: a stand-in")
        return 1 if failing["text"] and failing["text"] in " ".join(argv) else 0

    def reap(marker):
        reaped.append(marker)
        return []

    monkeypatch.setattr(smoke_run, "harness", harness)
    monkeypatch.setattr(smoke_run, "reap", reap)

    def run(*args, **env) -> Result:
        environ = {key: value for key, value in os.environ.items() if key not in CLEARED}
        environ.update(
            PYTHON=str(python),
            STUB_LOG=str(log),
            SMOKE_DIR=str(smoke_dir),
            TMPDIR=str(tmp_path / "tmp"),
            STUB_HANG_PID=str(tmp_path / "hang.pid"),
            **env,
        )
        failing["text"] = env.get("STUB_FAIL", "")
        reaped.clear()
        status = smoke_run.main(list(args), environ)
        out = capfd.readouterr()
        lines = log.read_text().splitlines() if log.exists() else []
        lines = [line for line in lines if not line.startswith("CALL -c")]  # the flash-attn probe
        log.unlink(missing_ok=True)
        return Result(
            status,
            out.out,
            out.err,
            [line for line in lines if not any(h in line for h in HELPERS)],
            [line for line in lines if any(h in line for h in HELPERS)],
            list(reaped),
        )

    run.smoke_dir = smoke_dir
    run.tmp_path = tmp_path
    return run


def _module(call: str) -> str:
    return "harness " + call.split()[1] if call.startswith("HARNESS") else call.split()[2]


def _trainings(calls: list[str]) -> list[str]:
    return [c for c in calls if "recipe.gcpo.main_gcpo" in c]


def _env(call: str, name: str) -> str:
    """The value of ``name=`` in a logged call (an override, or the environment the stand-in reported)."""
    value = call.split(f" {name}=", 1)[1]
    return "" if value.startswith(" ") else value.split()[0]


# ---- the command line ------------------------------------------------------------------------------------------
def test_options_their_defaults_and_overrides_anywhere():
    options = parse_options(["a=1", "--device", "cpu", "--steps=3", "b=2", "--kill-reward-worker-after", "2"])
    assert options.device == "cpu" and options.steps == 3 and options.kill_reward_after == 2
    assert options.overrides == ("a=1", "b=2") and options.estimators == ("gcpo",)
    assert parse_options(["--device=gpu", "--compare"]).estimators == ("gcpo", "grpo")
    assert (
        parse_options(["--device", "gpu", "--launcher", "scripts/run_qwen3_4b_gcpo.sh"]).launcher
        == "run_qwen3_4b_gcpo.sh"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--estimator", "ppo"], "--estimator must be gcpo or grpo, got 'ppo'"),
        (["--steps", "0"], "--steps must be a positive integer"),
        (["--compare", "--estimator", "grpo"], "--compare runs gcpo and grpo"),
        (["--estimator=gcpo", "--compare"], "--compare runs gcpo and grpo"),
        (["--frobnicate"], "unknown option --frobnicate"),
        (["--steps"], "--steps needs a value"),
        (["--device", "gpu", "--device"], "--device needs a value (gpu or cpu)"),
        (["--kill-credit-actor-after", "2"], "--kill-credit-actor-after must be a step from 1 to 1"),
        (["--kill-reward-worker-after", "x"], "--kill-reward-worker-after must be a step"),
        (
            ["--estimator", "grpo", "--kill-credit-actor-after", "1", "--steps", "2"],
            "--kill-credit-actor-after needs the gcpo estimator",
        ),
        (["--launcher", "run_nothing.sh"], "--launcher must be one of: run_qwen3_1.7b_gcpo.sh"),
        (["--shape", "qwen3-8b"], "--shape must be one of tiny, qwen3-0.6b, qwen3-1.7b, got 'qwen3-8b'"),
        (["--shape"], "--shape needs a shape (tiny, qwen3-0.6b, qwen3-1.7b)"),
        (
            ["--launcher", "run_qwen3_4b_gcpo.sh", "--shape", "qwen3-0.6b"],
            "--launcher runs the tiny policy at the launcher's sizes: leave out --shape",
        ),
        (["--launcher", "run_qwen3_4b_gcpo.sh", "--compare"], "--launcher runs the launcher's own method"),
        (
            ["--launcher", "run_qwen3_4b_gcpo.sh", "--dry-run"],
            "for a launcher's dry run use the launcher itself: bash scripts/run_qwen3_4b_gcpo.sh --dry-run",
        ),
        (["--launcher", "run_qwen3_4b_gcpo.sh", "--no-resume"], "--launcher has no resumed run: leave out --no-resume"),
        (["--trainer-mode", "async"], "--trainer-mode must be one of sync, colocate_async, got 'async'"),
        (["--trainer-mode"], "--trainer-mode needs a value (sync or colocate_async)"),
        (["--trainer-mode", "separate_async"], "--trainer-mode separate_async needs two GPUs"),
        (
            ["--launcher", "run_qwen3_4b_gcpo.sh", "--trainer-mode", "colocate_async"],
            "--launcher takes the mode as the launchers do: TRAINER_MODE=<mode> in the environment",
        ),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(smoke, args, message):
    device = [] if "--device" in args else ["--device", "gpu"]
    result = smoke(*device, *args)
    assert result.status == 2 and f"error: {message}" in result.stderr and not result.calls
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "env, message",
    [
        (
            {"SMOKE_ATTN": "xformers"},
            "SMOKE_ATTN must be auto, flash_attention_2, flash_attention_4, sdpa, got 'xformers'",
        ),
        ({"SMOKE_RUN_TIMEOUT": "soon"}, "SMOKE_RUN_TIMEOUT must be a positive number of seconds, got 'soon'"),
    ],
)
def test_bad_settings_are_refused_before_anything_runs(smoke, env, message):
    result = smoke("--device", "gpu", **env)
    assert result.status == 2 and message in result.stderr and not result.calls


def test_the_smoke_needs_a_device(smoke):
    result = smoke()
    assert result.status == 2 and "--device must be gpu or cpu, got ''" in result.stderr and not result.calls


def test_help_lists_the_options_and_the_environment(capsys):
    with pytest.raises(SystemExit) as exit_:
        smoke_run.main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "--compare" in out and "SMOKE_DIR" in out and "SMOKE_RUN_TIMEOUT" in out


def test_the_harness_dispatches_run_to_the_smoke(capsys):
    from tests.special_e2e.smoke.__main__ import main

    assert main(["run", "--device", "tpu"]) == 2
    assert "--device must be gpu or cpu, got 'tpu'" in capsys.readouterr().err


# ---- what it runs ----------------------------------------------------------------------------------------------
def test_two_runs_then_the_checks(smoke):
    result = smoke("--device", "gpu", "trainer.seed=7", RAY_ADDRESS="10.0.0.1:6379")
    assert result.status == 0, result.stderr
    smoke_dir = smoke.smoke_dir
    assert [_module(c) for c in result.calls] == [
        "tests.special_e2e.smoke",
        "recipe.gcpo.main_gcpo",
        "recipe.gcpo.main_gcpo",
        "harness check",
    ]
    assert result.calls[0].startswith(f"CALL -m tests.special_e2e.smoke build --out {smoke_dir} ")
    run = RunDir(smoke_dir / "gcpo")
    first, resumed = _trainings(result.calls)
    # a local Ray of its own (the metrics file's path reaches the trainer through the environment)
    assert "trainer.total_training_steps=2" in first and f"RAY= LOGGER={run.metrics(1)} DRY=" in first
    assert "trainer.total_training_steps=3" in resumed and f"RAY= LOGGER={run.metrics(2)} DRY=" in resumed
    for call in (first, resumed):
        assert call.split(" | ")[0].endswith("trainer.seed=7")  # overrides come last
        assert "algorithm.adv_estimator=gcpo" in call and "trainer.v1.trainer_mode" not in call
        assert "algorithm.gcpo.actor" not in call
    assert f"check --run-dir {run.root} --estimator gcpo --steps 2 --groups-per-step 3" in result.calls[-1]
    assert float(run.wall(1).read_text()) >= 0 and run.wall(2).is_file()
    assert "[PASS] gcpo run 1 (to step 2) exited 0" in result.stdout
    assert f"+ {smoke.tmp_path / 'python'} -m recipe.gcpo.main_gcpo algorithm.adv_estimator=gcpo" in result.stdout
    # every run carries a marker of its own, and what it left behind is stopped by that marker after it
    markers = [_env(c, "MARK") for c in (first, resumed)]
    assert all(markers) and markers[0] != markers[1] and result.reaped == markers
    assert "PLATFORM= " in first  # a GPU smoke leaves verl's platform detection alone
    # the harness (tests/special_e2e, not in the wheel) from this checkout, first on the path of every process
    stand_in = [c for c in result.calls if c.startswith("CALL")]
    assert all(_env(c, "PYPATH").split(os.pathsep)[0] == str(ROOT) for c in stand_in)


def test_grpo_and_more_steps(smoke):
    result = smoke("--device", "gpu", "--estimator", "grpo", "--steps", "3")
    assert result.status == 0, result.stderr
    first, resumed = _trainings(result.calls)
    assert "algorithm.adv_estimator=grpo" in first and "algorithm.gcpo.dump" not in first
    assert "trainer.total_training_steps=3" in first and "trainer.total_training_steps=4" in resumed
    assert "trainer.save_freq=3" in first
    assert "--estimator grpo --steps 3" in result.calls[-1]


def test_no_resume_runs_the_first_run_only_and_checks_it_as_such(smoke):
    """CI's CPU smoke: one trainer start, no checkpoint, the checks told there is no resumed run."""
    result = smoke("--device", "cpu", "--no-resume")
    assert result.status == 0, result.stderr
    (run,) = _trainings(result.calls)
    assert " trainer.total_training_steps=2 " in run and " trainer.save_freq=-1 " in run
    assert "trainer_mode" not in run  # sync: verl's default
    check = result.calls[-1]
    assert "--estimator gcpo --steps 2 --groups-per-step 3 --resumed-steps 0" in check
    assert "2 steps, no checkpoint, no resume" in result.stderr
    dry = smoke("--device", "cpu", "--no-resume", "--dry-run")
    assert dry.status == 0 and "the first run (steps 1-2)\n" in dry.stdout and "resumed run" not in dry.stdout
    # the default still resumes (the test above: two runs)
    assert parse_options(["--device", "cpu"]).resume and not parse_options(["--device", "cpu", "--no-resume"]).resume


def test_a_trainer_mode_reaches_every_run_with_verls_example_settings(smoke):
    """--trainer-mode colocate_async: both runs (the first and the resumed one) in verl's asynchronous mode, with
    one warm-up batch as verl's own examples have it; the command line's overrides still come last."""
    result = smoke(
        "--device", "cpu", "--trainer-mode", "colocate_async", "trainer.v1.colocate_async.num_warmup_batches=2"
    )
    assert result.status == 0, result.stderr
    for run in _trainings(result.calls):
        mode = run.index(" trainer.v1.trainer_mode=colocate_async ")
        assert run.index(" trainer.v1.colocate_async.num_warmup_batches=1 ") > mode
        assert run.rindex(" trainer.v1.colocate_async.num_warmup_batches=2") > run.index("num_warmup_batches=1")


def test_a_qwen3_shape_runs_once_at_its_sizes_in_a_folder_of_its_own(smoke):
    result = smoke("--device", "gpu", "--shape", "qwen3-0.6b")
    assert result.status == 0, result.stderr
    base = smoke.smoke_dir / "qwen3-0.6b"
    assert [_module(c) for c in result.calls] == ["tests.special_e2e.smoke", "recipe.gcpo.main_gcpo", "harness check"]
    assert f"build --out {base} --shape qwen3-0.6b --prompts 8 " in result.calls[0]
    (run,) = _trainings(result.calls)
    for override in (
        f"actor_rollout_ref.model.path={base}/model",
        f"data.train_files={base}/data/train.parquet",
        "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.rollout.n=16",
        "data.max_response_length=2048",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=24576",
        "trainer.total_training_steps=3",
        "trainer.save_freq=-1",
    ):
        assert f" {override} " in run, override
    check = result.calls[-1]
    assert f"check --run-dir {base / 'gcpo'} --estimator gcpo --steps 3 --groups-per-step 8 --resumed-steps 0" in check
    assert "shape qwen3-0.6b: 8 prompts x 16 rollouts a step, responses up to 2048 tokens" in result.stderr
    assert "3 steps, no checkpoint, no resume" in result.stderr


def test_a_shapes_sizes_yield_to_the_environment_and_the_command_line(smoke):
    result = smoke(
        "--device", "gpu", "--shape", "qwen3-1.7b", "--steps", "2", SMOKE_MAX_RESPONSE_LENGTH="1024", SMOKE_N_RESP="4"
    )
    assert result.status == 0, result.stderr
    (run,) = _trainings(result.calls)
    assert " data.max_response_length=1024 " in run and " actor_rollout_ref.rollout.n=4 " in run
    assert " trainer.total_training_steps=2 " in run and " data.train_batch_size=8 " in run
    # a micro-batch still holds at least one whole sequence
    long = smoke("--device", "gpu", "--shape", "qwen3-0.6b", SMOKE_MAX_RESPONSE_LENGTH="30000")
    (run,) = _trainings(long.calls)
    assert " actor_rollout_ref.actor.ppo_max_token_len_per_gpu=30512 " in run


def test_every_run_takes_the_start_up_settings_and_writes_a_timed_log(smoke):
    result = smoke("--device", "gpu")
    assert result.status == 0, result.stderr
    for run in _trainings(result.calls):
        for override in smoke_run.STARTUP_OVERRIDES:
            assert f" {override} " in run
    run_dir = RunDir(smoke.smoke_dir / "gcpo")
    assert run_dir.timed_log(1).is_file() and run_dir.timed_log(2).is_file()


def test_compare_runs_both_then_prints_the_ratio(smoke):
    result = smoke("--device", "gpu", "--compare")
    assert result.status == 0, result.stderr
    estimators = [c.split("algorithm.adv_estimator=")[1].split()[0] for c in _trainings(result.calls)]
    assert estimators == ["gcpo", "gcpo", "grpo", "grpo"]
    smoke_dir = smoke.smoke_dir
    assert result.calls[-1] == f"HARNESS compare --gcpo {smoke_dir}/gcpo --grpo {smoke_dir}/grpo"


def test_a_failed_run_fails_the_smoke_without_checks_or_comparison(smoke):
    result = smoke("--device", "gpu", "--compare", STUB_FAIL="trainer.experiment_name=gcpo")
    assert result.status == 1
    assert "[FAIL] gcpo run 1 (to step 2) exited 3" in result.stdout and "smoke FAILED: gcpo" in result.stderr
    assert "boom" in (smoke.smoke_dir / "gcpo" / "log_run1.txt").read_text()  # the run's output, in its log
    assert len(_trainings(result.calls)) == 3  # gcpo stopped after its first run; grpo ran both
    assert not any(" compare " in c for c in result.calls)


def test_a_failed_check_fails_the_smoke(smoke):
    result = smoke("--device", "gpu", STUB_FAIL="check --run-dir")
    assert result.status == 1 and "smoke FAILED: gcpo" in result.stderr


def test_a_failed_build_runs_nothing_more(smoke):
    result = smoke("--device", "gpu", STUB_FAIL="build --out")
    assert result.status == 1 and not _trainings(result.calls) and "smoke FAILED: building" in result.stderr


def test_dry_run_only_composes(smoke):
    result = smoke("--device", "gpu", "--dry-run", "--compare")
    assert result.status == 0, result.stderr
    assert all("DRY=1 " in c for c in _trainings(result.calls)) and len(_trainings(result.calls)) == 2
    assert not any(c.startswith("HARNESS") for c in result.calls)
    assert "trainer.total_training_steps=3 and its metrics file" in result.stdout  # the resumed run, described
    assert not (smoke.smoke_dir / "gcpo").exists()


def test_flash_attn_when_installed(smoke):
    result = smoke("--device", "gpu", STUB_FLASH="1")
    first = _trainings(result.calls)[0]
    assert "actor_rollout_ref.model.use_remove_padding=true" in first and "attn_implementation" not in first
    assert "FSDP actor attention: flash_attention_2" in result.stderr
    result = smoke("--device", "gpu", STUB_FLASH="1", SMOKE_ATTN="sdpa")
    assert "+actor_rollout_ref.model.override_config.attn_implementation=sdpa" in _trainings(result.calls)[0]
    # flash-attn-4 only when asked for, with its compile-cache fix in every Ray worker
    result = smoke("--device", "gpu", SMOKE_ATTN="flash_attention_4")
    first = _trainings(result.calls)[0]
    assert "actor_rollout_ref.model.use_remove_padding=true" in first
    assert "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_4" in first
    assert "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=tests.special_e2e.smoke.fa4.install" in first


def test_an_earlier_run_is_cleared_but_a_foreign_folder_is_not(smoke):
    smoke("--device", "gpu")
    stale = smoke.smoke_dir / "gcpo" / "ckpt" / "global_step_9"
    stale.mkdir(parents=True)
    result = smoke("--device", "gpu")
    assert result.status == 0 and not stale.exists()  # resume_mode=auto would have resumed from it
    foreign = smoke.smoke_dir / "grpo"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep")
    result = smoke("--device", "gpu", "--estimator", "grpo")
    assert result.status == 1 and "is not a smoke run folder" in result.stderr
    assert (foreign / "precious.txt").read_text() == "keep" and not _trainings(result.calls)


def test_the_cpu_device_selects_the_cpu_platform_and_its_settings(smoke):
    # a run long enough for its sampler to have started (and logged its call) before it is stopped
    result = smoke("--device", "cpu", SMOKE_RAY_CPUS="12", STUB_TRAIN_S="0.5")
    assert result.status == 0, result.stderr
    first, resumed = _trainings(result.calls)
    ray_dirs = [_env(c, "+ray_kwargs.ray_init._temp_dir") for c in (first, resumed)]
    for call, ray_dir in zip((first, resumed), ray_dirs):
        assert "PLATFORM=cpu" in call
        # the CPU platform's overrides, as the miniature and the cluster smoke run them
        assert all(f" {arg} " in call for arg in cpu_overrides(ray_dir, 12))
    assert ray_dirs[0] != ray_dirs[1] and not any(Path(d).exists() for d in ray_dirs)  # its own, removed after
    # the run's temporary files (vLLM's sockets, verl's locks) go with it
    assert [_env(c, "TMP") for c in (first, resumed)] == ray_dirs
    assert sum(" host-memory " in h for h in result.helpers) == 2  # one memory sampler per run
    assert not any("MARK=gcpo" in h for h in result.helpers)  # the samplers are not the run's: reaping leaves them
    assert "HARNESS describe-host" in result.calls
    assert (smoke.smoke_dir / "gcpo" / "device.txt").read_text() == "CPU: a stand-in\n"


def test_a_run_past_the_time_limit_is_stopped_and_its_processes_reaped(smoke):
    result = smoke("--device", "gpu", STUB_HANG="trainer.total_training_steps=2", SMOKE_RUN_TIMEOUT="2")
    assert result.status == 1
    assert "[FAIL] gcpo run 1 (to step 2) did not finish in SMOKE_RUN_TIMEOUT=2 s" in result.stdout
    assert len(_trainings(result.calls)) == 1 and result.reaped == [_env(_trainings(result.calls)[0], "MARK")]
    assert not _alive(int((smoke.tmp_path / "hang.pid").read_text()))  # the run's child too, by its tree


def test_an_interrupted_run_is_stopped_with_its_samplers(smoke, monkeypatch):
    """Ctrl-C (or SIGTERM) while a run goes: its process tree, its samplers and its marker's processes stop,
    its Ray folder goes, and the smoke says so."""
    samplers = []
    start_helpers = smoke_run.Smoke._start_helpers

    def recorded_helpers(self, *args):
        samplers.extend(start_helpers(self, *args))
        return samplers

    def interrupted(proc, timeout_s):
        hang_pid, deadline = smoke.tmp_path / "hang.pid", time.monotonic() + 30
        while not (hang_pid.is_file() and hang_pid.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        raise KeyboardInterrupt  # once the run hangs in its child

    monkeypatch.setattr(smoke_run.Smoke, "_start_helpers", recorded_helpers)
    monkeypatch.setattr(smoke_run, "_wait_bounded", interrupted)
    result = smoke("--device", "cpu", STUB_HANG="trainer.total_training_steps=2")
    assert result.status == 130 and "interrupted" in result.stderr
    assert not _alive(int((smoke.tmp_path / "hang.pid").read_text()))
    assert samplers and all(s.poll() is not None for s in samplers)
    (training,) = _trainings(result.calls)
    assert result.reaped == [_env(training, "MARK")]
    assert not Path(_env(training, "+ray_kwargs.ray_init._temp_dir")).exists()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_fault_injection_is_started_with_the_first_run_and_checked(smoke):
    result = smoke(
        "--device",
        "gpu",
        "--steps",
        "3",
        "--kill-credit-actor-after",
        "1",
        "--kill-reward-worker-after",
        "2",
        STUB_TRAIN_S="0.5",
    )
    assert result.status == 0, result.stderr
    faults = sorted(h for h in result.helpers if " fault " in h)  # started in the background: any order
    assert len(faults) == 2  # both in the first run, none in the resumed one
    assert "--target credit --after-step 1" in faults[0] and "--target reward --after-step 2" in faults[1]
    assert f"--metrics {smoke.smoke_dir}/gcpo/metrics_run1.jsonl" in faults[0]
    assert f"--parent-pid {os.getpid()}" in faults[0]  # they stop by themselves when the smoke is gone
    assert result.calls[-1].endswith("--fault credit --fault reward")


@pytest.mark.parametrize("launcher", ["run_qwen3_4b_gcpo.sh", "run_qwen3_4b_dapo.sh", "run_qwen3_4b_gcpo_dynamic.sh"])
def test_a_launcher_runs_its_own_config_small_with_the_devices_settings(smoke, launcher):
    tmp_path = smoke.tmp_path
    source = tmp_path / "data"
    source.mkdir()
    (source / "aime24.jsonl").write_text('{"problem": "p", "answer": "1"}\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(tmp_path / "python")  # the launchers run python3
    (smoke.smoke_dir / "model").mkdir(parents=True)  # what `build` writes (the stand-in writes nothing)
    result = smoke(
        "--device",
        "cpu",
        "--launcher",
        launcher,
        "trainer.seed=3",
        SMOKE_DATA_SOURCE=str(source),
        PATH=f"{bin_dir}:{os.environ['PATH']}",
    )
    assert result.status == 0, result.stderr
    smoke_dir = smoke.smoke_dir
    (training,) = _trainings(result.calls)
    assert "trainer.device=cpu" in training and "PLATFORM=cpu" in training
    assert f"actor_rollout_ref.model.path={smoke_dir}/model" in training
    assert "data.train_batch_size=3" in training and "actor_rollout_ref.rollout.n=8" in training
    assert "trainer.total_training_steps=2" in training and training.split(" | ")[0].endswith("trainer.seed=3")
    # a random policy solves nothing: the smoke's prompts and reward, at half the overlong penalty, for every
    # launcher, so that mixed and all-correct groups occur and correct answers keep a positive reward
    assert "reward.custom_reward_function.path=pkg://tests.special_e2e.smoke.reward" in training
    assert "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5" in training
    assert f"data.train_files={smoke_dir}/data/train.parquet" in training
    run_dir = f"{smoke_dir}/launcher-{launcher[:-3]}"
    assert (f"algorithm.gcpo.dump.directory={run_dir}/gcpo_dumps" in training) == ("gcpo" in launcher)
    assert _env(training, "TMP") == _env(training, "+ray_kwargs.ray_init._temp_dir")
    assert any(c.startswith("CALL scripts/prepare_data.py --local-dir ") for c in result.calls)
    assert (smoke_dir / "launcher_data" / ".complete").is_file()  # prepared once, kept for the next smoke
    assert result.calls[-1] == f"HARNESS check-launcher --run-dir {run_dir} --launcher {launcher} --steps 2"


def test_a_launcher_needs_the_local_data(smoke):
    result = smoke(
        "--device", "cpu", "--launcher", "run_qwen3_4b_gcpo.sh", SMOKE_DATA_SOURCE=str(smoke.tmp_path / "nowhere")
    )
    assert result.status == 1 and "set SMOKE_DATA_SOURCE" in result.stderr
    assert "smoke FAILED: run_qwen3_4b_gcpo.sh" in result.stderr and not _trainings(result.calls)


def test_a_run_that_dies_at_start_up_of_a_taken_port_is_run_once_more(smoke):
    result = smoke("--device", "gpu", STUB_PORT_TAKEN_ONCE=str(smoke.tmp_path / "taken"))
    assert result.status == 0, result.stderr
    first, again, _ = _trainings(result.calls)
    assert first.split(" | ")[0] == again.split(" | ")[0]  # the same run, once more
    assert "died at start-up with EADDRINUSE" in result.stderr and "running it once more" in result.stderr
    assert "[FAIL]" not in result.stdout and "[PASS] gcpo run 1 (to step 2) exited 0" in result.stdout
    assert (smoke.smoke_dir / "gcpo" / "log_run1.attempt1.txt").read_text().count("Address already in use") == 1


def test_a_failure_that_is_not_a_taken_port_is_not_run_again(smoke):
    result = smoke("--device", "gpu", STUB_FAIL="trainer.total_training_steps=2")
    assert result.status == 1 and len(_trainings(result.calls)) == 1  # another failure: not retried


def test_the_report_commands_run_in_the_smokes_process(tmp_path, capsys, monkeypatch):
    """check, check-launcher, compare and describe-host are the harness's own commands, called in process; one
    that raises fails, and the smoke goes on (--compare still runs the other estimator)."""
    from tests.special_e2e.smoke import __main__ as commands

    args = ["compare", "--gcpo", str(tmp_path / "gcpo"), "--grpo", str(tmp_path / "grpo")]
    assert smoke_run.harness(args) == 2
    assert "not found (run the gcpo smoke first)" in capsys.readouterr().err

    def broken(_args):
        raise RuntimeError("a bug in a check")

    monkeypatch.setattr(commands, "compare", broken)
    assert smoke_run.harness(args) == 1 and "RuntimeError: a bug in a check" in capsys.readouterr().err
