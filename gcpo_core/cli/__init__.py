"""The ``gcpo`` command line: one sub-command per module in this package."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from gcpo_core.cli import credit, demo, eval, report
from gcpo_core.cli.common import CommandError, settings_file_defaults

SUBCOMMANDS = (credit, demo, eval, report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gcpo", description="GCPO cooperative credit assignment for verl.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "config", None):
            # settings from the file become the defaults; flags given on the command line still win
            subparser = parser._subparsers._group_actions[0].choices[args.command]
            subparser.set_defaults(**settings_file_defaults(args.config))
            args = parser.parse_args(argv)
        return int(args.handler(args) or 0)
    except CommandError as err:
        print(f"gcpo {args.command}: {err}", file=sys.stderr)
        return 2
