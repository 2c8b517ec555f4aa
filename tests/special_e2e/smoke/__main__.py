"""Commands of the smoke harness: the smoke itself (``run``, what ``scripts/smoke_1gpu.sh`` and
``scripts/smoke_cpu.sh`` start) and the steps and samplers it and the cluster smoke use.

    python -m tests.special_e2e.smoke run --device gpu|cpu [--compare] [--steps N] ... [key=value ...]  # the smoke
    python -m tests.special_e2e.smoke build --out DIR         # DIR/model (tiny Qwen3 + tokenizer), DIR/data/*.parquet
    python -m tests.special_e2e.smoke check --run-dir DIR --estimator gcpo --steps 2 [--fault credit|reward ...]
    python -m tests.special_e2e.smoke compare --gcpo DIR --grpo DIR
    python -m tests.special_e2e.smoke gpu-memory --out FILE       # samples nvidia-smi until SIGTERM
    python -m tests.special_e2e.smoke host-memory --out FILE --marker ID   # the run's processes' PSS until SIGTERM
    python -m tests.special_e2e.smoke fault --target credit --after-step 1 --marker ID --metrics FILE --out FILE
    python -m tests.special_e2e.smoke reap --marker ID             # stops every process of one run
    python -m tests.special_e2e.smoke describe-host                # CPU model, cores, memory (the CPU smoke's device)
    python -m tests.special_e2e.smoke cluster [--nodes 2] [--steps 2] [--kill-node-after S]  # smoke_cluster_cpu.sh
    python -m tests.special_e2e.smoke ray-actors --out FILE --address URL   # Ray actors per node until SIGTERM

A run directory holds what the two trainer runs (steps 1..S, then the resumed step S + 1) wrote:
``metrics_run{1,2}.jsonl`` (verl's file logger), ``ckpt/`` (checkpoints), ``gcpo_dumps/`` (credit dumps),
``log_run{1,2}.txt`` and ``wall_run{1,2}.txt`` (the smoke's), ``device.txt``, ``gpu_memory_run{1,2}.json`` on a
GPU (when ``nvidia-smi`` is there), ``host_memory_run{1,2}.json`` on the CPU, ``fault_<target>.json`` when a
fault was injected; ``check`` adds ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Optional, Sequence

from tests.special_e2e.smoke import checks, report
from tests.special_e2e.smoke.run import RunDir


def build(args) -> int:
    from dataclasses import replace

    from tests.special_e2e.smoke.data import write_smoke_data
    from tests.special_e2e.smoke.policy import build_policy
    from tests.special_e2e.smoke.shapes import SHAPES, parameter_count

    spec = replace(SHAPES[args.shape].spec, seed=args.seed)
    model_dir = build_policy(args.out / "model", spec)
    paths = write_smoke_data(args.out / "data", prompts=args.prompts)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    count = parameter_count(spec, int(config["vocab_size"]))
    print(
        f"{args.shape} Qwen3 policy (random weights, seed {args.seed}): {count:,} parameters "
        f"({spec.num_hidden_layers} layers, hidden {spec.hidden_size}, vocabulary {config['vocab_size']:,}): {model_dir}"
    )
    for split, path in paths.items():
        print(f"{split} data: {path}")
    return 0


def _read_json(path: Path) -> Optional[dict]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _read_float(path: Path) -> Optional[float]:
    try:
        return float(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def _startup_phases(run: RunDir, numbers: Sequence[int]) -> dict[str, list]:
    """Each run's start-up phases from its timed log (runs without one are left out)."""
    from tests.special_e2e.smoke.startup import read_timed_log, startup_phases

    return {f"run {n}": startup_phases(read_timed_log(run.timed_log(n))) for n in numbers if run.timed_log(n).is_file()}


