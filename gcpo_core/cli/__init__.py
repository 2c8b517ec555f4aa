"""The gcpo command line: one sub-command per module in this package.

What a user's input or flags can cause ends in one line, ``gcpo <command>: <what and where>``, exit status 2;
Ctrl-C or SIGTERM in "interrupted" (130, 143); a traceback only for a bug, and then the last line says so.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

from gcpo_core.cli import credit, demo, eval, report
from gcpo_core.cli.common import (
    ArgumentParser,
    CommandError,
    UsageError,
    check_flags,
    one_line,
    read_settings_file,
)

SUBCOMMANDS = (credit, demo, eval, report)
EXIT_BUG, EXIT_USAGE = 1, 2


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the process is so that clean-up code (temp files) runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="gcpo", description="GCPO cooperative credit assignment for verl.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    for subparser in subparsers.choices.values():
        # the descriptions are the modules' docstrings, written in reST; a terminal shows them without markup
        subparser.description = (subparser.description or "").replace("``", "")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if a in {m.__name__.rsplit(".", 1)[1] for m in SUBCOMMANDS}), None)
    prefix = f"gcpo {command}" if command else "gcpo"
    try:
        with _signals_raise():
            args = _parse(argv)
            return int(args.handler(args) or 0)
    except CommandError as err:
        message = one_line(err)
        if isinstance(err, UsageError) and command:  # the top-level parser finds unknown flags of sub-commands too
            message = message.replace("(see gcpo --help)", f"(see {prefix} --help)")
        print(f"{prefix}: {message}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:  # the machine's doing (disk full, permissions), not the program's
        target = f"{err.filename}: " if err.filename else ""
        print(f"{prefix}: {target}{err.strerror or one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated as stop:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 128 + stop.signum
    except Exception:
        traceback.print_exc()
        print(
            f"{prefix}: a bug in gcpo (the traceback above): please report it with the command and its input",
            file=sys.stderr,
        )
        return EXIT_BUG


def _parse(argv: list[str]) -> argparse.Namespace:
    """The command line, with a settings file's values, every flag checked (:func:`check_flags`) before any work."""
    parser = build_parser()
    args = parser.parse_args(argv)
    subparser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    if getattr(args, "config", None) is not None:
        # settings from the file become the defaults; flags given on the command line still win
        defaults, sources = read_settings_file(args.config)
        for action in subparser._actions:  # argparse converts a string default itself, with a message naming no file
            value = defaults.get(action.dest)
            if isinstance(value, str) and callable(action.type):
                try:
                    defaults[action.dest] = action.type(value)
                except (TypeError, ValueError, argparse.ArgumentTypeError):
                    kind = getattr(action.type, "__name__", "value")
                    raise CommandError(f"{sources[action.dest]}: not a valid {kind}, got {value!r}") from None
        subparser.set_defaults(**defaults)
        args = parser.parse_args(argv)
        args.setting_sources = {  # the values no flag overrode (a NaN from the file is not equal to itself)
            dest: where for dest, where in sources.items() if getattr(args, dest) in (defaults[dest],)
        }
    check_flags(subparser, args.command, args)
    return args


@contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` while a command runs (their default kills the process
    before clean-up code runs); a signal the caller ignores (nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            previous[signum] = signal.signal(signum, _raise_terminated)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _raise_terminated(signum, frame) -> None:
    raise Terminated(signum)
