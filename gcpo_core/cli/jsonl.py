"""JSON lines as the gcpo commands read them: UTF-8 (a byte-order mark is skipped), one object per line, blank
lines ignored; whatever else a line holds is a :class:`CommandError` naming the file and line."""

from __future__ import annotations

import json
import math
import sys
from typing import Iterable, Iterator, Optional

from gcpo_core.cli.common import CommandError, one_line

BYTE_ORDER_MARK = "\ufeff"
JSON_WHITESPACE = " \t\r\n"


def _raw_lines(path: str) -> Iterator[bytes]:
    if path != "-":
        try:
            handle = open(path, "rb")
        except OSError as err:
            raise CommandError(f"cannot read {path}: {err.strerror}") from None
        with handle:
            yield from handle
        return
    stdin = getattr(sys.stdin, "buffer", None)
    lines: Iterable = stdin if stdin is not None else (line.encode("utf-8", "surrogatepass") for line in sys.stdin)
    yield from lines


def read_jsonl(path: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line of ``path`` ('-': standard input)."""
    for number, raw in enumerate(_raw_lines(path), start=1):
        where = f"{path}:{number}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            byte, column = raw[err.start], err.start + 1
            message = f"not UTF-8 text (byte 0x{byte:02x} at column {column}); save the file as UTF-8"
            raise CommandError(f"{where}: {message}") from None
        # without its line break: json counts the break as a line, so an error at the end of the line (one cut
        # short) would be at "column 1" of the next, and a string cut short would hold a control character
        line = line.removeprefix(BYTE_ORDER_MARK).rstrip("\r\n")
        if not line.strip(JSON_WHITESPACE):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise CommandError(f"{where}: not valid JSON ({_decode_error(err, line)})") from None
        except RecursionError:
            raise CommandError(f"{where}: JSON nested too deeply to read") from None
        except ValueError as err:  # an integer of more digits than Python converts (4300 by default)
            reason = "a number with more digits than Python reads" if "digits" in str(err) else one_line(err)
            raise CommandError(f"{where}: not valid JSON ({reason})") from None
        if not isinstance(record, dict):
            raise CommandError(f"{where}: expected a JSON object, got {_json_type(record)}")
        _check_writable(record, where)
        yield number, record


def _decode_error(err: json.JSONDecodeError, line: str) -> str:
    """What is wrong and at which column; a line that ends before its JSON does is said to be cut short."""
    what = err.msg.removesuffix(" at")  # "Unterminated string starting at" + " at column 9" would say "at at"
    if err.pos >= len(line.rstrip(JSON_WHITESPACE)) or what.startswith("Unterminated string"):
        return f"{what} at column {err.colno}: the line ends before its JSON does; was it cut short?"
    return f"{what} at column {err.colno}"


def _check_writable(record: dict, where: str) -> None:
    """Refuse what Python's JSON reader takes but no JSON file can hold, so that it is never written back: NaN
    and infinity (NaN, Infinity, 1e999), a lone surrogate (the escape \\ud800 is no character, so UTF-8 cannot
    hold it), nesting deeper than the JSON writer goes."""
    try:
        json.dumps(record, ensure_ascii=False, allow_nan=False).encode("utf-8")
        return
    except RecursionError:
        raise CommandError(f"{where}: JSON nested too deeply to read") from None
    except ValueError:  # also UnicodeEncodeError
        pass
    for key, value in record.items():
        name = repr(key) if not _has_surrogate(key) else "a key"
        try:
            json.dumps({key: value}, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except UnicodeEncodeError as err:
            surrogate = f"\\u{ord(err.object[err.start]):04x}"
            raise CommandError(
                f"{where}: {name} holds a lone surrogate ({surrogate}), which is not a character; UTF-8 cannot hold it"
            ) from None
        except ValueError:
            if isinstance(value, float):
                raise CommandError(f"{where}: {name} must be a finite number, got {value}") from None
            raise CommandError(f"{where}: {name} must hold only finite numbers (JSON has no NaN or infinity)") from None


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else type(value).__name__


def finite_number(value: object) -> Optional[float]:
    """The value as a float if it is a finite JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer beyond float64
        return None
    return value if math.isfinite(value) else None
