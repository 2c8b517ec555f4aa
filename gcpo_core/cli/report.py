"""``gcpo report DUMP``: a credit report from the trainer's dumps (``algorithm.gcpo.dump.every_n_steps``).

    gcpo report gcpo_dumps/ -o credit_report/        # all steps
    gcpo report gcpo_dumps/credit_step000050.jsonl   # one step

Writes a self-contained ``index.html`` (kernel heatmaps, Shapley credit next to GRPO's and GCPO's
advantages, the texts, diagnostics over training steps) and the PNGs. The dump is read as ``gcpo credit`` reads
its input: a bad line stops the command with one line naming the file and line, exit status 2, before anything
is written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Optional

from gcpo_core.cli.common import REWARD_LIMIT, CommandError, path_argument, shown
from gcpo_core.cli.jsonl import finite_number, read_jsonl


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="HTML credit report from trainer dumps",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "dump", type=path_argument, metavar="DUMP", help="a credit_step*.jsonl file or a folder of them"
    )
    parser.add_argument(
        "-o",
        "--out-dir",
        type=path_argument,
        default=Path("credit_report"),
        help="where index.html and the PNGs go (default %(default)s)",
    )
    parser.add_argument(
        "--max-groups",
        type=int,
        default=50,
        help="most groups drawn, the first in the dump (>= 1, default %(default)s)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    records = read_dump(args.dump)  # all of it checked before matplotlib loads and anything is written
    from gcpo_core.evaluation.credit_report import build_report

    try:
        index = build_report(records[: args.max_groups], args.out_dir)
    except ValueError as err:
        raise CommandError(f"{args.dump}: {err}") from None
    print(index)
    return 0


def read_dump(path: Path) -> list[dict]:
    """Every group record of a dump file, or of every ``credit_step*.jsonl`` in a folder; the first bad line is a
    :class:`CommandError` naming the file, the line and the field."""
    files = sorted(path.glob("credit_step*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise CommandError(f"{path}: no credit_step*.jsonl files in this folder")
    records = []
    for file in files:
        for number, record in read_jsonl(str(file)):
            _check_record(record, f"{file}:{number}")
            records.append(record)
    if not records:
        raise CommandError(f"{path}: the dump holds no groups")
    return records


def _numbers(limit: float = float("inf")) -> Callable[[object, int], Optional[str]]:
    def check(value: object, n: int) -> Optional[str]:
        if not isinstance(value, list) or len(value) != n:
            return f"must be a list of {n} numbers (one per text), got {shown(value)}"
        bad = next((x for x in value if finite_number(x) is None or abs(finite_number(x)) > limit), None)
        return None if bad is None else f"must hold finite numbers of size at most {limit:g}, got {shown(bad)}"

    return check


def _embeddings(value: object, n: int) -> Optional[str]:
    if not isinstance(value, list) or len(value) != n or not all(isinstance(row, list) and row for row in value):
        return f"must be a list of {n} non-empty lists of numbers (one per text), got {shown(value)}"
    if len({len(row) for row in value}) != 1:
        return "rows must all have the same length"
    return next((problem for row in value if (problem := _numbers(1e30)(row, len(row)))), None)


def _metrics(value: object, n: int) -> Optional[str]:
    if not isinstance(value, dict) or any(finite_number(v) is None for v in value.values()):
        return f"must be an object of finite numbers, got {shown(value)}"
    return None


def _step(value: object, n: int) -> Optional[str]:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return None if ok else f"must be an integer >= 0, got {shown(value)}"


def _uid(value: object, n: int) -> Optional[str]:
    ok = isinstance(value, (str, int)) and not isinstance(value, bool)
    return None if ok else f"must be a string or an integer, got {shown(value)}"


# a dump record's fields (gcpo_core/evaluation/dump.py writes them) and what each must hold, given the group's size
DUMP_RULES: dict[str, tuple[bool, Callable[[object, int], Optional[str]]]] = {  # name: (required, check)
    "step": (True, _step),
    "uid": (True, _uid),
    "rewards": (True, _numbers(REWARD_LIMIT)),
    "shapley": (True, _numbers(REWARD_LIMIT)),
    "advantage": (True, _numbers(REWARD_LIMIT)),
    "quality": (False, _numbers(REWARD_LIMIT)),
    "shapley_stderr": (False, _numbers(REWARD_LIMIT)),
    "score": (False, _numbers(REWARD_LIMIT)),
    "embeddings": (False, _embeddings),
    "metrics": (False, _metrics),
}


def _check_record(record: dict, where: str) -> None:
    texts = record.get("texts")
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        missing = "is missing" if "texts" not in record else f"must be a non-empty list of strings, got {shown(texts)}"
        raise CommandError(f"{where}: not a GCPO credit dump record: 'texts' {missing}")
    for name, (required, check) in DUMP_RULES.items():
        if name not in record:
            if required:
                raise CommandError(f"{where}: not a GCPO credit dump record: {name!r} is missing")
            continue
        problem = check(record[name], len(texts))
        if problem:
            raise CommandError(f"{where}: {name!r} {problem}")
