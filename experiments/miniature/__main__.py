"""``python -m experiments.miniature build|run|report|compare`` (``scripts/miniature.sh`` runs the first three, then
compares with the documented run when the budgets match)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

from experiments.miniature.arms import ARMS, DEFAULT_ARMS, RunSpec

PER_SEED = "per-seed"
DOCUMENTED_RESULTS = Path(__file__).resolve().parents[2] / "docs" / "miniature" / "results.json"


def warm_seed_option(value: str) -> int | str:
    """``--warm-seed``: ``per-seed`` or a non-negative integer."""
    if value == PER_SEED:
        return value
    try:
        seed = int(value)
    except ValueError:
        seed = -1
    if seed < 0:
        raise argparse.ArgumentTypeError(f"must be '{PER_SEED}' or a non-negative integer, got {value!r}")
    return seed


def build(out: Path, correct_share: float, warm_steps: int, warm_seed: int = 0) -> dict:
    """The task data and warm start ``warm_seed`` in ``out`` (kept when built before with the same settings)."""
    from experiments.miniature.runner import policy_dir
    from experiments.miniature.task import write_task_data
    from experiments.miniature.warm_start import WarmStartSpec, build_warm_start

    write_task_data(out / "data")
    spec = WarmStartSpec(correct_share=correct_share, steps=warm_steps, seed=warm_seed)
    policy = policy_dir(out, warm_seed)
    record_path = policy / "warm_start.json"
    if record_path.is_file() and json.loads(record_path.read_text()).get("spec") == asdict(spec):
        record = json.loads(record_path.read_text())
        print(f"miniature: warm start {warm_seed} kept ({policy})", flush=True)
    else:
        start = time.monotonic()
        record = build_warm_start(policy, spec)
        print(f"miniature: warm start {warm_seed} trained in {time.monotonic() - start:.0f} s", flush=True)
    print(
        f"miniature: warm start {warm_seed} samples {record['heldout']['accuracy']:.1%} correct on held-out prompts "
        f"({record['heldout']['distinct_correct']:.2f} distinct correct of {spec.eval_samples})",
        flush=True,
    )
    return record


def with_earlier_runs(runs: dict, earlier: list[Path]) -> dict:
    """``runs`` (``collect``'s) with the runs of each earlier ``results.json`` that ``runs`` lacks, by (arm, seed): an
    experiment run in parts on machines that do not share the folder. The same (arm, seed) in two places is refused:
    a seed's arms must come from one warm start, and two runs of one pair are a reproduction (``compare``). So is a
    seed whose arms in the two places trained from other warm-start weights (``warm_start_sha256``: the same seed
    builds other weights on another CPU model), which would pair runs of two starts."""
    from experiments.miniature.reproduce import check_comparable, load_results, pooling_refusal

    merged = {arm: dict(seeds) for arm, seeds in runs.items()}
    for path in earlier:
        before = load_results(path)
        if merged:
            check_comparable(before, merged)  # the same budget, and each seed from the same warm start number
        clash = sorted(f"{arm} seed {s}" for arm, seeds in before.items() for s in seeds if s in merged.get(arm, {}))
        if clash:
            raise ValueError(f"{path} and the runs both hold {', '.join(clash)}")
        refusal = pooling_refusal(before, merged)
        if refusal is not None:
            raise ValueError(f"{path} and the runs: {refusal}")
        for arm, seeds in before.items():
            merged.setdefault(arm, {}).update(seeds)
    return merged


def report(out: Path, figures: Path | None, earlier: list[Path] = ()) -> str:
    from experiments.miniature.report import (
        ablation_tests,
        all_correct_table,
        collect,
        credit_shape_tests,
        dial_tests,
        final_table,
        paired_table,
        paired_tests,
        plot,
        warm_starts_line,
    )

    runs = with_earlier_runs(collect(out), list(earlier))
    table = warm_starts_line(runs) + "\n\n" + final_table(runs)
    if "grpo" in runs and len(runs) > 1:
        table += "\n\n" + paired_table(runs) + "\n\n" + paired_tests(runs)
    ablation = ablation_tests(runs)
    if ablation:  # Shapley vs leave-one-out credit vs the additive bonus, seed by seed
        table += "\n\n" + ablation
    shape = credit_shape_tests(runs)
    if shape:  # issue 56's pre-registered TOST, Holm and verdicts (only when all its runs are in)
        table += "\n\n" + shape
    dial = dial_tests(runs)
    if dial:  # issue 72's pre-registered confirmation, with the all-correct share per step
        table += "\n\n" + dial
    else:
        share = all_correct_table(runs)
        if share:  # where the runs know it: the groups GRPO gives nothing
            table += "\n\n" + share
    (out / "results.json").write_text(json.dumps(runs, indent=1, default=str) + "\n")
    (out / "table.md").write_text(table + "\n")
    if figures is not None:
        for path in plot(runs, figures):
            print(f"miniature: figure {path}", flush=True)
    walls = [r["wall_s"] for seeds in runs.values() for r in seeds.values()]
    print(f"miniature: {len(walls)} runs, {sum(walls) / 60:.1f} min of training runs in all", flush=True)
    print(table, flush=True)
    return table


def compare(out: Path, reference: Path, step: int | None = None) -> str:
    """``out``'s finished runs against ``reference`` (a ``results.json``), cell by cell; also in
    ``out/reproduction.md``."""
    from experiments.miniature.report import collect, paired_tests
    from experiments.miniature.reproduce import compare as compare_runs
    from experiments.miniature.reproduce import load_results, pool, pooling_refusal

    ref, runs = load_results(reference), collect(out)
    text, summary = compare_runs(ref, runs, step=step)
    text = f"Against {reference}:\n\n{text}"
    refusal = pooling_refusal(ref, runs)
    if refusal is not None:
        text += (
            f"\n\nNot pooled with the reference: {refusal}; two experiments are paired only from the same warm starts."
        )
    elif "grpo" in ref or "grpo" in runs:
        pooled = pool(ref, runs, step=summary["step"])
        text += (
            "\n\nBoth experiments together (each arm and seed the mean of its runs in either), "
            f"against GRPO:\n\n{paired_tests(pooled, step=summary['step'])}"
        )
    (out / "reproduction.md").write_text(text + "\n")
    print(text, flush=True)
    return text


def absolute_path(text: str) -> Path:
    """An option's folder as an absolute path: a run's model path is built from ``--out`` and verl's workers start in
    other folders, so the start-up refuses a relative one."""
    return Path(text).resolve()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.miniature", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    defaults = RunSpec()
    for name in ("build", "run"):
        p = commands.add_parser(name)
        p.add_argument("--out", type=absolute_path, required=True)
        p.add_argument("--correct-share", type=float, default=0.3, help="the warm start's share of right targets")
        p.add_argument("--warm-steps", type=int, default=400)
    commands.choices["build"].add_argument(
        "--warm-seed", type=warm_seed_option, default=0, help="the warm start's seed (its weights)"
    )
    run = commands.choices["run"]
    run.add_argument(
        "--warm-seed",
        type=warm_seed_option,
        default=PER_SEED,
        help=f"'{PER_SEED}' (default): seed s of every arm trains from warm start s, so the seeds' spread "
        "includes the start's; N: every run from warm start N",
    )
    run.add_argument(
        "--arms", default=",".join(DEFAULT_ARMS), help=f"comma-separated, of {', '.join(ARMS)} (default %(default)s)"
    )
    # 4, not 5: five starts took 2.2 h on a slower 2-core machine (docs/miniature.md, "Four starts by default")
    run.add_argument("--seeds", type=int, default=4, help="N seeds of every arm, FIRST..FIRST+N-1 (--first-seed)")
    run.add_argument(
        "--first-seed",
        type=int,
        default=1,
        help="the first seed (default %(default)s); the credit-shape run's are 101-116: --first-seed 101 --seeds 16",
    )
    run.add_argument("--steps", type=int, default=defaults.steps)
    run.add_argument("--eval-every", type=int, default=defaults.eval_every)
    run.add_argument(
        "--eval-samples",
        type=int,
        default=defaults.eval_samples,
        help="held-out samples a prompt at each evaluation (default %(default)s); distinct correct answers stay "
        "'among 16', estimated without bias from more",
    )
    run.add_argument("--lr", type=float, default=defaults.lr)
    run.add_argument("--timeout", type=float, default=1800.0, help="seconds one training run may take")
    run.add_argument(
        "--dump-rollouts",
        action="store_true",
        help="verl writes every step's training rollouts to each run's rollouts/ folder, from which the report "
        "counts the all-correct groups of every arm (GRPO's included)",
    )
    run.add_argument("--figures", type=Path, default=None, help="where the report's PNGs go (default OUT)")
    run.add_argument("--dry-run", action="store_true", help="compose and validate the first run's config only")
    run.add_argument("overrides", nargs="*", help="Hydra overrides for every run (key=value)")
    p = commands.add_parser("report")
    p.add_argument("--out", type=absolute_path, required=True)
    p.add_argument("--figures", type=Path, default=None)
    p.add_argument(
        "--include",
        type=Path,
        action="append",
        default=[],
        help="an earlier part's results.json whose (arm, seed) runs OUT lacks (repeatable)",
    )
    p = commands.add_parser(
        "compare",
        help="does a run reproduce the documented one? (experiments/miniature/reproduce.py says how it is judged)",
    )
    p.add_argument("--out", type=absolute_path, required=True)
    p.add_argument("--reference", type=Path, default=DOCUMENTED_RESULTS)
    p.add_argument("--step", type=int, default=None, help="the evaluation step (default: the last both have)")
    args = parser.parse_args(argv)

    if args.command == "compare":
        try:
            compare(args.out, args.reference, args.step)
        except ValueError as err:
            print(f"miniature: cannot compare: {err}", file=sys.stderr, flush=True)
            return 2
        return 0

    if args.command == "report":
        try:
            report(args.out, args.figures or args.out, args.include)
        except ValueError as err:
            print(f"miniature: cannot report: {err}", file=sys.stderr, flush=True)
            return 2
        return 0
    if args.command == "build":
        if args.warm_seed == PER_SEED:
            parser.error("build --warm-seed takes one integer")
        build(args.out, args.correct_share, args.warm_steps, args.warm_seed)
        return 0
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        parser.error(f"--arms must name some of {', '.join(ARMS)}, got {args.arms!r}")
    if args.seeds < 1:
        parser.error(f"--seeds must be a positive integer, got {args.seeds}")
    if args.first_seed < 0:
        parser.error(f"--first-seed must be a non-negative integer, got {args.first_seed}")
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        parser.error(f"overrides are key=value, got {bad}")
    try:
        spec = RunSpec(
            steps=args.steps,
            eval_every=min(args.eval_every, args.steps),
            lr=args.lr,
            eval_samples=args.eval_samples,
        )
    except ValueError as err:
        parser.error(str(err))
    from experiments.miniature.runner import train

    def warm_seed(seed: int) -> int:
        return seed if args.warm_seed == PER_SEED else args.warm_seed

    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if args.dry_run:
        first = seeds[0]
        build(args.out, args.correct_share, args.warm_steps, warm_seed(first))
        train(
            arms[0],
            first,
            spec,
            args.out,
            args.timeout,
            args.overrides,
            warm_seed=warm_seed(first),
            dry_run=True,
            dump_rollouts=args.dump_rollouts,
        )
        return 0
    # a stopped experiment stops its run's processes too (the runner's clean-up runs on SystemExit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    start = time.monotonic()
    for seed in seeds:
        build(args.out, args.correct_share, args.warm_steps, warm_seed(seed))
        for arm in arms:  # arms side by side within a seed: an interrupted experiment stays balanced
            try:
                train(
                    arm,
                    seed,
                    spec,
                    args.out,
                    args.timeout,
                    args.overrides,
                    warm_seed=warm_seed(seed),
                    dump_rollouts=args.dump_rollouts,
                )
            except RuntimeError as err:
                print(f"miniature: FAILED: {err}", file=sys.stderr, flush=True)
                return 1
    print(f"miniature: the experiment took {(time.monotonic() - start) / 60:.1f} min", flush=True)
    report(args.out, args.figures or args.out)
    if DOCUMENTED_RESULTS.is_file():
        try:
            compare(args.out, DOCUMENTED_RESULTS)
        except ValueError as err:
            print(f"miniature: not compared with the documented run ({DOCUMENTED_RESULTS.name}): {err}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
