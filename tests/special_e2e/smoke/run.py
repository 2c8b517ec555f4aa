"""The smoke: GCPO training end to end on one device, offline, meant to take minutes; it proves an installation
before cluster hours. ``scripts/smoke_1gpu.sh`` (one GPU) and ``scripts/smoke_cpu.sh`` (a machine without GPUs)
set up the environment and run it as ``python -m tests.special_e2e.smoke run --device gpu|cpu [options]``.

Builds a tiny Qwen3-architecture policy with random weights (:mod:`.policy`) and three prompts from the package's
own data, then runs ``python -m recipe.gcpo.main_gcpo`` on the device (vLLM generating, the FSDP actor updating,
the GCPO credit actor embedding beside them) for STEPS steps, saves a checkpoint, resumes for one more step, and
checks what the trainer wrote (:mod:`.checks`): both runs exit 0, the gcpo/* and timing_s/gcpo_* metrics are
present and finite, all-wrong groups got zero advantage, the resumed run starts after the saved step. The reward
marks about half the rollouts correct by a hash of the text (:mod:`.reward`), so all-wrong, mixed and all-correct
groups all occur.

Every trainer run is bounded by SMOKE_RUN_TIMEOUT, and every process it started (its Ray cluster, vLLM's workers)
is stopped after it, also after a failure, Ctrl-C or SIGTERM: they all carry the run's marker in their
environment (:mod:`.processes`), nothing else does.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Mapping, NoReturn, Optional, Sequence

from tests.special_e2e import ROOT, checkout_path
from tests.special_e2e.smoke.processes import MARKER_ENV, reap, stop_tree
from tests.special_e2e.smoke.shapes import SHAPES, PolicyShape
from tests.special_e2e.smoke.startup import TimedLog

HARNESS = "tests.special_e2e.smoke"
TRAINER = "recipe.gcpo.main_gcpo"
MAX_PROMPT_LENGTH = 512
RUN_MARKER = ".gcpo-smoke-run"
# a run past SMOKE_RUN_TIMEOUT gets SIGTERM, then SIGKILL this much later (as `timeout --kill-after=30`)
KILL_AFTER_S = 30.0
# how long the output copy may go on after the run and its processes are gone (it ends when the pipe closes)
TEE_JOIN_S = 30.0
ADDRESS_IN_USE = ("EADDRINUSE", "Address already in use")
ESTIMATORS = ("gcpo", "grpo")
# verl's V1 trainer modes the smoke runs, with the settings of verl's own asynchronous examples; in colocate_async
# vLLM runs 12 sequences at a time, so that at the smoke's sizes the batch generated ahead is still being generated
# when a step's sample is taken: its rollouts are cut off, resumed under the new weights (partial rollouts) and their
# groups span two policy versions (gcpo/policy_version/*), as in a real run's long responses
TRAINER_MODES = {
    "sync": (),
    "colocate_async": (
        "trainer.v1.trainer_mode=colocate_async",
        "trainer.v1.colocate_async.num_warmup_batches=1",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_seqs=12",
    ),
}
# why the smoke cannot run separate_async: verl 0.9.1 sends weights to a rollout pool of its own over nccl, nixl or
# mooncake (CUDA or RDMA); its naive engine only feeds a rollout colocated with the actor
SEPARATE_ASYNC = (
    "--trainer-mode separate_async needs two GPUs (a rollout pool of its own beside the trainer's) and a checkpoint "
    "engine that sends weights between them (nccl, nixl, mooncake: CUDA or RDMA); verl 0.9.1 has none for a CPU or a "
    "single device: the run stops as the actor starts (verl/workers/engine_workers.py, CheckpointEngineRegistry.new: "
    "'Checkpoint engine nccl not registered'). Its checks run without it (tests/recipe/gcpo/test_trainer_mode.py); "
    "the run is the GPU record's (issue 67)"
)
# flash-attn 2's compiled kernels (flash-attn-4 installs a flash_attn package too, without them)
FLASH_ATTN_PROBE = "import importlib.util, sys; sys.exit(importlib.util.find_spec('flash_attn_2_cuda') is None)"
ATTENTION_OVERRIDES = {
    # verl's default: packed sequences through flash-attn's varlen kernels (what the launchers run)
    "flash_attention_2": ("actor_rollout_ref.model.use_remove_padding=true",),
    # packed sequences through flash-attn-4's CuTe-DSL kernels (Hopper; the offline bundle can carry its wheel), with
    # the compile-cache fix in every Ray worker (tests/special_e2e/smoke/fa4.py); only when asked for: check it first
    # on the GPU with python -m tests.special_e2e.smoke.fa4_check
    "flash_attention_4": (
        "actor_rollout_ref.model.use_remove_padding=true",
        "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_4",
        "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=tests.special_e2e.smoke.fa4.install",
    ),
    # without flash-attn (vLLM's wheel does not bring it): padded batches through PyTorch's SDPA
    "sdpa": (
        "actor_rollout_ref.model.use_remove_padding=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    ),
}
# a launcher's run with the tiny policy and the smoke's prompts (--launcher here, and every job of the cluster
# smoke): the launchers read their sizes from these environment variables (scripts/common.sh)
LAUNCHER_SIZES = {
    "TRAIN_BATCH_SIZE": "3",
    "MINI_BATCH_SIZE": "3",
    # 8, not 4: the smoke reward decides each rollout of the half-correct prompt by its own coin, so its group is all
    # one way with probability 2 / 2^n; at 4 (1 in 8 a step) a 3-step run saw no mixed group 1 time in 512 and failed
    # the credit check on chance (a CI run did); at 8, 1 in 128 a step
    "N_RESP": "8",
    "MAX_PROMPT_LENGTH": "1024",
    "MAX_RESPONSE_LENGTH": "64",
    "OVERLONG_BUFFER": "16",
    "VAL_N": "1",
    "GPU_MEM_UTIL": "0.15",
}
# Every response of the random policy runs to the length limit, so DAPO's overlong shaping always costs it the
# whole penalty: at the launchers' factor 1.0 a correct answer's reward is 1 - 1 = 0, GCPO's quality is 0
# everywhere and the credit path is checked on zeros. At 0.5 a correct answer keeps 0.5 and a wrong one has -1.5.
OVERLONG_PENALTY = "0.5"
SMOKE_REWARD = (
    "reward.custom_reward_function.path=pkg://tests.special_e2e.smoke.reward",
    "reward.custom_reward_function.name=compute_score",
)
# verl's and vLLM's settings that a one-device run may take to start sooner (docs/smoke.md, "Start-up"), each
# measured with the start-up table on the CPU smoke (2026-11-26, 2 cores; run 1 before / after):
STARTUP_OVERRIDES = (
    # TransferQueue's storage: verl's default starts 8 storage-unit actors (a Ray worker process each, all importing
    # torch at once); verl's config recommends at least 2 per node, and one node needs no more
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=2",
    # no Ray dashboard (two more processes that import Ray's web stack); the smoke reads nothing from it
    "+ray_kwargs.ray_init.include_dashboard=false",
)
# what a missing option value is (argparse says only "expected one argument")
VALUE_NEEDED = {
    "--device": "a value (gpu or cpu)",
    "--estimator": "a value (gcpo or grpo)",
    "--trainer-mode": "a value (sync or colocate_async)",
    "--steps": "a value",
    "--kill-credit-actor-after": "a step",
    "--kill-reward-worker-after": "a step",
    "--launcher": "a launcher (e.g. run_qwen3_4b_gcpo.sh)",
    "--shape": f"a shape ({', '.join(SHAPES)})",
}
ENVIRONMENT_HELP = """\
positional arguments:
  key=value                  Hydra overrides for every run (they win over everything here)

