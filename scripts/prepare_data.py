#!/usr/bin/env python
"""Prepare GCPO's training and validation parquet files for verl.

    python scripts/prepare_data.py --local-dir ../shared/data --out-dir ~/data/gcpo          # offline
    python scripts/prepare_data.py --download --out-dir ~/data/gcpo                          # from the hub

Writes ``<out>/train.parquet`` (DAPO-Math-17K, deduplicated) and ``<out>/val_<set>.parquet`` for AIME 2024,
AIME 2025, MATH-500, AMC 2023 and GSM8K, then prints what was read, kept and dropped (and why). The launchers
read these paths (``DATA_DIR``). ``--datasets math`` writes ``train_math.parquet`` (MATH train, with reference
solutions) for the Group Contrastive PO baseline. See gcpo_core/training_data/prepare.py for the row format.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gcpo_core.training_data.prepare import (
    DATASETS,
    INSTRUCTIONS,
    PrepareReport,
    load_source,
    output_name,
    prepare,
    summary_table,
    write_parquet,
)


def output_path(out_dir: Path, name: str, split: str) -> Path:
    return out_dir / output_name(name, split)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--local-dir", type=Path, default=None, help="folder with local copies (jsonl/parquet)")
    parser.add_argument("--download", action="store_true", help="fetch sets missing locally from the hub")
    parser.add_argument("--datasets", default="all", help=f"comma-separated subset of: {', '.join(DATASETS)}")
    parser.add_argument(
        "--instruction",
        choices=sorted(INSTRUCTIONS),
        default="dapo",
        help="answer instruction added to every prompt (default: DAPO's 'Answer: $Answer')",
    )
    parser.add_argument("--train-limit", type=int, default=None, help="keep at most this many training prompts")
    args = parser.parse_args(argv)

    # "all": DAPO-Math-17K and the validation sets (MATH train only on request)
    names = (
        [n for n in DATASETS if n != "math"]
        if args.datasets == "all"
        else [n.strip() for n in args.datasets.split(",") if n.strip()]
    )
    unknown = [n for n in names if n not in DATASETS]
    if unknown:
        parser.error(f"unknown dataset(s) {unknown}; known: {', '.join(DATASETS)}")
    if args.local_dir is None and not args.download:
        parser.error("give --local-dir (offline) and/or --download")

    reports: list[PrepareReport] = []
    failures = []
    for name in names:
        spec = DATASETS[name]
        try:
            rows, source = load_source(spec, args.local_dir, args.download)
        except (FileNotFoundError, RuntimeError) as err:
            failures.append(str(err))
            continue
        limit = args.train_limit if spec.split == "train" else None
        frame, report = prepare(spec, rows, instruction=args.instruction, limit=limit)
        report.source = source
        path = output_path(args.out_dir, name, spec.split)
        write_parquet(frame, path)
        report.output = str(path)
        reports.append(report)
    print(summary_table(reports))
    for failure in failures:
        print(f"error: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
