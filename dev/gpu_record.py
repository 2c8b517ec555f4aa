#!/usr/bin/env python3
"""The GPU record (docs/benchmarks.md, "One-GPU smoke") on a lent GPU: the box, then the chosen smoke runs in order,
each with the time the record has left, everything written to one folder and packed for the trip back.

    python dev/gpu_record.py run --dry-run --out /tmp/record box gcpo-0.6b   # here first: plan and rehearse
    # on the GPU box: detached, so that one trainer may outlast a 10-minute command; then wait in each call
    setsid nohup python dev/gpu_record.py run --out /tmp/record --budget 760 gcpo-0.6b box \
        > /tmp/record.log 2>&1 < /dev/null &
    python dev/gpu_record.py wait /tmp/record --copy-to "$OUT" --wait-s 560    # exit 3: still running

A lent GPU gives a session 15 minutes of device time and one command at most 10, and a trainer takes about 4
minutes to start there. The steps are named and run in the order given; each starts only while the record has the
time it needs for a useful result (``useful_s``: through a steady-state step, or the tiny smoke's first run), runs
with the time that is left, and a run cut short is reported from the steps it logged. After each step the folder
holds ``record.md`` (each step's status, wall time, the smoke's report; the box; GCPO beside GRPO where both ran)
and ``record.tar.gz`` (each step's run folder without checkpoints, model or Ray's files, and its log): the device
brings back at most 8 files from ``$OUT``, so ``wait`` copies those two and the run's log. Unpacked, ``python -m
tests.special_e2e.smoke compare --gcpo A/gcpo-0.6b --grpo B/grpo-0.6b`` pairs the runs of two windows.

``run --dry-run`` (the CPU rehearsal): the box step for real (nvidia-smi is absent here), the plan against the budget
by each step's estimate, and each smoke step's own ``--dry-run`` (the policy and data built, the run's config composed
and validated on ``--device gpu``), so a mistake is found before device time is spent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
# scripts/ is not a package (the offline bundle's reader is there); the smoke's harness (tests/special_e2e) is
# imported from this checkout
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]
from offline_bundle import read_freeze  # noqa: E402

from tests.special_e2e.smoke.checks import read_metrics  # noqa: E402
from tests.special_e2e.smoke.run import ATTENTION_OVERRIDES  # noqa: E402

# CUDA graphs in vLLM, as a user's run has them (the launchers leave enforce_eager at verl's false); the smoke's own
# default is eager, for a quick start. The FSDP actor's attention is the smoke's SMOKE_ATTN (auto: flash-attn's
# varlen kernels with padding removal where flash-attn is installed, else SDPA on padded batches).
USER_STACK = ("actor_rollout_ref.rollout.enforce_eager=false",)
# vLLM's own executor choice for one GPU (verl asks for "mp": one engine-core process and one worker process);
# engine_kwargs.vllm goes to vLLM after verl's own arguments, so it replaces verl's choice
UNI_EXECUTOR = ("+actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend=uni",)
# modules whose import time a worker pays once per process (the FSDP worker's, then vLLM's server)
IMPORTTIME_MODULES = ("verl.workers.engine_workers", "vllm.entrypoints.openai.api_server")
# files of a smoke run folder that stay on the box: checkpoints, the rollouts' dumps, Ray's folder
LEFT_ON_BOX = ("ckpt", "rollouts", "ray")
# a file larger than this comes back as its last part (vLLM's logs): the device brings back 16 MiB a file
MAX_FILE_BYTES = 2 * 1024 * 1024
# the record's files: what the device brings back (at most 8 files), and the mark of a run that has ended
RECORD, ARCHIVE, DONE = "record.md", "record.tar.gz", "done"
# what the smoke prints when it stopped a trainer run at SMOKE_RUN_TIMEOUT (tests/special_e2e/smoke/run.py)
SMOKE_TIMED_OUT = "did not finish in SMOKE_RUN_TIMEOUT"
# seconds between asking a step to stop (SIGTERM: the smoke stops its trainer and keeps its files) and killing it
STOP_GRACE_S = 30
# a rehearsal step's bound (it builds the shape's policy on the CPU: about a minute for qwen3-1.7b)
REHEARSAL_BOUND_S = 1200


@dataclass(frozen=True)
class Step:
    """One step of the record.

    Attributes:
        name: how the command line names it (also its folder under OUT).
        items: which of the record's items it serves (docs/benchmarks.md).
        estimate_s: device seconds it takes (from the H100 record: the comment above :data:`STEPS`).
        useful_s: the least time that still gives a result (through step 2 of a real shape; the tiny smoke's
            first run); the step starts only with at least this much left.
        smoke: the smoke's options (``python -m tests.special_e2e.smoke run --device gpu ...``); () for the box and
            a check.
        overrides: Hydra overrides after the smoke's own.
        run_dir: the smoke run's folder under SMOKE_DIR (shape/estimator).
        check: a module that checks something on this GPU (``python -m``; a rehearsal only imports it).
    """

    name: str
    items: str
    estimate_s: int
    useful_s: int
    smoke: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    run_dir: str = ""
    check: str = ""


def _shape_step(estimator: str, shape: str, estimate_s: int, useful_s: int, items: str) -> Step:
    return Step(
        f"{estimator}-{shape.removeprefix('qwen3-')}",
        items,
        estimate_s,
        useful_s,
        ("--shape", shape, "--estimator", estimator, "--steps", "3"),
        USER_STACK,
        f"{shape}/{estimator}",
    )


# Estimates from the H100 record (docs/benchmarks.md, "One-GPU smoke"): a trainer reaches its training loop at about
# 170-200 s; a qwen3-0.6b step took 162 s eager with SDPA (step 1; later steps about 130 s are assumed), so 3 steps
# take about 610 s and step 2 ends near 480 s. qwen3-1.7b: 3.6x the parameters and 1.5x the tokens, about 600 s a
# step at the same MFU, so it fits no 10-minute call unless the step gets faster (flash-attn-4, CUDA graphs). The
# tiny smoke's run took 243 s, two of them and the checks about 520 s.
STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        Step("box", "4", 60, 20),
        # whether flash-attn-4 trains here, before a run is spent on it (SMOKE_ATTN=flash_attention_4)
        Step("fa4", "2", 90, 60, check="tests.special_e2e.smoke.fa4_check"),
        _shape_step("gcpo", "qwen3-0.6b", 610, 480, "1, 2"),
        _shape_step("grpo", "qwen3-0.6b", 600, 470, "1, 2"),
        _shape_step("gcpo", "qwen3-1.7b", 2000, 1400, "3"),
        _shape_step("grpo", "qwen3-1.7b", 2000, 1400, "3"),
        # the tiny smoke as a user's first check runs it: GCPO, a checkpoint, the resumed run, the checks
        Step("tiny", "4", 520, 260, ("--estimator", "gcpo"), (), "gcpo"),
        Step("tiny-uni", "4", 260, 230, ("--estimator", "gcpo", "--no-resume"), UNI_EXECUTOR, "gcpo"),
    )
}


@dataclass
class Outcome:
    """How a step ended: PASS, FAIL, TIMEOUT (stopped at the call's budget), SKIP (not enough time left)."""

    step: str
    status: str
    wall_s: float = 0.0
    note: str = ""
    lines: list[str] = field(default_factory=list)


class UsageError(Exception):
    """A bad option: one line, exit status 2, before anything runs."""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python dev/gpu_record.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="the steps, in order",
        epilog="steps: "
        + "; ".join(
            f"{s.name} (item {s.items}, ~{s.estimate_s} s, useful from {s.useful_s} s)" for s in STEPS.values()
        ),
    )
    run.add_argument("steps", nargs="+", metavar="STEP", help="the steps to run, in this order")
    run.add_argument("--out", type=Path, required=True, help="the record's folder")
    run.add_argument("--budget", type=float, default=540.0, help="seconds the record may take in all (540)")
    run.add_argument("--reserve", type=float, default=20.0, help="seconds kept for writing the record (20)")
    run.add_argument("--dry-run", action="store_true", help="the CPU rehearsal: plan, box, each smoke's --dry-run")
    run.add_argument("--eager", action="store_true", help="vLLM eager for the real shapes (no CUDA graphs)")
    run.add_argument(
        "--device",
        choices=["gpu", "cpu"],
        default="gpu",
        help="the smoke's device (cpu: a real rehearsal here, in the CPU smoke's environment: scripts/cpu_env/enter.sh)",
    )
    run.add_argument(
        "--attention",
        choices=["auto", *ATTENTION_OVERRIDES],
        help="the FSDP actor's attention (the smoke's SMOKE_ATTN; default: the environment's, else auto)",
    )
    run.add_argument("--expect-freeze", type=Path, help="the pip freeze the bundle was built for: differences")
    run.add_argument("--smoke-dir", type=Path, help="the smoke's SMOKE_DIR (default: a fresh one under TMPDIR)")
    run.add_argument("--python", default=sys.executable, help="the Python of the smoke and the box's checks")
    wait = commands.add_parser("wait", help="wait for a detached run, then copy its record (exit 3: still running)")
    wait.add_argument("record", type=Path, help="the run's --out folder")
    wait.add_argument("--copy-to", type=Path, required=True, help="where the record's files go ($OUT)")
    wait.add_argument("--wait-s", type=float, default=560.0, help="the longest wait (560)")
    wait.add_argument("--log", type=Path, help="the detached run's own output, copied too")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        raise UsageError("see the usage above") if stop.code else stop
    if args.command == "wait":
        if not args.wait_s >= 0:
            raise UsageError(f"--wait-s {args.wait_s:g} must be >= 0")
        return args
    unknown = [name for name in args.steps if name not in STEPS]
    if unknown:
        raise UsageError(f"unknown step(s) {', '.join(unknown)}; known: {', '.join(STEPS)}")
    if len(set(args.steps)) != len(args.steps):
        raise UsageError(f"a step named twice: {' '.join(args.steps)}")
    if not 0 < args.reserve < args.budget:
        raise UsageError(f"--reserve {args.reserve:g} must be positive and below --budget {args.budget:g}")
    if args.expect_freeze is not None and not args.expect_freeze.is_file():
        raise UsageError(f"--expect-freeze {args.expect_freeze}: no such file")
    return args


