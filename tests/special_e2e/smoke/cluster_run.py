"""The cluster smoke: ``docker/slurm_gcpo.sbatch`` end to end on a Slurm cluster of namespaces on this machine
(:mod:`.cluster`), as a cluster user runs it, then the checks on the jobs' own records.

Each job is ``sbatch --nodes=N --gpus-per-node=1 --cpus-per-task=24 docker/slurm_gcpo.sbatch scripts/<launcher>``
with ``CONTAINER_RUNTIME=none`` (or, with ``--container IMAGE``, ``podman`` and the CPU image: every step of the job
in a container on its node), the CPU platform's variables and the launcher smoke's sizes (the tiny policy, the
smoke's three prompts, which give an all-wrong, a mixed and an all-correct group every step, for training and
validation, the smoke reward), and a ``HOME`` whose ``~/.ray/auth_token`` is left from an earlier local Ray, as on a
user's machine (Ray then turns token authentication on for the head only, unless the job pins it):

1. **train**: steps 1..S, a checkpoint of every FSDP rank at S, validation before and after. With
   ``kill_node_after`` K, a checkpoint every step and the last node crashed once step K is logged: the job must
   end, in bounded time, with one line naming the lost node;
2. **resume**: the node back (after a crash), the job submitted again: it starts from the last checkpoint and
   trains to S + 1 (or to S after a crash).

While a job runs, its processes' memory (PSS, all nodes) and its Ray actors' placement (Ray's state API, from the
login node) are sampled, and an optional credit-actor fault is injected as in the CPU smoke. A job that dies at
start-up with ``EADDRINUSE`` (vLLM picks a free port, frees it, then binds it: on a busy machine another process
can take it in between) is submitted once more, saying why. With ``--container``, a job's containers carry its
marker as a label and are removed when it ends (a crashed node's ``podman run --rm`` cannot remove its own).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from tests.special_e2e import checkout_path
from tests.special_e2e.cpu_platform import cpu_overrides
from tests.special_e2e.smoke import checks, report
from tests.special_e2e.smoke.cluster import NODE_PRIVATE, ROOT, NamespaceCluster
from tests.special_e2e.smoke.processes import logged_steps, reap
from tests.special_e2e.smoke.run import (
    ADDRESS_IN_USE,
    ATTENTION_OVERRIDES,
    LAUNCHER_SIZES,
    OVERLONG_PENALTY,
    SMOKE_REWARD,
)

SBATCH = ROOT / "docker" / "slurm_gcpo.sbatch"
RUN_MARKER = ".gcpo-cluster-smoke"
# with --container: the image's checkout (docker/Dockerfile's WORKDIR), and the options podman needs on machines of
# this kind (runc: crun refuses cgroups in hybrid mode; the limits: its defaults are refused)
IMAGE_CHECKOUT = "/opt/gcpo-verl"
PODMAN_OPTIONS = os.environ.get(
    "GCPO_PODMAN_OPTIONS", "--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=32768:32768"
)
# each job's containers carry this label with the job's marker: a crashed node's `podman run --rm` never removes its
# container (the crash kills podman's monitor too), and the record, left "running", would pin the image
CONTAINER_LABEL = "gcpo.smoke"
# Slurm's job states once the batch script has ended (COMPLETING: ended, the nodes still cleaning up)
ENDED_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "COMPLETING",
}
# the launcher validates on $DATA_DIR/val_<set>.parquet: the smoke's prompts, written there as this set
VALIDATION_SET = "smoke"


@dataclass(frozen=True)
class Options:
    work_dir: Path
    python: str
    nodes: int = 2
    steps: int = 2
    launcher: str = "run_qwen3_4b_gcpo.sh"
    kill_node_after: Optional[int] = None
    kill_credit_actor_after: Optional[int] = None
    job_timeout_s: int = 1500
    node_loss_bound_s: int = 300
    overrides: tuple[str, ...] = ()
    # an image in podman's storage: every job step runs in it (CONTAINER_RUNTIME=podman), else on the host
    container: Optional[str] = None


@dataclass
class JobRecord:
    name: str
    job_id: str = ""
    state: str = "NOT SUBMITTED"
    exit_code: str = ""
    submitted: float = 0.0
    ended: float = 0.0  # when Slurm first had the batch script ended
    finished: float = 0.0  # when Slurm had the job's final state
    attempts: int = 0
    retry_reason: str = ""
    node_kill: Optional[dict] = None
    credit_fault: Optional[dict] = None
    files: dict = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return round(self.ended - self.submitted, 1) if self.ended else float("nan")


@dataclass(frozen=True)
class Paths:
    """Everything under the work folder: the cluster's state, and what every node sees at the same path (shared
    storage: the policy, the data, the runs' checkpoints and logs)."""

    root: Path

    @property
    def cluster(self) -> Path:
        return self.root / "cluster"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def smoke_data(self) -> Path:
        return self.root / "data"

    @property
    def launcher_data(self) -> Path:
        return self.root / "launcher_data"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def checkpoints(self) -> Path:
        return self.run / "ckpt"

    @property
    def dumps(self) -> Path:
        return self.run / "gcpo_dumps"

    def wandb(self, job: str) -> Path:
        """W&B's offline run of a job (WANDB_DIR), on the shared storage"""
        return self.run / f"wandb_{job}"

    def job_file(self, job: str, kind: str) -> Path:
        suffix = {"metrics": "jsonl", "log": "log"}.get(kind, "json")
        return self.run / f"{kind}_{job}.{suffix}"