environment:
  SMOKE_DIR                  ${TMPDIR:-/tmp}/gcpo-smoke[-cpu]: model, data, one folder per estimator
  PYTHON                     the Python of the trainer and the harness (default: this one)
  SMOKE_GPU_MEM_UTIL         vLLM's share of the GPU (tiny: 0.15; the Qwen3 shapes: 0.5)
  SMOKE_N_RESP               rollouts per prompt (tiny: 8; the Qwen3 shapes: 16)
  SMOKE_MAX_RESPONSE_LENGTH  tiny: 64; qwen3-0.6b: 2048; qwen3-1.7b: 3072
  SMOKE_ATTN                 auto: flash_attention_2 with padding removal when flash-attn 2 is installed, else
                             sdpa without it; or flash_attention_2 | flash_attention_4 | sdpa
  SMOKE_RUN_TIMEOUT          seconds one trainer run may take before it is stopped: 900 (a run takes about 300
                             on 2 cores)
  SMOKE_RAY_CPUS             cpu: logical CPUs of the run's Ray, 24
  SMOKE_DATA_SOURCE          --launcher: the folder of local data copies, GCPO_SHARED_DATA or ../shared/data
"""


@dataclass(frozen=True)
class RunDir:
    """Where one smoke run (one estimator, or one launcher) writes; the driver passes these paths to the trainer."""

    root: Path

    def metrics(self, run: int) -> Path:
        return self.root / f"metrics_run{run}.jsonl"

    def log(self, run: int) -> Path:
        return self.root / f"log_run{run}.txt"

    def timed_log(self, run: int) -> Path:
        """The run's output, each line stamped with the seconds since the run started (:mod:`.startup`)."""
        return self.root / f"timed_log_run{run}.txt"

    def wall(self, run: int) -> Path:
        return self.root / f"wall_run{run}.txt"

    def wandb(self, run: int) -> Path:
        """W&B's offline run of trainer run ``run`` (WANDB_DIR: W&B names its own folder inside)."""
        return self.root / f"wandb_run{run}"

    def gpu_memory(self, run: int) -> Path:
        return self.root / f"gpu_memory_run{run}.json"

    def host_memory(self, run: int) -> Path:
        return self.root / f"host_memory_run{run}.json"

    def fault(self, target: str) -> Path:
        return self.root / f"fault_{target}.json"

    @property
    def checkpoints(self) -> Path:
        return self.root / "ckpt"

    @property
    def dumps(self) -> Path:
        return self.root / "gcpo_dumps"

    @property
    def device(self) -> Path:
        return self.root / "device.txt"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"


# ---- options and environment -----------------------------------------------------------------------------------
class UsageError(Exception):
    """A bad option or setting: reported on one line, exit status 2, before anything runs."""


@dataclass(frozen=True)
class Options:
    """The command line."""

    device: str
    estimators: tuple[str, ...]
    steps: int = 2
    dry_run: bool = False
    compare: bool = False
    kill_credit_after: Optional[int] = None
    kill_reward_after: Optional[int] = None
    launcher: str = ""
    overrides: tuple[str, ...] = ()
    shape: str = "tiny"
    # the shape's checkpoint and resumed run; --no-resume: the first run only
    resume: bool = True
    trainer_mode: str = "sync"


@dataclass(frozen=True)
class Settings:
    """The environment variables the smoke reads."""

    smoke_dir: Path
    python: str
    # None: the shape's (policy.SHAPES)
    gpu_mem_util: Optional[str]
    n_resp: Optional[str]
    max_response_length: Optional[int]
    attention: str
    run_timeout_s: int
    ray_cpus: str
    data_source: Path
    tmp_dir: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        tmp_dir = environ.get("TMPDIR") or "/tmp"
        timeout = environ.get("SMOKE_RUN_TIMEOUT", "900")
        if not _positive(timeout):
            raise UsageError(f"SMOKE_RUN_TIMEOUT must be a positive number of seconds, got '{timeout}'")
        length = environ.get("SMOKE_MAX_RESPONSE_LENGTH")
        if length is not None and not _positive(length):
            raise UsageError(f"SMOKE_MAX_RESPONSE_LENGTH must be a positive integer, got '{length}'")
        attention = environ.get("SMOKE_ATTN", "auto")
        if attention != "auto" and attention not in ATTENTION_OVERRIDES:
            raise UsageError(f"SMOKE_ATTN must be auto, {', '.join(ATTENTION_OVERRIDES)}, got '{attention}'")
        source = (
            environ.get("SMOKE_DATA_SOURCE") or environ.get("GCPO_SHARED_DATA") or str(ROOT / ".." / "shared" / "data")
        )
        return cls(
            smoke_dir=Path(environ.get("SMOKE_DIR") or f"{tmp_dir}/gcpo-smoke"),
            python=environ.get("PYTHON") or sys.executable,
            gpu_mem_util=environ.get("SMOKE_GPU_MEM_UTIL"),
            n_resp=environ.get("SMOKE_N_RESP"),
            max_response_length=None if length is None else int(length),
            attention=attention,
            run_timeout_s=int(timeout),
            ray_cpus=environ.get("SMOKE_RAY_CPUS", "24"),
            data_source=Path(source),
            tmp_dir=tmp_dir,
        )


