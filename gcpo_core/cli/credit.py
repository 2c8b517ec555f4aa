"""``gcpo credit IN.jsonl [-o OUT.jsonl]``: credit and advantages for rollouts given as JSON lines.

Each input line is one rollout: ``{"group": str, "reward": number, "embedding": [numbers]}``, or with
``"text": str`` instead of ``"embedding"`` (embedded with the configured encoder); all lines use the same
kind. Other keys are kept. Output: the same lines in the same order with ``quality``, ``shapley`` and
``advantage`` added. A bad line stops the command naming the line, before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from gcpo_core.cli.common import (
    add_config_argument,
    CommandError,
    add_credit_arguments,
    add_encoder_arguments,
    credit_config_from_args,
    encoder_config_from_args,
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
    add_encoder_arguments(parser)
    add_config_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = credit_config_from_args(args)
    rollouts = parse_rollouts(args.input)
    if not rollouts.records:
        write_text_atomically(args.output, "")
        print("gcpo credit: no rollouts in input", file=sys.stderr)
        return 0
    try:
        if rollouts.texts is not None:
            columns, metrics = _credit_texts(rollouts, config, args)
        else:
            result = compute_credit(
                rollouts.rewards, torch.tensor(rollouts.embeddings, dtype=torch.float64), rollouts.groups, config
            )
            columns = {name: getattr(result, name).tolist() for name in ADDED_FIELDS}
            metrics = result.metrics()
    except ValueError as err:
        raise CommandError(str(err)) from None
    lines = []
    for row, record in enumerate(rollouts.records):
        for name in ADDED_FIELDS:
            record[name] = columns[name][row]
        lines.append(json.dumps(record, ensure_ascii=False))
    write_text_atomically(args.output, "\n".join(lines) + "\n")
    print(
        f"gcpo credit: {len(rollouts.records)} rollouts in {int(metrics['gcpo/groups'])} groups; "
        f"method {config.method}; mean team value {metrics['gcpo/team_value/mean']:.4f}; "
        f"rescued all-correct groups {int(metrics['gcpo/rescued_groups'])}",
        file=sys.stderr,
    )
    return 0


def _credit_texts(rollouts: "ParsedRollouts", config, args) -> tuple[dict, dict]:
    from gcpo_core.encoder import RolloutEncoder
    from gcpo_core.pipeline import credit_rollouts

    encoder = RolloutEncoder(encoder_config_from_args(args))
    result = credit_rollouts(rollouts.texts, rollouts.rewards, rollouts.groups, encoder, config)
    truncated = result.metrics["gcpo/encoder/truncated_frac"]
    print(
        f"gcpo credit: embedded {len(rollouts.texts)} texts with {args.encoder} ({args.text_span} span, "
        f"{args.long_text} long texts: {100 * result.metrics['gcpo/encoder/long_frac']:.0f} % long, "
        f"{100 * truncated:.0f} % truncated) in {result.timings['embed']:.1f} s",
        file=sys.stderr,
    )
    return {name: getattr(result, name).tolist() for name in ADDED_FIELDS}, result.metrics


class ParsedRollouts:
    def __init__(self):
        self.records: list[dict] = []
        self.groups: list[str] = []
        self.rewards: list[float] = []
        self.embeddings: list[list[float]] = []
        self.texts: list[str] | None = None


def parse_rollouts(path: str) -> ParsedRollouts:
    parsed = ParsedRollouts()
    dim = None
    kind = None
    for number, record in read_jsonl(path):
        where = f"{path}:{number}"
        group = record.get("group")
        if not isinstance(group, str):
            raise CommandError(f"{where}: 'group' must be a string, got {json.dumps(group)}")
        reward = finite_number(record.get("reward"))
        if reward is None:
            raise CommandError(f"{where}: 'reward' must be a finite number, got {json.dumps(record.get('reward'))}")
        line_kind = "embedding" if "embedding" in record else "text" if "text" in record else None
        if line_kind is None:
            raise CommandError(f"{where}: needs an 'embedding' (list of numbers) or a 'text' (string)")
        if kind is not None and line_kind != kind:
            raise CommandError(f"{where}: has '{line_kind}' but earlier lines have '{kind}'; use one kind")
        kind = line_kind
        if kind == "text":
            if not isinstance(record["text"], str):
                raise CommandError(f"{where}: 'text' must be a string")
            if parsed.texts is None:
                parsed.texts = []
            parsed.texts.append(record["text"])
        else:
            embedding = record["embedding"]
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
            parsed.embeddings.append(vector)
        parsed.records.append(record)
        parsed.groups.append(group)
        parsed.rewards.append(reward)
    return parsed
