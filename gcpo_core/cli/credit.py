"""gcpo credit IN.jsonl [-o OUT.jsonl]: credit and advantages for rollouts given as JSON lines.

Each input line is one rollout: {"group": ..., "reward": number, "embedding": [numbers]}, or with "text": "..."
instead of "embedding" (embedded with the configured encoder); all lines use the same kind, and a line with
both is refused. "group" is a string or an integer (verl's uids may be either): rollouts of one prompt share it.
Other keys are kept. The file is UTF-8 (a byte-order mark is skipped); blank lines are skipped.

Output: the same lines in the same order with "quality", "shapley" and "advantage" added. --dump DIR also writes
the credit as a dump that `gcpo report DIR` turns into a report, as it does the trainer's. An empty input
(no rollouts) gives an empty output and exit status 0. A bad line or flag stops the command with one line
naming it, exit status 2, before anything is written. -o writes a file atomically (through a symlink to its
target; a new file gets the umask's mode), writes devices and pipes straight through, and '-' is stdout.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from gcpo_core.cli.common import (
    CREDIT_DEFAULTS,
    CREDIT_KEYS,
    MAX_GROUP_SIZE_LIMIT,
    REWARD_LIMIT,
    CommandError,
    add_config_argument,
    add_credit_arguments,
    add_encoder_arguments,
    credit_config_from_args,
    flag_of,
    json_text,
    load_encoder,
    one_line,
    path_argument,
    shown,
)
from gcpo_core.cli.jsonl import finite_number, read_jsonl
from gcpo_core.cli.output import check_output, write_output

if TYPE_CHECKING:  # the encoding pipeline (torch, the encoder) is imported only when credit is computed
    from gcpo_core.encoding.pipeline import RolloutCredit

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
    parser.add_argument(
        "--dump",
        metavar="DIR",
        type=path_argument,
        default=None,
        help="also write every group as a credit dump, DIR/credit_step<N>.jsonl, for `gcpo report DIR`",
    )
    parser.add_argument(
        "--dump-step",
        type=int,
        default=0,
        metavar="N",
        help="the step number the dump carries (>= 0, default %(default)s)",
    )
    add_credit_arguments(parser)
    add_encoder_arguments(parser)
    add_config_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = credit_config_from_args(args)
    check_output(args.output)
    rollouts = parse_rollouts(args.input, config.max_group_size)
    if not rollouts.records:
        write_output(args.output, "")
        print(f"gcpo credit: no rollouts in {args.input}; the output is empty", file=sys.stderr)
        return 0
    columns, metrics, result = _credit(rollouts, config, args)
    _refuse_non_finite(columns, rollouts, args)
    lines = []
    for row, record in enumerate(rollouts.records):
        for name in ADDED_FIELDS:
            record[name] = columns[name][row]
        lines.append(json_text(record))
    write_output(args.output, "\n".join(lines) + "\n")
    rollout_count, group_count = len(rollouts.records), int(metrics["gcpo/groups"])
    if args.dump is not None:
        _write_dump(args, rollouts, result, group_count)
    print(
        f"gcpo credit: {_count(rollout_count, 'rollout')} in {_count(group_count, 'group')}; method {config.method}; "
        f"mean team value {metrics['gcpo/team_value/mean']:.4f}; "
        f"rescued all-correct groups {int(metrics['gcpo/rescued_groups'])}",
        file=sys.stderr,
    )
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _credit(rollouts: "ParsedRollouts", config, args) -> tuple[dict, dict, "RolloutCredit"]:
    """The added columns, the batch metrics and the whole result (what a dump needs: every per-rollout field and
    the embeddings)."""
    import numpy as np
    import torch

    from gcpo_core.credit.compute import compute_credit
    from gcpo_core.credit.kernels import normalize_embeddings
    from gcpo_core.encoding.pipeline import PER_ROLLOUT_FIELDS, RolloutCredit

    try:
        if rollouts.texts is not None:
            from gcpo_core.encoding.pipeline import credit_rollouts

            encoder = load_encoder(args)
            result = credit_rollouts(
                rollouts.texts,
                rollouts.rewards,
                rollouts.groups,
                encoder,
                config,
                return_embeddings=args.dump is not None,
            )
            _report_embedding(result, rollouts, args)
        else:
            embeddings = torch.tensor(rollouts.embeddings, dtype=torch.float64)
            credit = compute_credit(rollouts.rewards, embeddings, rollouts.groups, config)
            # the dump keeps the directions the engine compared (every kernel reads unit rows) in float32, as the
            # encoder's are: a raw row of 1e300 would not fit float32, one of 1e-10 would round to 0 in the dump
            mask = torch.ones(1, len(rollouts.embeddings), dtype=torch.bool)
            unit_rows = normalize_embeddings(embeddings.unsqueeze(0), mask)[0]
            result = RolloutCredit(
                **{name: getattr(credit, name).numpy() for name in PER_ROLLOUT_FIELDS},
                metrics=credit.metrics(),
                embeddings=unit_rows.numpy().astype(np.float32),
            )
        return {name: getattr(result, name).tolist() for name in ADDED_FIELDS}, result.metrics, result
    except ValueError as err:
        raise CommandError(f"{args.input}: {one_line(err)}") from None
    except torch.linalg.LinAlgError as err:
        raise CommandError(
            f"{args.input}: the credit engine's linear algebra failed ({one_line(err)}) with {_settings(args)}; "
            "extreme values can do that, else it is a bug: please report it"
        ) from None


def _write_dump(args: argparse.Namespace, rollouts: "ParsedRollouts", result, groups: int) -> None:
    """Every group as the trainer's credit dump (gcpo_core/evaluation/dump.py), for ``gcpo report``. Lines given as
    embeddings have no text: the report shows their input line instead."""
    from gcpo_core.evaluation.dump import write_credit_dump

    texts = rollouts.texts or [f"(line {n} of {args.input}: given as an embedding)" for n in rollouts.line_numbers]
    try:
        path = write_credit_dump(
            args.dump,
            args.dump_step,
            texts,
            rollouts.rewards,
            rollouts.groups,
            [True] * len(texts),
            result,
            max_groups=max(groups, 1),
        )
    except OSError as err:
        raise CommandError(f"--dump {args.dump}: {err.strerror or err}") from None
    print(f"gcpo credit: dump for `gcpo report {args.dump}`: {path}", file=sys.stderr)


def _settings(args: argparse.Namespace) -> str:
    """The credit flags that differ from the defaults, as they would be typed."""
    changed = [
        f"{flag_of(dest)}" + ("" if isinstance(getattr(args, dest), bool) else f" {getattr(args, dest)}")
        for field, dest in CREDIT_KEYS.items()
        if getattr(args, dest) != CREDIT_DEFAULTS[field]
    ]
    return " ".join(changed) if changed else "the default settings"


def _report_embedding(result, rollouts: "ParsedRollouts", args: argparse.Namespace) -> None:
    print(
        f"gcpo credit: embedded {_count(len(rollouts.texts), 'text')} with {args.encoder} ({args.text_span} span, "
        f"{args.long_text} long texts: {100 * result.metrics['gcpo/encoder/long_frac']:.0f} % long, "
        f"{100 * result.metrics['gcpo/encoder/truncated_frac']:.0f} % truncated) in {result.timings['embed']:.1f} s",
        file=sys.stderr,
    )


def _refuse_non_finite(columns: dict[str, list[float]], rollouts: "ParsedRollouts", args: argparse.Namespace) -> None:
    """NaN and infinity are not JSON: never write them, whatever the engine returned."""
    for name in ADDED_FIELDS:
        for row, value in enumerate(columns[name]):
            if not math.isfinite(value):
                raise CommandError(
                    f"{args.input}:{rollouts.line_numbers[row]}: {name!r} came out non-finite ({value}) for group "
                    f"{shown(rollouts.groups[row])} with {_settings(args)}; nothing written (extreme values can do "
                    "that, else it is a bug: please report it)"
                )


class ParsedRollouts:
    def __init__(self):
        self.records: list[dict] = []
        self.line_numbers: list[int] = []
        self.groups: list[str | int] = []
        self.rewards: list[float] = []
        self.embeddings: list[list[float]] = []
        self.texts: list[str] | None = None


def parse_rollouts(path: str, max_group_size: int = MAX_GROUP_SIZE_LIMIT) -> ParsedRollouts:
    """Every rollout of the file, checked; the first bad line is a CommandError naming it and the field."""
    parsed = ParsedRollouts()
    dim = None
    kind = None
    group_sizes: dict[str | int, int] = {}
    group_forms: dict[str, tuple[type, int]] = {}  # "7" -> (int, first line): 7 and "7" would be two groups
    for number, record in read_jsonl(path):
        where = f"{path}:{number}"
        group = _group_id(record, where)
        form = group_forms.setdefault(str(group), (type(group), number))
        if form[0] is not type(group):
            here, there = (("a string", "number"), ("a number", "string"))[isinstance(group, int)]
            raise CommandError(
                f"{where}: group {json_text(group)} is {here} here but the {there} "
                f"{json_text(str(group) if isinstance(group, int) else int(group))} on line {form[1]}; "
                "write each group id one way"
            )
        group_sizes[group] = group_sizes.get(group, 0) + 1
        if group_sizes[group] > max_group_size:
            raise CommandError(
                f"{where}: group {shown(group)} has more than --max-group-size {max_group_size} rollouts; check "
                f"that rollouts of one prompt, and only they, share a group, or raise --max-group-size "
                f"(up to {MAX_GROUP_SIZE_LIMIT})"
            )
        reward = _field(record, "reward", where)
        reward_value = finite_number(reward)
        if reward_value is None:
            raise CommandError(f"{where}: 'reward' must be a finite number, got {shown(reward)}")
        if abs(reward_value) > REWARD_LIMIT:
            raise CommandError(
                f"{where}: 'reward' {shown(reward)} is too large: the group normalisation squares rewards, so "
                f"their size must be at most {REWARD_LIMIT:g}"
            )
        if "embedding" in record and "text" in record:
            raise CommandError(
                f"{where}: has both 'text' and 'embedding': give one (rename the other, e.g. to "
                "'response', to keep it in the output)"
            )
        line_kind = "embedding" if "embedding" in record else "text" if "text" in record else None
        if line_kind is None:
            raise CommandError(f"{where}: needs an 'embedding' (list of numbers) or a 'text' (string)")
        if kind is not None and line_kind != kind:
            raise CommandError(f"{where}: has '{line_kind}' but earlier lines have '{kind}'; use one kind")
        kind = line_kind
        if kind == "text":
            if not isinstance(record["text"], str):
                raise CommandError(f"{where}: 'text' must be a string, got {shown(record['text'])}")
            if parsed.texts is None:
                parsed.texts = []
            parsed.texts.append(record["text"])
        else:
            vector = _embedding(record["embedding"], where)
            if dim is None:
                dim = len(vector)
            elif len(vector) != dim:
                raise CommandError(f"{where}: embedding has {len(vector)} dimensions, earlier lines have {dim}")
            parsed.embeddings.append(vector)
        parsed.records.append(record)
        parsed.line_numbers.append(number)
        parsed.groups.append(group)
        parsed.rewards.append(reward_value)
    return parsed


def _field(record: dict, name: str, where: str) -> object:
    if name not in record:
        raise CommandError(f"{where}: {name!r} is missing")
    return record[name]


def _group_id(record: dict, where: str) -> str | int:
    group = _field(record, "group", where)
    if isinstance(group, bool) or not isinstance(group, (str, int)):
        raise CommandError(f"{where}: 'group' must be a string or an integer, got {shown(group)}")
    return group


def _embedding(embedding: object, where: str) -> list[float]:
    if not isinstance(embedding, list) or not embedding:
        raise CommandError(f"{where}: 'embedding' must be a non-empty list of numbers, got {shown(embedding)}")
    vector = [finite_number(x) for x in embedding]
    bad = next((i for i, x in enumerate(vector) if x is None), None)
    if bad is not None:
        raise CommandError(
            f"{where}: 'embedding' must hold only finite numbers; item {bad + 1} is {shown(embedding[bad])}"
        )
    if not any(vector):
        raise CommandError(f"{where}: 'embedding' is all zeros (no direction to compare)")
    return vector