def plan_lines(steps: Sequence[Step], budget_s: float, reserve_s: float) -> list[str]:
    """The plan by estimates: where each step would start and end, and which would not start."""
    lines, clock = [], 0.0
    for step in steps:
        left = budget_s - reserve_s - clock
        if left < step.useful_s:
            lines.append(f"plan: {step.name}: would be skipped ({left:.0f} s left by then, needs {step.useful_s})")
            continue
        end = clock + min(step.estimate_s, left)
        cut = "" if step.estimate_s <= left else f", cut at the budget ({step.estimate_s} s estimated)"
        lines.append(f"plan: {step.name} (item {step.items}): {clock:.0f} s to {end:.0f} s{cut}")
        clock = end
    return lines


def useful_seconds(step: Step, outcomes: Sequence[Outcome]) -> float:
    """The least time ``step`` needs for a useful result: its estimate's, or, where its twin (the other estimator at
    the same shape, the same run but for the advantage) passed in this record, the twin's measured wall scaled the
    same way. The estimates are the H100 record's (eager vLLM, SDPA); a faster stack shows in the twin's wall."""
    estimator, _, shape = step.name.partition("-")
    twin = {"gcpo": "grpo", "grpo": "gcpo"}.get(estimator)
    if twin is None or not shape:
        return float(step.useful_s)
    walls = [o.wall_s for o in outcomes if o.step == f"{twin}-{shape}" and o.status == "PASS"]
    if not walls:
        return float(step.useful_s)
    return min(float(step.useful_s), walls[-1] * step.useful_s / step.estimate_s)