def _positive(value: str) -> bool:
    return re.fullmatch(r"[1-9][0-9]*", value) is not None


class _Parser(argparse.ArgumentParser):
    """argparse, with the smoke's one-line usage errors."""

    def error(self, message: str) -> NoReturn:
        missing = re.fullmatch(r"argument (--[\w-]+): expected one argument", message)
        if missing and missing.group(1) in VALUE_NEEDED:
            message = f"{missing.group(1)} needs {VALUE_NEEDED[missing.group(1)]}"
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m tests.special_e2e.smoke run",
        allow_abbrev=False,
        epilog=ENVIRONMENT_HELP,
        usage="%(prog)s --device gpu|cpu [options] [key=value ...]",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--device",
        default="",
        help="gpu (one CUDA GPU) or cpu (verl's CPU platform of tests/special_e2e/cpu_platform.py)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="build the policy and data, compose and validate the run's config and print it",
    )
    parser.add_argument(
        "--estimator", help="the advantage estimator (default gcpo; grpo runs the same smoke with verl's GRPO)"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="run the GCPO smoke, then the GRPO smoke, and print their step times side by side",
    )
    parser.add_argument(
        "--trainer-mode",
        default="sync",
        help="verl's V1 trainer mode: sync (default) or colocate_async (one warm-up batch generated ahead, partial "
        "rollouts resumed after each weight update); separate_async needs two GPUs and a GPU checkpoint engine",
    )
    parser.add_argument(
        "--steps",
        default=None,
        help="steps of the first run (default: the shape's; tiny 2, then the resumed run adds one; the Qwen3 "
        "shapes 3, without resume)",
    )
    parser.add_argument(
        "--no-resume",
        dest="resume",
        action="store_false",
        help="the first run only: no checkpoint, no resumed run (one trainer start fewer; CI covers the resume "
        "with the cluster smoke's resubmitted job)",
    )
    parser.add_argument(
        "--shape",
        default="tiny",
        help="the policy: tiny (the smoke: a few million parameters, 3 prompts x 8 rollouts of 64 tokens, a "
        "checkpoint and a resumed run) or the architecture of qwen3-0.6b or qwen3-1.7b with random weights at a real "
        "run's sizes (8 prompts x 16 rollouts of 2,048 / 3,072 tokens, 3 steps, no resume): what a step takes and "
        "what GCPO adds to it on this GPU",
    )
    parser.add_argument(
        "--kill-credit-actor-after",
        metavar="S",
        help="SIGKILL the credit actor(s) once step S is logged (first run); the check then asks that "
        "Ray restarted them and that every later step still has GCPO's credit",
    )
    parser.add_argument(
        "--kill-reward-worker-after",
        metavar="S",
        help="the same for one of verl's reward workers; later steps must still be scored",
    )
    parser.add_argument(
        "--launcher",
        metavar="L",
        help="instead of the smoke's own config, run launcher L (scripts/run_*.sh: its reward "
        "manager, overlong buffer, validation sets, dynamic batch sizes, data loader workers) "
        "with the tiny policy and small sizes as environment variables, this device's settings "
        "as overrides, on 30 prompts of the real data (scripts/prepare_data.py --local-dir "
        "SMOKE_DATA_SOURCE): validation, STEPS steps, a checkpoint, the final validation; then "
        "its checks",
    )
    return parser


def parse_options(argv: Sequence[str]) -> Options:
    """The command line as Options; UsageError for anything the smoke cannot run (``--help`` exits 0)."""
    # the overrides are the words that are not options, in their order, wherever they stand
    namespace, rest = _parser().parse_known_args(list(argv))
    unknown = next((word for word in rest if word.startswith("--")), None)
    if unknown is not None:
        raise UsageError(f"unknown option {unknown}")
    return _validated(namespace, tuple(rest))


def _validated(ns: argparse.Namespace, overrides: tuple[str, ...]) -> Options:
    if ns.device not in ("gpu", "cpu"):
        raise UsageError(
            f"--device must be gpu or cpu, got '{ns.device}' (scripts/smoke_1gpu.sh, scripts/smoke_cpu.sh)"
        )
    estimators = _estimators(ns.estimator, ns.compare)
    if ns.shape not in SHAPES:
        raise UsageError(f"--shape must be one of {', '.join(SHAPES)}, got '{ns.shape}'")
    shape = SHAPES[ns.shape]
    if ns.steps is not None and not _positive(ns.steps):
        raise UsageError(f"--steps must be a positive integer, got '{ns.steps}'")
    steps = shape.steps if ns.steps is None else int(ns.steps)
    credit = _kill_step("--kill-credit-actor-after", ns.kill_credit_actor_after, steps)
    reward = _kill_step("--kill-reward-worker-after", ns.kill_reward_worker_after, steps)
    if credit is not None and estimators != ("gcpo",):
        raise UsageError("--kill-credit-actor-after needs the gcpo estimator (grpo has no credit actor)")
    launcher = _launcher(ns, credit, reward)
    if ns.trainer_mode == "separate_async":
        raise UsageError(SEPARATE_ASYNC)
    if ns.trainer_mode not in TRAINER_MODES:
        raise UsageError(f"--trainer-mode must be one of {', '.join(TRAINER_MODES)}, got '{ns.trainer_mode}'")
    if launcher and ns.trainer_mode != "sync":
        raise UsageError("--launcher takes the mode as the launchers do: TRAINER_MODE=<mode> in the environment")
    return Options(
        device=ns.device,
        estimators=estimators,
        steps=steps,
        dry_run=ns.dry_run,
        compare=ns.compare,
        kill_credit_after=credit,
        kill_reward_after=reward,
        launcher=launcher,
        overrides=overrides,
        shape=ns.shape,
        resume=ns.resume,
        trainer_mode=ns.trainer_mode,
    )