# ---- what a job runs -------------------------------------------------------------------------------------------


def job_overrides(paths: Paths, total_steps: int, save_freq: int, gcpo: bool, extra: Sequence[str]) -> list[str]:
    """The Hydra overrides after the launcher's own: the CPU settings, small worker counts, one TransferQueue
    storage unit (verl's 8 cost about 0.4 GiB each), the smoke reward with a penalty that keeps correct answers
    positive, the file logger, checkpoints and credit dumps in the run folder; then the command line's."""
    # the CPU smoke's device overrides without ray_kwargs.ray_init.*: this driver joins the job's Ray cluster
    # padded batches through PyTorch's SDPA: vLLM's CPU wheel brings no flash-attn (the CPU smoke's SMOKE_ATTN=auto)
    args = (
        cpu_overrides()
        + list(ATTENTION_OVERRIDES["sdpa"])
        + [
            'trainer.logger=["console","file","wandb"]',
            f"trainer.total_training_steps={total_steps}",
            f"trainer.save_freq={save_freq}",
            f"trainer.test_freq={total_steps}",
            f"trainer.default_local_dir={paths.checkpoints}",
            "actor_rollout_ref.rollout.agent.num_workers=2",
            "reward.num_workers=2",
            "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
            *SMOKE_REWARD,
            f"reward.reward_kwargs.overlong_buffer_cfg.penalty_factor={OVERLONG_PENALTY}",
        ]
    )
    if gcpo:
        args += [
            "algorithm.gcpo.dump.every_n_steps=1",
            "algorithm.gcpo.dump.max_groups=64",
            f"algorithm.gcpo.dump.directory={paths.dumps}",
        ]
    return args + list(extra)