def smoke_command(step: Step, args: argparse.Namespace) -> list[str]:
    """The smoke's command line for ``step`` (its --dry-run in a rehearsal)."""
    overrides = [o for o in step.overrides if not (args.eager and o in USER_STACK)]
    dry = ["--dry-run"] if args.dry_run else []
    smoke = [args.python, "-m", "tests.special_e2e.smoke", "run", "--device", args.device]
    return [*smoke, *dry, *step.smoke, *overrides]


def run_bounded(
    command: Sequence[str], log: Path, timeout_s: float, env: dict[str, str]
) -> tuple[Optional[int], float]:
    """Run ``command`` in its own process group with its output in ``log``; past ``timeout_s`` it is asked to stop
    (SIGTERM), then killed. Returns (exit status, None when it was stopped; wall seconds)."""
    start = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True
        )
        try:
            return proc.wait(timeout=max(timeout_s, 1.0)), time.monotonic() - start
        except subprocess.TimeoutExpired:
            for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
                except ProcessLookupError:
                    break
            return None, time.monotonic() - start


def copy_run(run_dir: Path, dest: Path) -> None:
    """The smoke run folder's files, without what stays on the box; a large file as its last MAX_FILE_BYTES."""
    if not run_dir.is_dir():
        return
    for path in sorted(run_dir.rglob("*")):
        relative = path.relative_to(run_dir)
        if not path.is_file() or relative.parts[0] in LEFT_ON_BOX:
            continue
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        cap_file(target)