def _estimators(given: Optional[str], compare: bool) -> tuple[str, ...]:
    if compare and given is not None:
        raise UsageError("--compare runs gcpo and grpo; leave out --estimator")
    estimators = ESTIMATORS if compare else (given or "gcpo",)
    for estimator in estimators:
        if estimator not in ESTIMATORS:
            raise UsageError(f"--estimator must be gcpo or grpo, got '{estimator}'")
    return estimators


def _kill_step(flag: str, value: Optional[str], steps: int) -> Optional[int]:
    """A fault's step: before the last step of the first run, so that a later step shows the recovery."""
    if value is None:
        return None
    if not _positive(value) or int(value) >= steps:
        raise UsageError(
            f"{flag} must be a step from 1 to {steps - 1} (one before the last of --steps {steps}), got '{value}'"
        )
    return int(value)


def _launcher(ns: argparse.Namespace, credit: Optional[int], reward: Optional[int]) -> str:
    if ns.launcher is None:
        return ""
    launcher = Path(ns.launcher).name
    known = sorted(path.name for path in (ROOT / "scripts").glob("run_*.sh"))
    if launcher not in known:
        raise UsageError(f"--launcher must be one of: {' '.join(known)} (got '{launcher}')")
    if ns.compare or ns.estimator is not None or credit is not None or reward is not None:
        raise UsageError("--launcher runs the launcher's own method: leave out --compare, --estimator and --kill-*")
    if not ns.resume:
        raise UsageError("--launcher has no resumed run: leave out --no-resume")
    if ns.shape != "tiny":
        raise UsageError("--launcher runs the tiny policy at the launcher's sizes: leave out --shape")
    if ns.dry_run:
        raise UsageError(f"for a launcher's dry run use the launcher itself: bash scripts/{launcher} --dry-run")
    return launcher


