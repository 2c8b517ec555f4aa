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
            raise CommandError(
                f"{where}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1}); save the file as UTF-8"
            ) from None
        line = line.removeprefix(BYTE_ORDER_MARK)
        if not line.strip(JSON_WHITESPACE):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise CommandError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
        except RecursionError:
            raise CommandError(f"{where}: JSON nested too deeply to read") from None
        except ValueError as err:  # e.g. an integer of more digits than Python converts
            raise CommandError(f"{where}: not valid JSON ({one_line(err)})") from None
        if not isinstance(record, dict):
            raise CommandError(f"{where}: expected a JSON object, got {_json_type(record)}")
        _check_writable(record, where)
        yield number, record


def _check_writable(record: dict, where: str) -> None:
    """Refuse what could be read but not written back: a lone surrogate (JSON's "\\ud800" escape) is no
    character, so no UTF-8 file holds it; nesting too deep for the JSON writer."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
        return
    except RecursionError:
        raise CommandError(f"{where}: JSON nested too deeply to read") from None
    except UnicodeEncodeError as err:
        surrogate = f"\\u{ord(err.object[err.start]):04x}"
    for key, value in record.items():
        try:
            json.dumps({key: value}, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            name = repr(key) if not _has_surrogate(key) else "a key"
            raise CommandError(f"{where}: {name} holds a lone surrogate ({surrogate}), which is not a character; "
                               "UTF-8 cannot hold it") from None


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