def cap_file(path: Path) -> None:
    """Keep a file over MAX_FILE_BYTES as its last MAX_FILE_BYTES, saying how much was left out."""
    size = path.stat().st_size if path.is_file() else 0
    if size <= MAX_FILE_BYTES:
        return
    with path.open("rb") as source:
        source.seek(size - MAX_FILE_BYTES)
        tail = source.read()
    path.write_bytes(f"[first {size - MAX_FILE_BYTES} bytes left out]\n".encode() + tail)


def verdict_lines(log: Path) -> list[str]:
    """The smoke's own lines: what it runs, each ``[FAIL]`` of a run, and its end (a rehearsal's: the dry run's)."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    starts = ("smoke: ", "[FAIL]", "smoke FAILED", "# dry run")
    return [line for line in text.splitlines() if line.startswith(starts)]


def report_section(log: Path) -> list[str]:
    """The report the smoke's checks print (from ``## Smoke run`` to its PASSED/FAILED line), or none."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines() if log.is_file() else []
    starts = [i for i, line in enumerate(lines) if line.startswith("## Smoke run")]
    if not starts:
        return []
    section = lines[starts[-1] :]
    ends = [i for i, line in enumerate(section) if re.match(r"smoke \w+: (PASSED|FAILED)$", line)]
    return section[: ends[0] + 1] if ends else section


