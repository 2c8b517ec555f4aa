"""``gcpo report DUMP``: a credit report from the trainer's dumps (``algorithm.gcpo.dump.every_n_steps``).

    gcpo report gcpo_dumps/ -o credit_report/        # all steps
    gcpo report gcpo_dumps/credit_step000050.jsonl   # one step

Writes a self-contained ``index.html`` (kernel heatmaps, Shapley credit next to GRPO's and GCPO's
advantages, the texts, diagnostics over training steps) and the PNGs.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="HTML credit report from trainer dumps",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dump", type=Path, metavar="DUMP", help="a credit_step*.jsonl file or a folder of them")
    parser.add_argument(
        "-o",
        "--out-dir",
        type=Path,
        default=Path("credit_report"),
        help="where index.html and the PNGs go (default %(default)s)",
    )
    parser.add_argument("--max-groups", type=int, default=50, help="most groups drawn (default %(default)s)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from gcpo_core.cli.common import CommandError
    from gcpo_core.evaluation.credit_report import build_report
    from gcpo_core.evaluation.dump import read_credit_dump

    if not args.dump.exists():
        raise CommandError(f"{args.dump}: no such file or folder")
    try:
        records = list(read_credit_dump(args.dump))
        index = build_report(records[: args.max_groups], args.out_dir)
    except (ValueError, KeyError) as err:
        raise CommandError(str(err)) from None
    print(index)
    return 0