def check(args) -> int:
    run = RunDir(args.run_dir)
    gcpo = args.estimator == "gcpo"
    results: list[checks.Check] = []
    runs = {}
    numbers = (1, 2) if args.resumed_steps else (1,)
    runs[2] = {}
    for number in numbers:
        path = run.metrics(number)
        try:
            runs[number] = checks.read_metrics(path)
        except (OSError, ValueError) as err:
            results.append(checks.Check(f"run {number} metrics", False, str(err)))
            runs[number] = {}
    first, last = args.steps, args.steps + args.resumed_steps
    both = {**runs[1], **runs[2]}
    results += checks.check_metrics(both, list(range(1, last + 1)), gcpo=gcpo, groups_per_step=args.groups_per_step)
    if gcpo:
        results.append(checks.check_metric_glossary(both))
        scale = checks.run_config_value(run.checkpoints, "algorithm.gcpo.credit.all_correct_scale")
        results.append(checks.check_all_correct_push(both, scale))
    mode = checks.run_config_value(run.checkpoints, "trainer.v1.trainer_mode")
    results.append(checks.check_trainer_mode(both, mode, gcpo))
    results += checks.check_resume(
        runs[1], runs[2], run.checkpoints, saved_step=first, resumed_steps=args.resumed_steps
    )
    if gcpo:
        results += checks.check_credit_dumps(run.dumps, range(1, last + 1))
    table_groups = checks.run_config_value(run.checkpoints, "algorithm.gcpo.dump.table_groups") if gcpo else 0
    for number in numbers:
        if run.wandb(number).is_dir():  # W&B offline beside the file logger (run.py)
            results += checks.check_wandb_run(
                run.wandb(number),
                runs[number],
                gcpo=gcpo,
                dump_dir=run.dumps,
                table_groups=int(table_groups or 0),
                label=f"run {number} W&B",
            )
    faults = {target: _read_json(run.fault(target)) for target in args.fault or ()}
    for target, record in faults.items():
        later = [
            int(other["after_step"])
            for other in faults.values()
            if other is not None and record is not None and int(other["after_step"]) > int(record["after_step"])
        ]
        results += checks.check_fault(
            target,
            record,
            runs[1],
            first,
            gcpo=gcpo,
            log=run.root / "log_run1.txt",
            next_fault_after=min(later) if later else None,
        )
    # a run with an injected fault prints the killed actor's error; the other must end without a traceback
    for number in numbers if not args.fault else numbers[1:]:
        if (run.root / f"log_run{number}.txt").is_file():
            results.append(checks.check_clean_log(run.root / f"log_run{number}.txt"))

    walls = [_read_float(run.wall(n)) for n in (1, 2)]
    startup = _startup_phases(run, numbers)
    memory = {f"run {n}": m for n in numbers if (m := _read_json(run.gpu_memory(n))) is not None}
    host_memory = {f"run {n}": m for n in numbers if (m := _read_json(run.host_memory(n))) is not None}
    device = run.device.read_text(encoding="utf-8").strip() if run.device.is_file() else "unknown (no nvidia-smi)"
    ok = all(r.ok for r in results)

    print(f"\n## Smoke run: {args.estimator}, device: {device}\n")
    print("\n".join(r.line() for r in results))
    print("\nWall time per run (start-up + shutdown = wall - sum of step times):\n")
    print(report.run_table({n: (walls[n - 1], runs[n]) for n in numbers}))
    if startup:
        print("\nStart-up phases (each line stamped as it arrived; a phase ends at its first marker line):\n")
        print(report.startup_table(startup))
    print("\nWall time per phase (s):\n")
    print(report.phase_table(both))
    if gcpo:
        print("\nGCPO's critical path: what the credit added to each step where GRPO would not wait:\n")
        print(report.overhead_table(both, warmup=[1, first + 1]))
    print("\nMetrics:\n")
    print(report.metrics_table(both))
    if memory:
        print("\nPeak GPU memory per process (nvidia-smi):\n")
        print(report.memory_table(memory))
    if host_memory:
        print("\nPeak memory (PSS) per kind of process, summed over its processes (GiB):\n")
        print(report.host_memory_table(host_memory))
    print(f"\nsmoke {args.estimator}: {'PASSED' if ok else 'FAILED'}")

    run.summary.write_text(
        json.dumps(
            {
                "estimator": args.estimator,
                "device": device,
                "ok": ok,
                "checks": [asdict(r) for r in results],
                "wall_s": walls,
                "step_time_s": report.step_times(both),
                # each process's first step pays for lazy initialisation: left out of steady-state means
                "warmup_steps": [1, first + 1],
                "overhead": report.overhead(both, warmup=[1, first + 1]) if gcpo else None,
                "metrics": both,
                "gpu_memory": memory,
                "host_memory": host_memory,
                "startup": {run_label: [asdict(p) for p in phases] for run_label, phases in startup.items()},
            },
            indent=1,
            default=str,
        ),
        encoding="utf-8",
    )
    return 0 if ok else 1