def report_cut_run(step: Step, dest: Path, python: str, env: dict[str, str]) -> tuple[list[str], int]:
    """The smoke's checks and report on the steps a run logged before it was stopped (or failed): its tables and
    ``summary.json`` in ``dest``, as for a finished run (the checks of the steps it did not reach fail). Returns the
    report's lines and how many steps were logged."""
    metrics = dest / "metrics_run1.jsonl"
    if not metrics.is_file():
        return [], 0
    lines = metrics.read_text(encoding="utf-8", errors="replace").splitlines()
    whole = [line for line in lines if _is_record(line)]
    if len(whole) < len([line for line in lines if line.strip()]):  # a record cut off as the run was stopped
        metrics.write_text("".join(f"{line}\n" for line in whole), encoding="utf-8")
    logged = len(read_metrics(metrics))
    if not logged:
        return [], 0
    estimator = step.smoke[step.smoke.index("--estimator") + 1]
    command = [python, "-m", "tests.special_e2e.smoke", "check", "--run-dir", str(dest), "--estimator", estimator]
    command += ["--steps", str(logged), "--resumed-steps", "0"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    return done.stdout.strip().splitlines() or done.stderr.strip().splitlines()[-5:], logged


def _is_record(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def box_step(args: argparse.Namespace, dest: Path, env: dict[str, str]) -> Outcome:
    """The box: the GPU (nvidia-smi), Python, torch and its CUDA, ``pip freeze`` (and what differs from the freeze
    the bundle was built for), and each worker module's import time."""
    start = time.monotonic()
    lines = []

    def capture(
        name: str, command: Sequence[str], timeout_s: float = 120.0, environ: Optional[dict[str, str]] = None
    ) -> tuple[Optional[int], str]:
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, cwd=ROOT, env=environ or env, timeout=timeout_s
            )
            status, text = done.returncode, done.stdout + done.stderr
        except (OSError, subprocess.TimeoutExpired) as error:
            status, text = None, f"{' '.join(command)}: {error}\n"
        (dest / name).write_text(text, encoding="utf-8")
        return status, text

    if shutil.which("nvidia-smi", path=env.get("PATH")):
        _, gpu = capture(
            "nvidia-smi.txt", ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv"]
        )
        lines.append("GPU: " + " | ".join(gpu.strip().splitlines()[1:]))
    else:
        lines.append("GPU: no nvidia-smi on this machine")
    probe = "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)"
    versions = capture("versions.txt", [args.python, "-c", probe])[1].split()
    lines.append("Python {}, torch {} (CUDA {})".format(*versions[:3]) if len(versions) >= 3 else "versions: ?")
    # the box's own distributions: with the bundle on PYTHONPATH, pip lists the bundle's in its place (as
    # `name @ file:///...`, no version), and the comparison would call the box's versions absent
    freeze = dest / "pip-freeze.txt"
    box_only = {key: value for key, value in env.items() if key != "PYTHONPATH"}
    capture(freeze.name, [args.python, "-m", "pip", "freeze", "--all"], environ=box_only)
    if args.expect_freeze is not None:
        lines += freeze_lines(read_freeze(freeze), read_freeze(args.expect_freeze), args.expect_freeze.name)
    for module in IMPORTTIME_MODULES:
        status, text = capture(
            f"importtime-{module}.txt", [args.python, "-X", "importtime", "-c", f"import {module}"], 300
        )
        took = _import_seconds(text, module) if status == 0 else None
        last = (
            [line for line in text.splitlines() if line.strip() and not line.startswith("import time:")]
            or ["no output"]
        )[-1][:160]
        lines.append(f"import {module}: " + (took or f"did not import ({last})"))
    return Outcome("box", "PASS", time.monotonic() - start, lines=lines)


def _import_seconds(importtime: str, module: str) -> Optional[str]:
    """The cumulative import time of ``module`` from ``-X importtime``'s output (None where it has no line)."""
    for line in reversed(importtime.splitlines()):
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module and parts[1].isdigit():
            return f"{int(parts[1]) / 1e6:.2f} s"
    return None


def freeze_lines(have: dict[str, str], expected: dict[str, str], name: str) -> list[str]:
    """What the box's ``pip freeze`` changes from the one the bundle was built for: each expected distribution at
    another version or absent (the bundle's resolution assumed it), then how many the box has beyond it."""
    moved = sorted(n for n in expected if have.get(n) != expected[n])
    extra = sorted(set(have) - set(expected))
    lines = [f"pip freeze against {name}: {len(moved)} of its {len(expected)} distributions differ"]
    lines += [f"  {n} {expected[n]} -> {have.get(n, '(absent)')}" for n in moved]
    if extra:
        lines.append(f"  {len(extra)} more on the box: " + ", ".join(f"{n}=={have[n]}" for n in extra[:30]))
    return lines


def record(outcomes: Sequence[Outcome], args: argparse.Namespace, plan: Sequence[str], compare: Sequence[str]) -> str:
    """``OUT/record.md``."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = os.environ.get("GCPO_COMMIT") or _git_head()
    kind = "dry run (CPU rehearsal)" if args.dry_run else "run"
    attention = args.attention or os.environ.get("SMOKE_ATTN") or "auto"
    lines = [f"# GPU record: {kind}, {when}, commit {commit}, budget {args.budget:g} s, attention {attention}", ""]
    lines += [f"- vLLM: {'eager' if args.eager else 'CUDA graphs'} at the real shapes", ""]
    lines += [f"- {line}" for line in plan] + [""]
    lines += ["| step | status | wall (s) | note |", "|---|---|---:|---|"]
    lines += [f"| {o.step} | {o.status} | {o.wall_s:.1f} | {o.note} |" for o in outcomes]
    for outcome in outcomes:
        if outcome.lines:
            lines += ["", f"## {outcome.step}", "", *[f"    {line}" for line in outcome.lines]]
    if compare:
        lines += ["", *compare]
    return "\n".join(lines) + "\n"


def _git_head() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
        return done.stdout.strip() or "unknown (no git here: set GCPO_COMMIT)"
    except OSError:
        return "unknown (no git here: set GCPO_COMMIT)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as error:
        print(f"gpu_record: error: {error}", file=sys.stderr)
        return 2
    return run_record(args) if args.command == "run" else wait_for(args)


def run_record(args: argparse.Namespace, clock: Callable[[], float] = time.monotonic) -> int:
    """The steps in order, the record written after each; ``DONE`` holds the exit status at the end."""
    steps = [STEPS[name] for name in args.steps]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / DONE).unlink(missing_ok=True)
    smoke_dir = args.smoke_dir or Path(os.environ.get("TMPDIR") or "/tmp") / f"gcpo-record-{os.getpid()}"
    # the harness (tests/special_e2e) from this checkout, first on the path, as scripts/smoke_1gpu.sh puts it
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "SMOKE_DIR": str(smoke_dir), "PYTHONPATH": path}
    if args.attention:
        env["SMOKE_ATTN"] = args.attention
    plan = plan_lines(steps, args.budget, args.reserve)
    for line in plan:
        print(f"gpu_record: {line}", flush=True)
    started, outcomes = clock(), []
    for step in steps:
        dest = args.out / step.name
        dest.mkdir(parents=True, exist_ok=True)
        left = args.budget - args.reserve - (clock() - started)
        useful_s = useful_seconds(step, outcomes)
        if useful_s < step.useful_s:
            print(f"gpu_record: {step.name}: useful from {useful_s:.0f} s, by its twin's measured wall", flush=True)
        if not args.dry_run and left < useful_s:
            outcomes.append(Outcome(step.name, "SKIP", note=f"{left:.0f} s left, needs {useful_s:.0f}"))
        elif step.check:
            outcomes.append(check_step(step, args, dest, env, left))
            if step.name == "fa4" and outcomes[-1].status != "PASS" and env.get("SMOKE_ATTN") == "flash_attention_4":
                # a run on kernels that just failed would be spent for nothing: the runs after it take the default
                env["SMOKE_ATTN"] = "auto"
                outcomes[-1].note = (outcomes[-1].note + "; the runs after it use SMOKE_ATTN=auto").lstrip("; ")
        elif not step.smoke:
            outcomes.append(box_step(args, dest, env))
        else:
            outcomes.append(smoke_step(step, args, dest, smoke_dir, env, left))
        print(f"gpu_record: {step.name}: {outcomes[-1].status} {outcomes[-1].note}".rstrip(), flush=True)
        write_record(outcomes, args, plan, compare=[])
    if args.smoke_dir is None:  # the shapes' policies (GBs): only the record is kept
        shutil.rmtree(smoke_dir, ignore_errors=True)
    write_record(outcomes, args, plan, _compare(args, env))
    print(f"gpu_record: {args.out / RECORD}", flush=True)
    status = 1 if any(o.status in ("FAIL", "TIMEOUT") for o in outcomes) else 0
    (args.out / DONE).write_text(f"{status}\n", encoding="utf-8")
    return status


def smoke_step(
    step: Step, args: argparse.Namespace, dest: Path, smoke_dir: Path, env: dict[str, str], left: float
) -> Outcome:
    """One smoke run with ``left`` seconds (a rehearsal: its --dry-run), its run folder brought into ``dest``."""
    # the smoke stops its own trainer first (and keeps its files); the record's bound is the hard one. A rehearsal
    # runs no trainer: its bound is only against a hang.
    bound = REHEARSAL_BOUND_S if args.dry_run else left
    run_timeout = max(int(bound - STOP_GRACE_S - 10), 60)
    log = dest / "smoke.log"
    status, wall = run_bounded(smoke_command(step, args), log, bound, {**env, "SMOKE_RUN_TIMEOUT": str(run_timeout)})
    copy_run(smoke_dir / step.run_dir, dest)
    cap_file(log)
    # stopped at the budget: by this script, or by the smoke itself at SMOKE_RUN_TIMEOUT (its own, earlier bound)
    stopped = status is None or SMOKE_TIMED_OUT in log.read_text(encoding="utf-8", errors="replace")
    name = "PASS" if status == 0 else "TIMEOUT" if stopped else "FAIL"
    note = "" if status == 0 or stopped else f"exit {status}"
    report = report_section(log)
    if status != 0 and not args.dry_run:  # the steps it logged, reported as a finished run's
        report, logged = report_cut_run(step, dest, args.python, env)
        note = f"{note}; {logged} step(s) logged".lstrip("; ")
    (dest / "report.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    return Outcome(step.name, name, wall, note, [*verdict_lines(log), "", *report])


def check_step(step: Step, args: argparse.Namespace, dest: Path, env: dict[str, str], left: float) -> Outcome:
    """A check module on this GPU with ``left`` seconds; a rehearsal imports it only (it needs the GPU)."""
    log = dest / "check.log"
    command = [args.python, *(["-c", f"import {step.check}"] if args.dry_run else ["-m", step.check])]
    status, wall = run_bounded(command, log, REHEARSAL_BOUND_S if args.dry_run else left, env)
    cap_file(log)
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    name = "PASS" if status == 0 else "TIMEOUT" if status is None else "FAIL"
    return Outcome(step.name, name, wall, "" if status in (0, None) else f"exit {status}", lines[-40:])


def write_record(outcomes: Sequence[Outcome], args: argparse.Namespace, plan: Sequence[str], compare: Sequence[str]):
    """``record.md`` and ``record.tar.gz`` (each step's folder) as they stand, each replaced whole (a reader never
    sees half of one)."""
    text = record(outcomes, args, plan, compare)
    partial = args.out / f".{RECORD}.partial"
    partial.write_text(text, encoding="utf-8")
    partial.replace(args.out / RECORD)
    partial = args.out / f".{ARCHIVE}.partial"
    with tarfile.open(partial, "w:gz") as archive:
        archive.add(args.out / RECORD, arcname=f"record/{RECORD}")
        for outcome in outcomes:
            archive.add(args.out / outcome.step, arcname=f"record/{outcome.step}")
    partial.replace(args.out / ARCHIVE)


def wait_for(args: argparse.Namespace, poll_s: float = 5.0) -> int:
    """Wait up to ``--wait-s`` for a detached run to end, then copy its record (as it stands) to ``--copy-to`` and
    print it. Returns the run's exit status, or 3 while it is still running (call again)."""
    deadline = time.monotonic() + args.wait_s
    while not (args.record / DONE).is_file() and time.monotonic() < deadline:
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
    args.copy_to.mkdir(parents=True, exist_ok=True)
    copied = [p for p in (args.record / RECORD, args.record / ARCHIVE, args.log) if p is not None and p.is_file()]
    for path in copied:
        shutil.copyfile(path, args.copy_to / path.name)
    if (args.record / RECORD).is_file():
        print((args.record / RECORD).read_text(encoding="utf-8"), flush=True)
    if not (args.record / DONE).is_file():
        print(f"gpu_record: still running after {args.wait_s:g} s: wait again", flush=True)
        return 3
    return int((args.record / DONE).read_text(encoding="utf-8").strip() or 1)


def _compare(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    """GCPO's steps beside GRPO's for each shape whose two runs are both in OUT."""
    out = []
    for shape in ("0.6b", "1.7b"):
        gcpo, grpo = args.out / f"gcpo-{shape}", args.out / f"grpo-{shape}"
        if (gcpo / "summary.json").is_file() and (grpo / "summary.json").is_file():
            command = [
                args.python,
                "-m",
                "tests.special_e2e.smoke",
                "compare",
                "--gcpo",
                str(gcpo),
                "--grpo",
                str(grpo),
            ]
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
            out += [f"## GCPO beside GRPO, qwen3-{shape}", done.stdout.strip() or done.stderr.strip()]
    return out


if __name__ == "__main__":
    sys.exit(main())