def child_environment(device: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of every process the smoke starts."""
    env = dict(environ)
    # always a local Ray of its own: the run's environment (the metrics file's path) reaches its workers that way
    env.pop("RAY_ADDRESS", None)
    env.pop(MARKER_ENV, None)  # each run gets a marker of its own; the samplers beside it carry none
    # the harness and the CPU platform (tests/special_e2e/) are not in the wheel: every process of the run (the
    # trainer, each Ray worker, vLLM's workers) imports them from this checkout, first on the path (verl's wheel
    # installs a `tests` package of its own)
    env["PYTHONPATH"] = checkout_path(environ.get("PYTHONPATH"))
    # offline: the encoder and the tiny policy are local files
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    if device == "cpu":
        # verl's platform override picks the project's CPU platform, which verl imports in every process as an
        # external module; vLLM's CPU build keeps its KV cache small (GiB); each process may use every core (Ray
        # would give each one thread: its phases run one after another)
        env.update(VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="tests.special_e2e.cpu_platform")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    return env


def choose_attention(settings: Settings, env: Mapping[str, str]) -> str:
    """The FSDP actor's attention (vLLM has its own kernels): SMOKE_ATTN, or by whether the trainer's Python
    has flash-attn."""
    if settings.attention != "auto":
        return settings.attention
    probe = subprocess.run([settings.python, "-c", FLASH_ATTN_PROBE], env=dict(env), cwd=ROOT, timeout=300, check=False)
    return "flash_attention_2" if probe.returncode == 0 else "sdpa"


# ---- processes -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """How one trainer run ended: its exit status as a shell reports it (128 + N after signal N)."""

    returncode: int
    timed_out: bool


def harness(argv: Sequence[str]) -> int:
    """One of the harness's report commands (check, check-launcher, compare, describe-host), in this process; an
    exception is a failed command, so that --compare still runs the other estimator."""
    # imported here: under `python -m tests.special_e2e.smoke` that file is `__main__`, which imports this module
    from tests.special_e2e.smoke.__main__ import main

    try:
        return main(list(argv))
    except Exception:  # noqa: BLE001 - reported, and the smoke fails
        traceback.print_exc()
        return 1


def _reap(marker: str) -> None:
    stopped = reap(marker)
    if stopped:
        print(f"smoke: stopped {len(stopped)} process(es) the run left behind", file=sys.stderr, flush=True)


def _tee(source: IO[bytes], log: IO[bytes], timed: Optional[TimedLog] = None) -> None:
    """Copy a run's output to the log and to this process's output as it comes (progress bars write no newline),
    until the pipe closes; ``timed`` stamps each line with when it arrived."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a chunk may end inside a character
    try:
        for chunk in iter(lambda: source.read1(1 << 16), b""):  # type: ignore[attr-defined]
            log.write(chunk)
            log.flush()
            text = decoder.decode(chunk)
            if timed is not None:
                timed.feed(text, time.monotonic())
            sys.stdout.write(text)
            sys.stdout.flush()
        if timed is not None:
            timed.close(time.monotonic())
    except (OSError, ValueError):  # the log was closed: the run is over
        pass


class _TeedProcess:
    """A run whose output goes to its log and to this process's output; leaving the block waits (bounded) for
    the copy to end, which it does once the run's last process is gone and the pipe closes."""

    def __init__(
        self, command: Sequence[str], env: Mapping[str, str], log: IO[bytes], timed: Optional[IO[str]] = None
    ) -> None:
        self.started = time.monotonic()
        self.popen = subprocess.Popen(
            list(command), env=dict(env), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert self.popen.stdout is not None
        stamps = TimedLog(timed, self.started) if timed is not None else None
        self._tee = threading.Thread(target=_tee, args=(self.popen.stdout, log, stamps), daemon=True)
        self._tee.start()

    def __enter__(self) -> _TeedProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self._tee.join(timeout=TEE_JOIN_S)


def _stop_helpers(helpers: Sequence[subprocess.Popen]) -> None:
    """SIGTERM each sampler (they write their file and exit), SIGKILL one that does not."""
    for helper in helpers:
        if helper.poll() is None:
            helper.terminate()
    for helper in helpers:
        try:
            helper.wait(timeout=30)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()


def _stop(proc: subprocess.Popen) -> None:
    """Stop a run still going (a Ctrl-C or SIGTERM of the smoke lands here): its whole process tree."""
    if proc.poll() is None:
        stop_tree(proc.pid, grace_s=KILL_AFTER_S)
        proc.wait()


def _wait_bounded(proc: subprocess.Popen, timeout_s: int) -> bool:
    """Wait for the run; past ``timeout_s`` stop its process tree. True when it was stopped."""
    try:
        proc.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        _stop(proc)
        return True


def _shell_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _died_of_taken_port(outcome: Outcome, log: Path, metrics: Path) -> bool:
    """vLLM picks a free port, frees it, then binds it: on a busy machine another process can take it in between.
    A run that died of that before its first step is worth one more try; anything else is a failure."""
    if outcome.timed_out or outcome.returncode == 0:
        return False
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    trained = metrics.is_file() and '"training/global_step"' in metrics.read_text(encoding="utf-8", errors="replace")
    return any(marker in text for marker in ADDRESS_IN_USE) and not trained


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """A SIGTERM of the smoke (CI cancelled) unwinds like Ctrl-C, through every clean-up."""

    def handle(signum: int, _frame: object) -> NoReturn:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def fresh_run_dir(path: Path) -> bool:
    """An empty run folder: resume_mode=auto would otherwise pick up an earlier smoke's checkpoints. A folder
    the smoke did not make is left alone."""
    if path.exists() and not (path / RUN_MARKER).is_file():
        print(f"error: {path} exists and is not a smoke run folder; set SMOKE_DIR elsewhere", file=sys.stderr)
        return False
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    (path / RUN_MARKER).touch()
    return True


# ---- the smoke -------------------------------------------------------------------------------------------------
class Smoke:
    """One invocation: its options, settings and the environment of the processes it starts."""

    def __init__(self, options: Options, settings: Settings, environ: Mapping[str, str]) -> None:
        self.options, self.settings = options, settings
        self.env = child_environment(options.device, environ)
        self.attention = "sdpa"
        # the shape's sizes, each under its environment variable
        self.shape: PolicyShape = SHAPES[options.shape]
        self.n_resp = settings.n_resp or str(self.shape.n_resp)
        self.max_response_length = settings.max_response_length or self.shape.max_response_length
        self.gpu_mem_util = settings.gpu_mem_util or self.shape.gpu_mem_util
        self.prompts = self.shape.prompts_per_step
        # a checkpoint and one resumed step: the tiny shape's, unless --no-resume
        self.resume = self.shape.resume and options.resume
        # a Qwen3 shape's model, data and runs in a folder of their own: the tiny smoke's stay where they were
        self.base_dir = settings.smoke_dir if options.shape == "tiny" else settings.smoke_dir / options.shape

    def describe_shape(self) -> str:
        resume = "a checkpoint, then one resumed step" if self.resume else "no checkpoint, no resume"
        return (
            f"smoke: shape {self.options.shape}: {self.prompts} prompts x {self.n_resp} rollouts a step, responses "
            f"up to {self.max_response_length} tokens, vLLM {self.gpu_mem_util} of the GPU, {self.options.steps} "
            f"steps, {resume}"
        )

    def run(self) -> int:
        """Build, then each estimator's smoke (or the launcher's); the comparison; 0 when everything passed."""
        self.attention = choose_attention(self.settings, self.env)
        print(f"smoke: FSDP actor attention: {self.attention}", file=sys.stderr, flush=True)
        if not self.options.launcher:
            print(self.describe_shape(), file=sys.stderr, flush=True)
        if not self.build():
            return 1
        if self.options.launcher:
            if self.launcher_smoke():
                return 0
            print(f"smoke FAILED: {self.options.launcher}", file=sys.stderr)
            return 1
        failed = [estimator for estimator in self.options.estimators if not self.smoke(estimator)]
        if self.options.compare and not self.options.dry_run and not failed:
            status = harness(
                [
                    "compare",
                    "--gcpo",
                    str(self.base_dir / "gcpo"),
                    "--grpo",
                    str(self.base_dir / "grpo"),
                ]
            )
            if status:
                return status
        if failed:
            print(f"smoke FAILED: {' '.join(failed)}", file=sys.stderr)
            return 1
        return 0

    def build(self) -> bool:
        """The tiny policy and the data, in a child: transformers and the model's memory leave with it."""
        shape = ["--shape", self.options.shape, "--prompts", str(self.prompts)]
        proc = self._python(["-m", HARNESS, "build", "--out", str(self.base_dir), *shape])
        if proc.returncode:
            print(f"smoke FAILED: building the policy and data exited {proc.returncode}", file=sys.stderr)
        return proc.returncode == 0

    def smoke(self, estimator: str) -> bool:
        """One estimator: two trainer runs (the second resumes from the first's checkpoint), then the checks."""
        run_dir, steps = RunDir(self.base_dir / estimator), self.options.steps
        if self.options.dry_run:
            return self.dry_run(estimator, run_dir)
        if not fresh_run_dir(run_dir.root):
            return False
        self.describe_device(run_dir)
        if not self.train(estimator, run_dir, 1, steps):
            return False
        if self.resume and not self.train(estimator, run_dir, 2, steps + 1):
            return False
        faults = [
            word
            for target, after in (
                ("credit", self.options.kill_credit_after),
                ("reward", self.options.kill_reward_after),
            )
            if after is not None
            for word in ("--fault", target)
        ]
        return (
            harness(
                [
                    "check",
                    "--run-dir",
                    str(run_dir.root),
                    "--estimator",
                    estimator,
                    "--steps",
                    str(steps),
                    "--groups-per-step",
                    str(self.prompts),
                    "--resumed-steps",
                    "1" if self.resume else "0",
                    *faults,
                ]
            )
            == 0
        )

    def dry_run(self, estimator: str, run_dir: RunDir) -> bool:
        """Compose and validate the first run's config (the trainer prints it), running nothing."""
        steps = self.options.steps
        args = self.trainer_args(estimator, run_dir, steps, str(run_dir.root / "ray"))
        print(
            f"# smoke {estimator} ({self.options.device}): the first run (steps 1-{steps})"
            + (
                f"; the resumed run differs only in trainer.total_training_steps={steps + 1} and its metrics file"
                if self.resume
                else ""
            ),
            flush=True,
        )
        return self._python(["-m", TRAINER, *args], GCPO_DRY_RUN="1").returncode == 0

    def describe_device(self, run_dir: RunDir) -> None:
        """device_kind.txt, and device.txt for the report: the GPU (nvidia-smi) or the host's CPU and memory."""
        (run_dir.root / "device_kind.txt").write_text(f"{self.options.device}\n", encoding="utf-8")
        if self.options.device == "cpu":
            with run_dir.device.open("w", encoding="utf-8") as out, contextlib.redirect_stdout(out):
                harness(["describe-host"])
        elif shutil.which("nvidia-smi", path=self.env.get("PATH")):
            with run_dir.device.open("w", encoding="utf-8") as out, contextlib.suppress(subprocess.SubprocessError):
                subprocess.run(
                    ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                    stdout=out,
                    env=self.env,
                    timeout=60,
                    check=False,
                )

    def train(self, estimator: str, run_dir: RunDir, run: int, total_steps: int) -> bool:
        """One trainer run of the smoke, with a Ray folder of its own, removed after it."""
        ray_dir = self._new_ray_dir()
        try:
            args = self.trainer_args(estimator, run_dir, total_steps, ray_dir)
            # the run's temporary files (vLLM's sockets, verl's checkpoint locks) go with its Ray folder
            return self.bounded_run(
                f"{estimator} run {run} (to step {total_steps})",
                run_dir,
                run,
                [self.settings.python, "-m", TRAINER, *args],
                {"TMPDIR": ray_dir},
                self._marker(f"{estimator}-{run}"),
            )
        finally:
            shutil.rmtree(ray_dir, ignore_errors=True)

    def trainer_args(self, estimator: str, run_dir: RunDir, total_steps: int, ray_dir: str) -> list[str]:
        """The Hydra overrides of one smoke run; the command line's come last and win."""
        seq_len = MAX_PROMPT_LENGTH + self.max_response_length
        data, steps = self.base_dir / "data", self.options.steps
        # a micro-batch holds at least one whole sequence
        update_tokens = max(self.shape.update_tokens or 4 * seq_len, seq_len)
        log_prob_tokens = max(self.shape.log_prob_tokens or 4 * seq_len, seq_len)
        args = [
            f"algorithm.adv_estimator={estimator}",
            f"data.train_files={data}/train.parquet",
            f"data.val_files={data}/val.parquet",
            f"data.train_batch_size={self.prompts}",
            f"data.max_prompt_length={MAX_PROMPT_LENGTH}",
            f"data.max_response_length={self.max_response_length}",
            "data.truncation=error",
            "data.dataloader_num_workers=0",
            f"actor_rollout_ref.model.path={self.base_dir}/model",
            "actor_rollout_ref.model.enable_gradient_checkpointing=true",
            "actor_rollout_ref.actor.optim.lr=1e-6",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={self.prompts}",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={update_tokens}",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.actor.entropy_coeff=0",
            "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.n={self.n_resp}",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            f"actor_rollout_ref.rollout.gpu_memory_utilization={self.gpu_mem_util}",
            "actor_rollout_ref.rollout.enforce_eager=true",
            # random weights: vLLM starts from dummy weights and gets the FSDP actor's on the first weight sync
            "actor_rollout_ref.rollout.load_format=dummy",
            f"actor_rollout_ref.rollout.max_num_batched_tokens={log_prob_tokens}",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={log_prob_tokens}",
            "actor_rollout_ref.rollout.agent.num_workers=2",
            *SMOKE_REWARD,
            "reward.num_workers=2",
            "algorithm.use_kl_in_reward=false",
            'trainer.logger=["console","file","wandb"]',
            "trainer.project_name=gcpo-smoke",
            f"trainer.experiment_name={estimator}",
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=1",
            "trainer.total_epochs=1000",
            f"trainer.total_training_steps={total_steps}",
            f"trainer.save_freq={steps if self.resume else -1}",
            "trainer.test_freq=-1",
            "trainer.val_before_train=false",
            "trainer.resume_mode=auto",
            f"trainer.default_local_dir={run_dir.checkpoints}",
            f"trainer.rollout_data_dir={run_dir.root}/rollouts",
            *ATTENTION_OVERRIDES[self.attention],
            *STARTUP_OVERRIDES,
        ]
        if estimator == "gcpo":
            args += self._dump_args(run_dir)
        args += TRAINER_MODES[self.options.trainer_mode]
        return args + self.device_args(ray_dir) + list(self.options.overrides)

    def device_args(self, ray_dir: str) -> list[str]:
        """The overrides every run on this device needs: on the CPU, the CPU platform's (a local Ray in
        ``ray_dir``); on a GPU, none."""
        if self.options.device != "cpu":
            return []
        from tests.special_e2e.cpu_platform import cpu_overrides  # imports torch: only when needed

        return cpu_overrides(ray_dir, self.settings.ray_cpus)

    @staticmethod
    def _dump_args(run_dir: RunDir) -> list[str]:
        return [
            "algorithm.gcpo.dump.every_n_steps=1",
            "algorithm.gcpo.dump.max_groups=64",
            f"algorithm.gcpo.dump.directory={run_dir.dumps}",
        ]

    # ---- --launcher --------------------------------------------------------------------------------------------
    def launcher_smoke(self) -> bool:
        """--launcher: the launcher's own config, small, then its checks. Its settings are environment variables
        (scripts/common.sh), and this device's overrides come before the command line's."""
        launcher, steps = self.options.launcher, self.options.steps
        run_dir = RunDir(self.settings.smoke_dir / f"launcher-{launcher[: -len('.sh')]}")
        data_dir = self.settings.smoke_dir / "launcher_data"
        source = self.settings.data_source
        if not source.is_dir():
            print(
                f"error: --launcher needs local copies of the data sets (scripts/prepare_data.py --local-dir): "
                f"{source} is not a folder; set SMOKE_DATA_SOURCE (or GCPO_SHARED_DATA) to one",
                file=sys.stderr,
            )
            return False
        if not fresh_run_dir(run_dir.root):
            return False
        (run_dir.root / "device_kind.txt").write_text(f"{self.options.device}\n", encoding="utf-8")
        if not self.prepare_launcher_data(source, data_dir):
            return False
        ray_dir = self._new_ray_dir()
        try:
            ok = self.bounded_run(
                f"{launcher} ({steps} steps)",
                run_dir,
                1,
                ["bash", f"scripts/{launcher}", *self.launcher_args(run_dir, data_dir, ray_dir)],
                self.launcher_environment(run_dir, data_dir, ray_dir),
                self._marker("launcher"),
            )
        finally:
            shutil.rmtree(ray_dir, ignore_errors=True)
        return (
            ok
            and harness(
                ["check-launcher", "--run-dir", str(run_dir.root), "--launcher", launcher, "--steps", str(steps)]
            )
            == 0
        )

    def prepare_launcher_data(self, source: Path, data_dir: Path) -> bool:
        """30 training prompts and the validation sets of the real data, once (kept across smokes)."""
        if (data_dir / ".complete").is_file():
            return True
        staged = Path(tempfile.mkdtemp(dir=self.settings.tmp_dir))
        try:
            for path in sorted(source.glob("*.jsonl")):
                shutil.copy(path, staged / path.name)  # the files, not links (the copies may be links)
            # MATH's train split is not among the local copies: MATH-500 (same rows: problem, solution, answer)
            # stands in
            if not (staged / "math_train.jsonl").is_file() and (staged / "math500.jsonl").is_file():
                shutil.copy(staged / "math500.jsonl", staged / "math_train.jsonl")
            proc = self._python(
                [
                    "scripts/prepare_data.py",
                    "--local-dir",
                    str(staged),
                    "--out-dir",
                    str(data_dir),
                    "--train-limit",
                    "30",
                    "--datasets",
                    "dapo_math_17k,math,aime24,amc23",
                ]
            )
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        if proc.returncode:
            return False
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / ".complete").touch()
        return True

    def launcher_args(self, run_dir: RunDir, data_dir: Path, ray_dir: str) -> list[str]:
        """The overrides after the launcher's own: this device's, the file logger, checkpoints, small worker
        counts, the smoke's prompts and reward; then the command line's."""
        steps, launcher = self.options.steps, self.options.launcher
        args = [
            *self.device_args(ray_dir),
            *ATTENTION_OVERRIDES[self.attention],
            'trainer.logger=["console","file"]',
            f"trainer.save_freq={steps}",
            f"trainer.test_freq={steps}",
            f"trainer.default_local_dir={run_dir.checkpoints}",
            "actor_rollout_ref.rollout.agent.num_workers=2",
            "reward.num_workers=2",
        ]
        # A random policy never solves a real problem: on the math reward every group is all wrong, and every
        # check of the credit (and dynamic sampling, COPO's blended loss) would run on zeros. So the smoke's
        # three prompts train (an all-wrong, a mixed and an all-correct group every step) on the smoke reward,
        # with a penalty that keeps a correct answer's reward positive (OVERLONG_PENALTY).
        print(
            "smoke: the smoke's prompts and reward stand in for the math data and reward (a random policy solves "
            "nothing), with half the overlong penalty (every response reaches the length limit)",
            file=sys.stderr,
        )
        args += [*SMOKE_REWARD, f"reward.reward_kwargs.overlong_buffer_cfg.penalty_factor={OVERLONG_PENALTY}"]
        if "group_contrastive" in launcher:
            args.append(f"data.train_files={data_dir}/train_math.parquet")
        if "adv_estimator=gcpo" in (ROOT / "scripts" / launcher).read_text(encoding="utf-8"):
            args += self._dump_args(run_dir)
        return args + list(self.options.overrides)

    def launcher_environment(self, run_dir: RunDir, data_dir: Path, ray_dir: str) -> dict[str, str]:
        """The launcher's settings (scripts/common.sh reads them): the tiny policy, the smoke's sizes."""
        smoke_dir = self.settings.smoke_dir
        return {
            "TMPDIR": ray_dir,
            "MODEL_PATH": f"{smoke_dir}/model",
            "DATA_DIR": str(data_dir),
            "TRAIN_FILE": f"{smoke_dir}/data/train.parquet",
            "NNODES": "1",
            "GPUS_PER_NODE": "1",
            **LAUNCHER_SIZES,
            "GPU_MEM_UTIL": self.gpu_mem_util,
            "VAL_SETS": "aime24 amc23",
            "TOTAL_STEPS": str(self.options.steps),
            "CKPT_DIR": str(run_dir.checkpoints),
        }

    # ---- one bounded run ---------------------------------------------------------------------------------------
    def bounded_run(
        self, label: str, run_dir: RunDir, run: int, command: Sequence[str], env: Mapping[str, str], marker: str
    ) -> bool:
        """One trainer run, bounded by SMOKE_RUN_TIMEOUT, with its samplers beside it; writes log_run<N>.txt,
        wall_run<N>.txt and metrics_run<N>.jsonl, and prints [PASS] or [FAIL]. A run that died at start-up of a
        taken port runs once more."""
        log, metrics = run_dir.log(run), run_dir.metrics(run)
        run_dir.wandb(run).mkdir(parents=True, exist_ok=True)
        # W&B offline beside the file logger, as a user's run logs (no account: nothing leaves the machine)
        wandb = {"WANDB_MODE": "offline", "WANDB_DIR": str(run_dir.wandb(run))}
        full_env = {**self.env, **env, MARKER_ENV: marker, "VERL_FILE_LOGGER_PATH": str(metrics), **wandb}
        for attempt in (1, 2):
            print(f"+ {' '.join(command)}", flush=True)
            outcome = self._run_once(command, full_env, run_dir, run, marker)
            if attempt == 1 and _died_of_taken_port(outcome, log, metrics):
                first = log.with_name(f"{log.stem}.attempt1.txt")
                print(
                    f"smoke: {label} died at start-up with EADDRINUSE (a port picked free was taken before it was "
                    f"bound, as on a busy machine): running it once more; first log: {first}",
                    file=sys.stderr,
                    flush=True,
                )
                log.rename(first)
                metrics.unlink(missing_ok=True)
                shutil.rmtree(run_dir.wandb(run))  # the checks read the one W&B run of the attempt that counts
                run_dir.wandb(run).mkdir(parents=True)
                continue
            break
        return self._verdict(label, outcome, log)

    def _run_once(
        self, command: Sequence[str], env: Mapping[str, str], run_dir: RunDir, run: int, marker: str
    ) -> Outcome:
        helpers = self._start_helpers(run_dir, run, marker)
        try:
            with (
                run_dir.log(run).open("wb") as log,
                run_dir.timed_log(run).open("w", encoding="utf-8") as timed,
                _TeedProcess(command, env, log, timed) as proc,
            ):
                try:
                    timed_out = _wait_bounded(proc.popen, self.settings.run_timeout_s)
                    run_dir.wall(run).write_text(f"{time.monotonic() - proc.started:.1f}\n", encoding="utf-8")
                finally:
                    # whatever happened (a failure, Ctrl-C, SIGTERM): the run's processes stop here, before the
                    # copy of its output ends (a process left behind may hold the pipe)
                    _stop(proc.popen)
                    _reap(marker)
        finally:
            _stop_helpers(helpers)
        return Outcome(_shell_status(proc.popen.returncode), timed_out)

    def _verdict(self, label: str, outcome: Outcome, log: Path) -> bool:
        if outcome.timed_out:
            print(
                f"[FAIL] {label} did not finish in SMOKE_RUN_TIMEOUT={self.settings.run_timeout_s} s and was "
                f"stopped; log: {log}",
                flush=True,
            )
            return False
        if outcome.returncode:
            print(f"[FAIL] {label} exited {outcome.returncode}; log: {log}", flush=True)
            return False
        print(f"[PASS] {label} exited 0", flush=True)
        return True

    def _start_helpers(self, run_dir: RunDir, run: int, marker: str) -> list[subprocess.Popen]:
        """Samplers beside a run (GPU memory with nvidia-smi on a GPU, every process's memory on the CPU) and the
        fault injectors (first run only); each also stops by itself when the smoke is gone."""
        parent = ["--parent-pid", str(os.getpid())]
        commands = []
        if self.options.device == "gpu" and shutil.which("nvidia-smi", path=self.env.get("PATH")):
            commands.append(["gpu-memory", "--out", str(run_dir.gpu_memory(run)), *parent])
        if self.options.device == "cpu":
            commands.append(["host-memory", "--out", str(run_dir.host_memory(run)), "--marker", marker, *parent])
        for target, after in (("credit", self.options.kill_credit_after), ("reward", self.options.kill_reward_after)):
            if run == 1 and after is not None:
                commands.append(
                    [
                        "fault",
                        "--target",
                        target,
                        "--after-step",
                        str(after),
                        "--marker",
                        marker,
                        "--metrics",
                        str(run_dir.metrics(1)),
                        "--out",
                        str(run_dir.fault(target)),
                        *parent,
                    ]
                )
        # the helpers' environment has no marker: they are not the run's, and reaping it leaves them be
        return [
            subprocess.Popen([self.settings.python, "-m", HARNESS, *words], env=self.env, cwd=ROOT)
            for words in commands
        ]

    def _python(self, args: Sequence[str], **env: str) -> subprocess.CompletedProcess:
        """A short Python step (build, data, dry run), bounded like a run; a step past it fails."""
        try:
            return subprocess.run(
                [self.settings.python, *args],
                env={**self.env, **env},
                cwd=ROOT,
                timeout=self.settings.run_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            print(
                f"smoke: {' '.join(args[:3])} did not finish in SMOKE_RUN_TIMEOUT={self.settings.run_timeout_s} s",
                file=sys.stderr,
            )
            return subprocess.CompletedProcess(err.cmd, 124)

    def _new_ray_dir(self) -> str:
        return tempfile.mkdtemp(prefix="gcpo-ray.", dir=self.settings.tmp_dir)  # short: Ray's sockets live under it

    @staticmethod
    def _marker(run: str) -> str:
        return f"gcpo-smoke-{os.getpid()}-{run}-{secrets.token_hex(3)}"


def main(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None) -> int:
    """``python -m tests.special_e2e.smoke run``: 0 passed, 1 failed, 2 a usage error (nothing ran)."""
    environ = os.environ if environ is None else environ
    try:
        options = parse_options(argv)
        settings = Settings.from_environ(environ)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        with _sigterm_as_exit():
            return Smoke(options, settings, environ).run()
    except KeyboardInterrupt:
        print("smoke: interrupted; the runs' processes are stopped", file=sys.stderr)
        return 130