def check_launcher(args) -> int:
    root = Path(args.run_dir)
    launcher = Path(__file__).resolve().parents[3] / "scripts" / args.launcher
    text = launcher.read_text(encoding="utf-8") if launcher.is_file() else ""
    results = checks.check_launcher_run(
        root / "metrics_run1.jsonl",
        root / "log_run1.txt",
        root / "ckpt",
        steps=args.steps,
        gcpo="adv_estimator=gcpo" in text,
        copo="adv_estimator=copo" in text,
        dump_dir=root / "gcpo_dumps",
    )
    metrics = checks.read_metrics(root / "metrics_run1.jsonl") if (root / "metrics_run1.jsonl").is_file() else {}
    ok = all(r.ok for r in results)
    print(f"\n## Launcher smoke: {args.launcher}\n")
    print("\n".join(r.line() for r in results))
    startup = _startup_phases(RunDir(root), (1,))
    if startup:
        print("\nStart-up phases (each line stamped as it arrived; a phase ends at its first marker line):\n")
        print(report.startup_table(startup))
    if metrics:
        print("\nWall time per phase (s):\n")
        print(report.phase_table(metrics))
    print(f"\nlauncher smoke {args.launcher}: {'PASSED' if ok else 'FAILED'}")
    (root / "summary.json").write_text(
        json.dumps(
            {
                "launcher": args.launcher,
                "ok": ok,
                "checks": [asdict(r) for r in results],
                "wall_s": _read_float(root / "wall_run1.txt"),
                "step_time_s": report.step_times(metrics),
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    return 0 if ok else 1


def compare(args) -> int:
    summaries, metrics = {}, {}
    warmup: set[int] = set()
    for name, root in (("gcpo", args.gcpo), ("grpo", args.grpo)):
        summary = _read_json(RunDir(root).summary)
        if summary is None:
            print(f"error: {RunDir(root).summary} not found (run the {name} smoke first)", file=sys.stderr)
            return 2
        summaries[name] = {int(s): t for s, t in summary["step_time_s"].items()}
        metrics[name] = {int(s): m for s, m in summary.get("metrics", {}).items()}
        warmup |= set(summary.get("warmup_steps", []))
    print("\n## GCPO vs GRPO step time (same smoke, same device)\n")
    print(report.comparison_table(summaries["gcpo"], summaries["grpo"], sorted(warmup)))
    if metrics["gcpo"] and metrics["grpo"]:
        print("\nWhere the time goes (phases of the steady-state steps):\n")
        print(report.phase_comparison_table(metrics["gcpo"], metrics["grpo"], sorted(warmup)))
        share = report.share_of_grpo(metrics["gcpo"], summaries["grpo"], sorted(warmup))
        if share is not None:
            print(
                f"\nGCPO on the critical path: {share['added_s']:.4g} s a steady step (steps "
                f"{', '.join(map(str, share['gcpo_steps']))}), {100 * share['share']:.2f} % of GRPO's measured "
                f"steady step ({share['grpo_step_s']:.4g} s, steps {', '.join(map(str, share['grpo_steps']))})"
            )
    return 0


def gpu_memory(args) -> int:
    from tests.special_e2e.smoke.gpu_memory import sample_until_stopped

    sample_until_stopped(args.out, interval_s=args.interval, parent_pid=args.parent_pid)
    return 0


def host_memory(args) -> int:
    from tests.special_e2e.smoke.processes import sample_memory_until_stopped

    sample_memory_until_stopped(args.out, args.marker, interval_s=args.interval, parent_pid=args.parent_pid)
    return 0


def fault(args) -> int:
    from tests.special_e2e.smoke.processes import inject_fault

    record = inject_fault(args.target, args.marker, args.metrics, args.after_step, args.out, parent_pid=args.parent_pid)
    if record is not None:
        killed = ", ".join(f"{k['pid']} ({k['title'].split()[0]})" for k in record["killed"]) or "nothing found"
        print(f"smoke: after step {args.after_step}: SIGKILL {args.target}: {killed}", file=sys.stderr, flush=True)
    return 0


def reap(args) -> int:
    from tests.special_e2e.smoke.processes import reap as stop_run

    stopped = stop_run(args.marker)
    if stopped:
        print(f"smoke: stopped {len(stopped)} process(es) the run left behind", file=sys.stderr)
    return 0


def describe_host(args) -> int:
    import platform

    import psutil

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = psutil.virtual_memory().total / 1024**3
    print(f"CPU: {model}, {os.cpu_count()} logical cores, {memory_gib:.0f} GiB")
    return 0


def ray_actors(args) -> int:
    from tests.special_e2e.smoke.ray_actors import sample_until_stopped

    sample_until_stopped(args.out, args.address, interval_s=args.interval, parent_pid=args.parent_pid)
    return 0


def _shapes():
    from tests.special_e2e.smoke.shapes import SHAPES

    return SHAPES


def _step(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a step from 1, got {value!r}")
    return int(value)


def cluster(args) -> int:
    from tests.special_e2e.smoke.cluster import ClusterError
    from tests.special_e2e.smoke.cluster_run import Options, run

    if os.geteuid() != 0:
        print("error: the cluster smoke needs root (network namespaces, Slurm's and munge's daemons)", file=sys.stderr)
        return 2
    if args.nodes < 2:
        print(f"error: --nodes must be 2 or more, got {args.nodes}", file=sys.stderr)
        return 2
    for name in ("kill_node_after", "kill_credit_actor_after"):
        value = getattr(args, name)
        if value is not None and value >= args.steps:
            print(
                f"error: --{name.replace('_', '-')} must be a step from 1 to {args.steps - 1} (before the last of "
                f"--steps {args.steps}), got {value}",
                file=sys.stderr,
            )
            return 2
    work_dir = args.work_dir.resolve()
    launcher = Path(__file__).resolve().parents[3] / "scripts" / args.launcher
    if not launcher.is_file() or not launcher.name.startswith("run_"):
        print(f"error: --launcher must be one of scripts/run_*.sh, got {args.launcher!r}", file=sys.stderr)
        return 2
    options = Options(
        work_dir=work_dir,
        python=sys.executable,
        nodes=args.nodes,
        steps=args.steps,
        launcher=args.launcher,
        kill_node_after=args.kill_node_after,
        kill_credit_actor_after=args.kill_credit_actor_after,
        job_timeout_s=args.job_timeout,
        node_loss_bound_s=args.node_loss_bound,
        overrides=tuple(args.overrides),
        container=args.container_image if args.container else None,
    )
    if options.container is not None:
        if shutil.which("podman") is None:
            print("error: --container needs podman (scripts/smoke_cluster_cpu.sh installs it)", file=sys.stderr)
            return 2
        exists = subprocess.run(["podman", "image", "exists", options.container], capture_output=True, check=False)
        if exists.returncode != 0:
            print(
                f"error: --container: podman has no image {options.container} (build it: bash scripts/build_image.sh)",
                file=sys.stderr,
            )
            return 2
    try:
        return run(options)
    except ClusterError as err:
        print(f"error: cluster smoke: {err}", file=sys.stderr)
        return 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        # the smoke parses its own command line: its Hydra overrides stand anywhere among its options
        from tests.special_e2e.smoke.run import main as run_smoke

        return run_smoke(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m tests.special_e2e.smoke",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser(
        "run", add_help=False, help="the smoke: build, train, checkpoint, resume, check (run --help lists its options)"
    )

    p = commands.add_parser("build", help="write the tiny policy and the smoke data")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shape", choices=sorted(_shapes()), default="tiny", help="the policy's architecture")
    p.add_argument("--prompts", type=_step, default=None, help="prompts in the data (default: the 3 shipped)")
    p.set_defaults(func=build)

    p = commands.add_parser("check", help="check a finished smoke run and print its report")
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--estimator", choices=["gcpo", "grpo"], required=True)
    p.add_argument("--steps", type=int, required=True, help="steps of the first run (the saved step)")
    p.add_argument("--resumed-steps", type=int, default=1)
    p.add_argument("--groups-per-step", type=int, default=None, help="prompts per step (checks gcpo/groups)")
    p.add_argument(
        "--fault",
        action="append",
        choices=["credit", "reward"],
        help="a fault was injected in the first run: check that the run recovered from it",
    )
    p.set_defaults(func=check)

    p = commands.add_parser("check-launcher", help="check a launcher's short run (run --launcher)")
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--launcher", required=True, help="the launcher's file name, e.g. run_qwen3_4b_gcpo.sh")
    p.add_argument("--steps", type=int, required=True)
    p.set_defaults(func=check_launcher)

    p = commands.add_parser("compare", help="GCPO's step time next to GRPO's")
    p.add_argument("--gcpo", type=Path, required=True)
    p.add_argument("--grpo", type=Path, required=True)
    p.set_defaults(func=compare)

    p = commands.add_parser("gpu-memory", help="sample per-process GPU memory until SIGTERM")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--parent-pid", type=int, default=None, help="stop when this process is gone")
    p.set_defaults(func=gpu_memory)

    p = commands.add_parser("host-memory", help="sample the run's processes' memory (PSS) until SIGTERM")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--marker", required=True, help="the run's GCPO_SMOKE_MARKER")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between samples (a sample reads smaps)")
    p.add_argument("--parent-pid", type=int, default=None, help="stop when this process is gone")
    p.set_defaults(func=host_memory)

    p = commands.add_parser("fault", help="SIGKILL a credit actor or a reward worker once a step is logged")
    p.add_argument("--target", choices=sorted(["credit", "reward"]), required=True)
    p.add_argument("--after-step", type=int, required=True)
    p.add_argument("--marker", required=True, help="the run's GCPO_SMOKE_MARKER")
    p.add_argument("--metrics", type=Path, required=True, help="the run's file-logger JSONL")
    p.add_argument("--out", type=Path, required=True, help="where to record what was killed")
    p.add_argument("--parent-pid", type=int, default=None, help="stop when this process is gone")
    p.set_defaults(func=fault)

    p = commands.add_parser("reap", help="stop every process of one run (found by its marker)")
    p.add_argument("--marker", required=True)
    p.set_defaults(func=reap)

    p = commands.add_parser("describe-host", help="this machine's CPU and memory, one line")
    p.set_defaults(func=describe_host)

    p = commands.add_parser("ray-actors", help="sample a Ray cluster's actors per node until SIGTERM")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--address", required=True, help="the dashboard's address, e.g. http://127.0.0.1:8265")
    p.add_argument("--interval", type=float, default=10.0)
    p.add_argument("--parent-pid", type=int, default=None, help="stop when this process is gone")
    p.set_defaults(func=ray_actors)

    p = commands.add_parser(
        "cluster",
        help="docker/slurm_gcpo.sbatch end to end on a Slurm cluster of namespaces (root)",
        description="A real Slurm cluster of --nodes nodes made of Linux namespaces on this machine "
        "(tests/special_e2e/smoke/cluster.py), docker/slurm_gcpo.sbatch run on it with a launcher's "
        "config on the CPU, a resumed job, the checks, and everything removed again.",
    )
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--steps", type=_step, default=2, help="steps of the first job (the resumed job adds one)")
    p.add_argument(
        "--kill-node-after",
        type=_step,
        default=None,
        help="crash the last node once this step is logged (a checkpoint every step): the job must end "
        "with one line naming it, and the resubmitted job resume from that step's checkpoint",
    )
    p.add_argument(
        "--kill-credit-actor-after",
        type=_step,
        default=None,
        help="SIGKILL the credit actors once this step is logged (first job), as in the CPU smoke",
    )
    p.add_argument("--launcher", default="run_qwen3_4b_gcpo.sh")
    p.add_argument(
        "--container",
        action="store_true",
        help="run every step of the jobs in the CPU image through podman (CONTAINER_RUNTIME=podman): sbatch -> srun "
        "-> podman on each node -> Ray -> the image's launcher",
    )
    p.add_argument(
        "--container-image",
        default=os.environ.get("GCPO_CPU_IMAGE", "localhost/gcpo-verl-cpu:0.1.0"),
        help="the image of --container (GCPO_CPU_IMAGE; default localhost/gcpo-verl-cpu:0.1.0, from "
        "scripts/build_image.sh)",
    )
    p.add_argument(
        "--work-dir", type=Path, default=Path(os.environ.get("CLUSTER_SMOKE_DIR", "/var/tmp/gcpo-cluster-smoke"))
    )
    p.add_argument("--job-timeout", type=int, default=1500, help="seconds a job may take before it is cancelled")
    p.add_argument(
        "--node-loss-bound", type=int, default=300, help="seconds within which a job that lost a node must have ended"
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every job (they win)")
    p.set_defaults(func=cluster)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
