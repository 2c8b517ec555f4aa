"""Commands of the one-GPU smoke run (called by ``scripts/smoke_1gpu.sh``).

    python -m recipe.gcpo.smoke build --out DIR              # DIR/model (tiny Qwen3 + tokenizer), DIR/data/*.parquet
    python -m recipe.gcpo.smoke check --run-dir DIR --estimator gcpo --steps 2
    python -m recipe.gcpo.smoke compare --gcpo DIR --grpo DIR
    python -m recipe.gcpo.smoke gpu-memory --out FILE       # samples nvidia-smi until SIGTERM

A run directory holds what the two trainer runs (steps 1..S, then the resumed step S + 1) wrote:
``metrics_run{1,2}.jsonl`` (verl's file logger), ``ckpt/`` (checkpoints), ``gcpo_dumps/`` (credit dumps),
``log_run{1,2}.txt`` and ``wall_run{1,2}.txt`` (the script's), ``gpu_memory_run{1,2}.json`` and ``device.txt``
when ``nvidia-smi`` is there; ``check`` adds ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from recipe.gcpo.smoke import checks, report


@dataclass(frozen=True)
class RunDir:
    """Where one smoke run (one estimator) writes; the script passes these paths to the trainer."""

    root: Path

    def metrics(self, run: int) -> Path:
        return self.root / f"metrics_run{run}.jsonl"

    def wall(self, run: int) -> Path:
        return self.root / f"wall_run{run}.txt"

    def gpu_memory(self, run: int) -> Path:
        return self.root / f"gpu_memory_run{run}.json"

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


def build(args) -> int:
    from recipe.gcpo.smoke.data import write_smoke_data
    from recipe.gcpo.smoke.policy import TinyPolicySpec, build_policy

    model_dir = build_policy(args.out / "model", TinyPolicySpec(seed=args.seed))
    paths = write_smoke_data(args.out / "data")
    print(f"tiny Qwen3 policy (random weights, seed {args.seed}): {model_dir}")
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


def check(args) -> int:
    run = RunDir(args.run_dir)
    gcpo = args.estimator == "gcpo"
    results: list[checks.Check] = []
    runs = {}
    for number in (1, 2):
        path = run.metrics(number)
        try:
            runs[number] = checks.read_metrics(path)
        except (OSError, ValueError) as err:
            results.append(checks.Check(f"run {number} metrics", False, str(err)))
            runs[number] = {}
    first, last = args.steps, args.steps + args.resumed_steps
    both = {**runs[1], **runs[2]}
    results += checks.check_metrics(both, list(range(1, last + 1)), gcpo=gcpo, groups_per_step=args.groups_per_step)
    results += checks.check_resume(runs[1], runs[2], run.checkpoints, saved_step=first, resumed_steps=args.resumed_steps)
    if gcpo:
        results += checks.check_credit_dumps(run.dumps, range(1, last + 1))

    walls = [_read_float(run.wall(n)) for n in (1, 2)]
    memory = {f"run {n}": m for n in (1, 2) if (m := _read_json(run.gpu_memory(n))) is not None}
    device = run.device.read_text(encoding="utf-8").strip() if run.device.is_file() else "unknown (no nvidia-smi)"
    ok = all(r.ok for r in results)

    print(f"\n## Smoke run: {args.estimator}, device: {device}\n")
    print("\n".join(r.line() for r in results))
    print("\nWall time per run (start-up + shutdown = wall - sum of step times):\n")
    print(report.run_table({n: (walls[n - 1], runs[n]) for n in (1, 2)}))
    print("\nWall time per phase (s):\n")
    print(report.phase_table(both))
    print("\nMetrics:\n")
    print(report.metrics_table(both))
    if memory:
        print("\nPeak GPU memory per process (nvidia-smi):\n")
        print(report.memory_table(memory))
    print(f"\nsmoke {args.estimator}: {'PASSED' if ok else 'FAILED'}")

    run.summary.write_text(json.dumps({
        "estimator": args.estimator,
        "device": device,
        "ok": ok,
        "checks": [asdict(r) for r in results],
        "wall_s": walls,
        "step_time_s": report.step_times(both),
        "metrics": both,
        "gpu_memory": memory,
    }, indent=1, default=str), encoding="utf-8")
    return 0 if ok else 1


def compare(args) -> int:
    summaries = {}
    for name, root in (("gcpo", args.gcpo), ("grpo", args.grpo)):
        summary = _read_json(RunDir(root).summary)
        if summary is None:
            print(f"error: {RunDir(root).summary} not found (run the {name} smoke first)", file=sys.stderr)
            return 2
        summaries[name] = {int(s): t for s, t in summary["step_time_s"].items()}
    print("\n## GCPO vs GRPO step time (same smoke, same device)\n")
    print(report.comparison_table(summaries["gcpo"], summaries["grpo"]))
    return 0


def gpu_memory(args) -> int:
    from recipe.gcpo.smoke.gpu_memory import sample_until_stopped

    sample_until_stopped(args.out, interval_s=args.interval, parent_pid=args.parent_pid)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipe.gcpo.smoke", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("build", help="write the tiny policy and the smoke data")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=build)

    p = commands.add_parser("check", help="check a finished smoke run and print its report")
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--estimator", choices=["gcpo", "grpo"], required=True)
    p.add_argument("--steps", type=int, required=True, help="steps of the first run (the saved step)")
    p.add_argument("--resumed-steps", type=int, default=1)
    p.add_argument("--groups-per-step", type=int, default=None, help="prompts per step (checks gcpo/groups)")
    p.set_defaults(func=check)

    p = commands.add_parser("compare", help="GCPO's step time next to GRPO's")
    p.add_argument("--gcpo", type=Path, required=True)
    p.add_argument("--grpo", type=Path, required=True)
    p.set_defaults(func=compare)

    p = commands.add_parser("gpu-memory", help="sample per-process GPU memory until SIGTERM")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--parent-pid", type=int, default=None, help="stop when this process is gone")
    p.set_defaults(func=gpu_memory)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