def job_environment(
    paths: Paths, job: str, marker: str, token: str, cluster_env: dict, container: Optional[str] = None
) -> dict[str, str]:
    """The environment sbatch hands to the job (``--export=ALL``, Slurm's default), as a user's shell would have it.
    With ``container``, every step runs in that image through podman, which gets the work folder (the shared
    storage) at the same path, and the image's checkout is the harness's."""
    env = {key: value for key, value in cluster_env.items() if key not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    env.update(
        {
            "CONTAINER_RUNTIME": "none",
            # Ray's sockets and session in each node's own folder (the sbatch's default is under /tmp, which the
            # nodes of this machine share)
            "RAY_TMPDIR": str(NODE_PRIVATE / f"ray-{job}"),
            "HOME": str(paths.home),
            "RAY_AUTH_TOKEN": token,  # the sbatch would make one; given, so that the state-API sampler can read
            "RAY_JOIN_TIMEOUT": "300",
            # no idle Ray workers started ahead of the driver's first tasks: about 1 GiB on 2 cores
            "RAY_prestart_worker_first_driver": "0",
            # the harness and the CPU platform from this checkout (not in the wheel), in every process on every node
            "PYTHONPATH": checkout_path(cluster_env.get("PYTHONPATH")),
            "VERL_PLATFORM": "cpu",
            "VERL_USE_EXTERNAL_MODULES": "tests.special_e2e.cpu_platform",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "OMP_NUM_THREADS": str(os.cpu_count() or 1),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "GCPO_SMOKE_MARKER": marker,
            "VERL_FILE_LOGGER_PATH": str(paths.job_file(job, "metrics")),
            # W&B offline beside the file logger, as a user's job logs (nothing leaves the machine)
            "WANDB_MODE": "offline",
            "WANDB_DIR": str(paths.wandb(job)),
            "MODEL_PATH": str(paths.model),
            "DATA_DIR": str(paths.launcher_data),
            "TRAIN_FILE": str(paths.smoke_data / "train.parquet"),
            "CKPT_DIR": str(paths.checkpoints),
            "VAL_SETS": VALIDATION_SET,
            **LAUNCHER_SIZES,
        }
    )
    if container is not None:
        env.update(
            {
                "CONTAINER_RUNTIME": "podman",
                "CONTAINER_IMAGE": container,
                "CONTAINER_MOUNTS": f"{paths.root}:{paths.root}",
                "CONTAINER_GPUS": "none",  # the nodes' gpu gres is a stand-in (/dev/null)
                "CONTAINER_OPTIONS": f"{PODMAN_OPTIONS} --label {CONTAINER_LABEL}={marker}",
                "PYTHONPATH": IMAGE_CHECKOUT,
            }
        )
    return env


# ---- running a job ---------------------------------------------------------------------------------------------
def parse_job(text: str) -> dict[str, str]:
    """``scontrol show job -o`` output as {key: value}."""
    fields = {}
    for word in text.split():
        if "=" in word:
            key, value = word.split("=", 1)
            fields.setdefault(key, value)
    return fields


def start_up_retry_reason(state: str, trained: bool, log_text: str, attempts: int) -> Optional[str]:
    """Why a job is worth one more submission, or None: only a first attempt that died before its first step with
    EADDRINUSE in its output (vLLM picks a free port, frees it, then binds it; on a busy machine another process
    can take it in between). Anything else is a failure to report, not to retry."""
    if state == "COMPLETED" or trained or attempts > 1:
        return None
    in_use = next((marker for marker in ADDRESS_IN_USE if marker in log_text), None)
    if in_use is None:
        return None
    return f"died at start-up with {in_use} (a port picked free was taken before it was bound)"


class JobRunner:
    """Submits one job at a time to ``cluster`` and follows it to its end, with the samplers beside it."""

    def __init__(self, cluster: NamespaceCluster, paths: Paths, options: Options, token: str) -> None:
        self.cluster, self.paths, self.options, self.token = cluster, paths, options, token

    def run(
        self,
        record: JobRecord,
        total_steps: int,
        save_freq: int,
        kill_node_after: Optional[int] = None,
        kill_credit_after: Optional[int] = None,
    ) -> JobRecord:
        gcpo = "adv_estimator=gcpo" in (ROOT / "scripts" / self.options.launcher).read_text(encoding="utf-8")
        args = job_overrides(self.paths, total_steps, save_freq, gcpo, self.options.overrides)
        while True:
            record.attempts += 1
            self._run_once(record, args, kill_node_after, kill_credit_after)
            log = self.paths.job_file(record.name, "log")
            text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
            reason = start_up_retry_reason(
                record.state, bool(logged_steps(self.paths.job_file(record.name, "metrics"))), text, record.attempts
            )
            if reason is None:
                return record
            record.retry_reason = f"job {record.job_id} {reason}"
            print(f"cluster smoke: {record.retry_reason}: submitting it once more", file=sys.stderr, flush=True)
            log.rename(log.with_suffix(f".attempt{record.attempts}.log"))

    def _run_once(
        self, record: JobRecord, args: list[str], kill_node_after: Optional[int], kill_credit_after: Optional[int]
    ) -> None:
        paths, name = self.paths, record.name
        marker = f"gcpo-cluster-{os.getpid()}-{name}-{record.attempts}"
        metrics = paths.job_file(name, "metrics")
        metrics.unlink(missing_ok=True)
        shutil.rmtree(paths.wandb(name), ignore_errors=True)  # one W&B run a job: the attempt that counts
        paths.wandb(name).mkdir(parents=True)
        env = job_environment(paths, name, marker, self.token, self.cluster.env, self.options.container)
        record.files = {kind: str(paths.job_file(name, kind)) for kind in ("log", "metrics", "actors", "memory")}
        submit = [
            "sbatch",
            "--parsable",
            f"--nodes={self.options.nodes}",
            "--gpus-per-node=1",
            "--cpus-per-task=24",
            f"--job-name=gcpo-{name}",
            f"--output={paths.job_file(name, 'log')}",
            str(SBATCH),
            f"scripts/{self.options.launcher}",
            *args,
        ]
        print(f"+ {' '.join(submit)}", flush=True)
        record.submitted = time.time()
        proc = subprocess.run(
            ["nsenter", f"--net=/run/netns/{self.cluster.nodes[0].netns}", *submit],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
        if proc.returncode != 0:
            record.state, record.exit_code = "NOT SUBMITTED", proc.stderr.strip()[-300:]
            return
        record.job_id = proc.stdout.strip().split(";")[0]
        helpers = self._start_helpers(record, marker, metrics, kill_credit_after)
        killer = None
        if kill_node_after is not None:
            killer = threading.Thread(
                target=self._kill_node_after, args=(record, metrics, kill_node_after), daemon=True
            )
            killer.start()
        try:
            self._wait(record)
        finally:
            if killer is not None:
                killer.join(timeout=5)
            for helper in helpers:
                helper.send_signal(signal.SIGTERM)
            for helper in helpers:
                try:
                    helper.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    helper.kill()
            reap(marker)  # whatever the job left on the machine (there should be nothing)
            if self.options.container is not None:
                left = remove_containers(marker)
                if left:
                    print(f"cluster smoke: {name}: removed {left} container(s) the job left", flush=True)
        fault = paths.run / f"fault_credit_{name}.json"
        if fault.is_file():
            record.credit_fault = json.loads(fault.read_text(encoding="utf-8"))

    def _start_helpers(
        self, record: JobRecord, marker: str, metrics: Path, kill_credit_after: Optional[int]
    ) -> list[subprocess.Popen]:
        python, paths, me = self.options.python, self.paths, str(os.getpid())
        module = [python, "-m", "tests.special_e2e.smoke"]
        helpers = [
            subprocess.Popen(
                [*module, "host-memory", "--out", record.files["memory"], "--marker", marker, "--parent-pid", me],
                cwd=ROOT,
            ),
            # the dashboard answers on the head's loopback: from inside node 1's network
            subprocess.Popen(
                [
                    "nsenter",
                    f"--net=/run/netns/{self.cluster.nodes[0].netns}",
                    *module,
                    "ray-actors",
                    "--out",
                    record.files["actors"],
                    "--address",
                    "http://127.0.0.1:8265",
                    "--parent-pid",
                    me,
                ],
                cwd=ROOT,
                env={**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "HOME": str(paths.home)},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
        ]
        if kill_credit_after is not None:
            helpers.append(
                subprocess.Popen(
                    [
                        *module,
                        "fault",
                        "--target",
                        "credit",
                        "--after-step",
                        str(kill_credit_after),
                        "--marker",
                        marker,
                        "--metrics",
                        str(metrics),
                        "--out",
                        str(paths.run / f"fault_credit_{record.name}.json"),
                        "--parent-pid",
                        me,
                    ],
                    cwd=ROOT,
                )
            )
        return helpers

    def _kill_node_after(self, record: JobRecord, metrics: Path, step: int) -> None:
        """Crash the last node once ``step`` is logged (its checkpoint is saved before verl logs the step)."""
        victim = self.cluster.nodes[-1].name
        while not record.ended:
            if step in logged_steps(metrics):
                record.node_kill = {**self.cluster.kill_node(victim), "after_step": step}
                print(
                    f"cluster smoke: after step {step}: crashed node {victim} "
                    f"({record.node_kill['processes']} processes)",
                    file=sys.stderr,
                    flush=True,
                )
                return
            time.sleep(0.5)

    def _wait(self, record: JobRecord) -> None:
        deadline = record.submitted + self.options.job_timeout_s
        while True:
            proc = self.cluster.command(["scontrol", "show", "job", "-o", record.job_id], check=False, timeout=30)
            fields = parse_job(proc.stdout)
            state = fields.get("JobState", "")
            if state:
                record.state, record.exit_code = state, fields.get("ExitCode", "")
            if state in ENDED_STATES and not record.ended:
                record.ended = time.time()
            if state in ENDED_STATES - {"COMPLETING"}:
                record.finished = time.time()
                return
            if record.ended and record.node_kill is not None:
                return  # ended; it stays COMPLETING until the lost node is back (read again after the resume)
            if time.time() > deadline:
                self.cluster.command(["scancel", record.job_id], check=False)
                record.state = f"TIMED OUT after {self.options.job_timeout_s} s (cancelled; was {state})"
                record.ended = record.ended or time.time()
                return
            time.sleep(2)

    def refresh(self, record: JobRecord) -> None:
        """Read a job's final state again (a job that lost a node finishes once the node is back)."""
        for _ in range(30):
            fields = parse_job(
                self.cluster.command(["scontrol", "show", "job", "-o", record.job_id], check=False, timeout=30).stdout
            )
            record.state, record.exit_code = fields.get("JobState", record.state), fields.get("ExitCode", "")
            if record.state in ENDED_STATES - {"COMPLETING"}:
                record.finished = record.finished or time.time()
                return
            time.sleep(2)


def remove_containers(marker: str) -> int:
    """Remove every container of the job ``marker`` (by its label), running or not; returns how many there were."""
    listed = subprocess.run(
        ["podman", "ps", "--all", "--quiet", "--filter", f"label={CONTAINER_LABEL}={marker}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if listed.returncode != 0:
        print(f"cluster smoke: podman ps failed: {listed.stderr.strip()[-300:]}", file=sys.stderr, flush=True)
    ids = listed.stdout.split()
    if ids:
        removed = subprocess.run(["podman", "rm", "--force", *ids], capture_output=True, text=True, timeout=120)
        if removed.returncode != 0:
            print(
                f"cluster smoke: podman rm --force {' '.join(ids)} failed: {removed.stderr.strip()[-300:]}",
                file=sys.stderr,
                flush=True,
            )
    return len(ids)


# ---- preparing the work folder ---------------------------------------------------------------------------------
def prepare(paths: Paths, options: Options) -> None:
    """The tiny policy, the smoke's prompts (training, and validation as the launcher's only validation set, so that
    the command needs no data from outside the project), and a HOME with a Ray token left from an earlier local
    run."""
    subprocess.run(
        [options.python, "-m", "tests.special_e2e.smoke", "build", "--out", str(paths.root)], cwd=ROOT, check=True
    )
    paths.launcher_data.mkdir(parents=True, exist_ok=True)
    (paths.launcher_data / f"val_{VALIDATION_SET}.parquet").write_bytes((paths.smoke_data / "val.parquet").read_bytes())
    token = paths.home / ".ray" / "auth_token"
    token.parent.mkdir(parents=True, exist_ok=True)
    token.write_text(secrets.token_hex(32))


def fresh_run_folder(paths: Paths) -> None:
    import shutil

    if paths.run.exists():
        if not (paths.run / RUN_MARKER).is_file():
            raise SystemExit(
                f"error: {paths.run} exists and is not a cluster smoke's run folder; choose another --work-dir"
            )
        shutil.rmtree(paths.run)
    paths.run.mkdir(parents=True)
    (paths.run / RUN_MARKER).touch()


# ---- the whole smoke -------------------------------------------------------------------------------------------
def run(options: Options) -> int:
    paths = Paths(options.work_dir)
    fresh_run_folder(paths)
    prepare(paths, options)
    token = secrets.token_hex(32)
    started = time.time()
    jobs: list[JobRecord] = []
    with NamespaceCluster(paths.cluster, count=options.nodes, python=options.python) as cluster:
        print(
            f"cluster smoke: {options.nodes} Slurm nodes up in {time.time() - started:.1f} s "
            f"({', '.join(f'{n.name} {n.address}' for n in cluster.nodes)})",
            flush=True,
        )
        runner = JobRunner(cluster, paths, options, token)
        kill = options.kill_node_after
        train = runner.run(
            JobRecord("train"),
            total_steps=options.steps,
            save_freq=1 if kill is not None else options.steps,
            kill_node_after=kill,
            kill_credit_after=options.kill_credit_actor_after,
        )
        jobs.append(train)
        if train.node_kill is not None:
            restored = time.time()
            cluster.restore_node(train.node_kill["node"])
            print(f"cluster smoke: node {train.node_kill['node']} back in {time.time() - restored:.1f} s", flush=True)
            runner.refresh(train)
        saved = kill if kill is not None else options.steps
        resume_to = options.steps if kill is not None else options.steps + 1
        if train.state == "COMPLETED" or train.node_kill is not None:
            jobs.append(runner.run(JobRecord("resume"), total_steps=resume_to, save_freq=resume_to))
        results = evaluate(paths, options, cluster, jobs, saved_step=saved, last_step=resume_to)
        _name_nodes(paths, {node.address: node.name for node in cluster.nodes})
    total = time.time() - started
    return report_and_save(paths, options, jobs, results, total)


def evaluate(
    paths: Paths, options: Options, cluster: NamespaceCluster, jobs: list[JobRecord], saved_step: int, last_step: int
) -> list[checks.Check]:
    train = jobs[0]
    resume = jobs[1] if len(jobs) > 1 else None
    ips = {node.address: node.name for node in cluster.nodes}
    crashed = train.node_kill is not None
    results: list[checks.Check] = []
    if options.kill_node_after is not None and not crashed:
        results.append(
            checks.Check(
                "node loss injected", False, f"step {options.kill_node_after} was never logged: no node was crashed"
            )
        )
    if crashed:
        results += checks.check_node_loss(
            train.state, train.ended, train.node_kill, paths.job_file("train", "log"), bound_s=options.node_loss_bound_s
        )
    else:
        results.append(checks.check_job("train", train.state, train.exit_code))
    metrics = {}
    for job in jobs:
        try:
            metrics[job.name] = checks.read_metrics(paths.job_file(job.name, "metrics"))
        except (OSError, ValueError) as err:
            results.append(checks.Check(f"{job.name} metrics", False, str(err)))
            metrics[job.name] = {}
    gcpo = "adv_estimator=gcpo" in (ROOT / "scripts" / options.launcher).read_text(encoding="utf-8")
    first = list(range(1, saved_step + 1))
    results += [
        checks.Check(f"train: {c.name}", c.ok, c.detail)
        for c in checks.check_metrics(metrics["train"], first, gcpo=gcpo)
    ]
    results.append(checks.check_checkpoint_ranks(paths.checkpoints, saved_step, options.nodes))
    placement = _read_json(paths.job_file("train", "actors")) or {}
    results += checks.check_actor_placement(placement.get("peak", {}), ips, placement.get("last_error", ""))
    if train.credit_fault is not None or options.kill_credit_actor_after is not None:
        results += checks.check_fault(
            "credit",
            train.credit_fault,
            metrics["train"],
            options.steps if not crashed else saved_step,
            gcpo=gcpo,
            log=paths.job_file("train", "log"),
        )
    if resume is None:
        results.append(checks.Check("resume job", False, "not submitted: the first job failed"))
    else:
        results.append(checks.check_job("resume", resume.state, resume.exit_code))
        resumed = list(range(saved_step + 1, last_step + 1))
        results += [
            checks.Check(f"resume: {c.name}", c.ok, c.detail)
            for c in checks.check_metrics(metrics["resume"], resumed, gcpo=gcpo)
        ]
        results.append(
            checks.Check(
                "resumed from the last checkpoint",
                sorted(metrics["resume"]) == resumed,
                f"checkpoint at step {saved_step}; expected steps {resumed}, logged {sorted(metrics['resume'])}",
            )
        )
        results.append(checks.check_checkpoint_ranks(paths.checkpoints, last_step, options.nodes))
        results.append(checks.check_clean_log(paths.job_file("resume", "log"), markers=checks.UNCLEAN_JOB_MARKERS))
        table_groups = checks.run_config_value(paths.checkpoints, "algorithm.gcpo.dump.table_groups") if gcpo else 0
        results += checks.check_wandb_run(
            paths.wandb("resume"),
            metrics["resume"],
            gcpo=gcpo,
            dump_dir=paths.dumps,
            table_groups=int(table_groups or 0),
            label="resume: W&B",
        )
    if not crashed and options.kill_credit_actor_after is None:
        results.append(checks.check_clean_log(paths.job_file("train", "log"), markers=checks.UNCLEAN_JOB_MARKERS))
    if gcpo:
        results += checks.check_credit_signal(paths.dumps, range(1, last_step + 1))
        every = {**metrics.get("train", {}), **metrics.get("resume", {})}
        results.append(checks.check_metric_glossary(every))
        results.append(
            checks.check_all_correct_push(
                every, checks.run_config_value(paths.checkpoints, "algorithm.gcpo.credit.all_correct_scale")
            )
        )
    return results


def _name_nodes(paths: Paths, names: dict[str, str]) -> None:
    """Add the node names to each job's placement record (it has Ray's node addresses)."""
    for path in paths.run.glob("actors_*.json"):
        record = _read_json(path)
        if record is not None:
            record["nodes"] = names
            path.write_text(json.dumps(record, indent=1), encoding="utf-8")


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def report_and_save(
    paths: Paths, options: Options, jobs: list[JobRecord], results: list[checks.Check], total_s: float
) -> int:
    ok = all(r.ok for r in results)
    metrics = {job.name: _safe_metrics(paths.job_file(job.name, "metrics")) for job in jobs}
    memory = {job.name: m for job in jobs if (m := _read_json(paths.job_file(job.name, "memory"))) is not None}
    placement = _read_json(paths.job_file("train", "actors")) or {}
    print(f"\n## Cluster smoke: {options.nodes} nodes, {options.launcher}\n")
    print("\n".join(r.line() for r in results))
    print("\nJobs:\n")
    print(
        report.job_table(
            [
                (job.name, job.job_id, job.state, job.exit_code, job.wall_s, metrics[job.name], job.attempts)
                for job in jobs
            ]
        )
    )
    if placement.get("peak"):
        names = {address: name for address, name in (placement.get("nodes") or {}).items()}
        by_name = {role: {names.get(ip, ip): n for ip, n in by_ip.items()} for role, by_ip in placement["peak"].items()}
        print("\nRay actors per node (most alive at once, Ray's state API):\n")
        print(report.placement_table(by_name))
    if memory:
        print("\nPeak memory (PSS, every node's processes of the job) per kind of process (GiB):\n")
        print(report.host_memory_table(memory))
    node_loss = next((job for job in jobs if job.node_kill is not None), None)
    if node_loss is not None:
        print(
            f"\nNode loss: {node_loss.node_kill['node']} crashed after step {node_loss.node_kill['after_step']}; "
            f"the job ended {node_loss.ended - node_loss.node_kill['time']:.1f} s later ({node_loss.state})"
        )
    print(f"\ncluster smoke: {'PASSED' if ok else 'FAILED'} in {total_s / 60:.1f} min")
    summary = {
        "ok": ok,
        "nodes": options.nodes,
        "launcher": options.launcher,
        "total_s": round(total_s, 1),
        "checks": [asdict(r) for r in results],
        "jobs": [asdict(job) | {"wall_s": job.wall_s} for job in jobs],
        "step_time_s": {job.name: report.step_times(metrics[job.name]) for job in jobs},
        "host_memory": memory,
        "placement": placement.get("peak", {}),
        "node_loss_exit_s": round(node_loss.ended - node_loss.node_kill["time"], 1) if node_loss else None,
    }
    (paths.run / "summary.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    return 0 if ok else 1


def _safe_metrics(path: Path) -> dict:
    try:
        return checks.read_metrics(path)
    except (OSError, ValueError):
        return {}
