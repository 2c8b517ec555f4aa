"""``gcpo credit IN.jsonl [-o OUT.jsonl]``: credit and advantages for rollouts given as JSON lines.

Each input line is one rollout: ``{"group": str, "reward": number, "embedding": [numbers]}`` (other keys are
kept). Output: the same lines in the same order with ``quality``, ``shapley`` and ``advantage`` added. A bad
line stops the command naming the line, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from gcpo_core.cli.common import (
    CommandError,
    add_credit_arguments,
    credit_config_from_args,
    finite_number,
    read_jsonl,
    write_text_atomically,
)
from gcpo_core.credit import compute_credit

ADDED_FIELDS = ("quality", "shapley", "advantage")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "credit",
        help="Shapley credit and advantages for rollouts in JSONL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("input", metavar="IN.jsonl", help="rollouts, one JSON object per line ('-' for stdin)")
    parser.add_argument("-o", "--output", metavar="OUT.jsonl", help="where to write (default: stdout)")
    add_credit_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = credit_config_from_args(args)
    records, groups, rewards, embeddings = parse_rollouts(args.input)
    if not records:
        write_text_atomically(args.output, "")
        print("gcpo credit: no rollouts in input", file=sys.stderr)
        return 0
    try:
        result = compute_credit(rewards, torch.tensor(embeddings, dtype=torch.float64), groups, config)
    except ValueError as err:
        raise CommandError(str(err)) from None
    columns = {name: getattr(result, name).tolist() for name in ADDED_FIELDS}
    lines = []
    for row, record in enumerate(records):
        for name in ADDED_FIELDS:
            record[name] = columns[name][row]
        lines.append(json.dumps(record, ensure_ascii=False))
    write_text_atomically(args.output, "\n".join(lines) + "\n")
    summary = result.metrics()
    print(
        f"gcpo credit: {len(records)} rollouts in {int(summary['gcpo/groups'])} groups; "
        f"method {config.method}; mean team value {summary['gcpo/team_value/mean']:.4f}; "
        f"rescued all-correct groups {int(summary['gcpo/rescued_groups'])}",
        file=sys.stderr,
    )
    return 0


def parse_rollouts(path: str) -> tuple[list[dict], list[str], list[float], list[list[float]]]:
    records, groups, rewards, embeddings = [], [], [], []
    dim = None
    for number, record in read_jsonl(path):
        where = f"{path}:{number}"
        group = record.get("group")
        if not isinstance(group, str):
            raise CommandError(f"{where}: 'group' must be a string, got {json.dumps(group)}")
        reward = finite_number(record.get("reward"))
        if reward is None:
            raise CommandError(f"{where}: 'reward' must be a finite number, got {json.dumps(record.get('reward'))}")
        embedding = record.get("embedding")
        if not isinstance(embedding, list) or not embedding:
            raise CommandError(f"{where}: 'embedding' must be a non-empty list of numbers")
        vector = [finite_number(x) for x in embedding]
        if any(x is None for x in vector):
            raise CommandError(f"{where}: 'embedding' must hold only finite numbers")
        if dim is None:
            dim = len(vector)
        elif len(vector) != dim:
            raise CommandError(f"{where}: embedding has {len(vector)} dimensions, earlier lines have {dim}")
        if not any(vector):
            raise CommandError(f"{where}: 'embedding' is all zeros (no direction to compare)")
        records.append(record)
        groups.append(group)
        rewards.append(reward)
        embeddings.append(vector)
    return records, groups, rewards, embeddings
