"""Hypothesis strategies shared by the CLI fuzz tests (test_credit_fuzz.py, test_eval_fuzz.py): odd JSON values, ways
to spoil a JSON line's bytes or text, and whole input files of good lines, odd lines and spoilt ones in UTF-8 (with
or without a byte-order mark) or UTF-16."""

import json

from hypothesis import strategies as st

EXTREME_NUMBERS = [0, 1, -1, 0.5, 1e-320, 5e-324, -5e-324, 1e308, -1.7e308, 2**63, 10**400, -(10**400)]
numbers = st.one_of(
    st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(EXTREME_NUMBERS)
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=4))
odd_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=6,
)


# ways to spoil a line's bytes or text
MUTATIONS = (
    "truncate",
    "junk_byte",
    "latin1",
    "surrogate_escape",
    "raw_surrogate",
    "deep",
    "unclosed",
    "nan_token",
    "nan_elsewhere",
    "both_kinds",
    "blank",
    "crlf",
    "bom",
)


def _mutate(draw, line: str) -> bytes:
    kind = draw(st.sampled_from(MUTATIONS))
    raw = line.encode("utf-8", "surrogateescape")  # a line mutated before holds raw bytes as surrogates
    if kind == "truncate":
        return raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    if kind == "junk_byte":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xe9", b"\x80"])) + raw[at:]
    if kind == "latin1":
        return line[:-1].encode("utf-8", "surrogateescape") + ', "name": "caf\u00e9"}'.encode("latin-1")
    if kind == "surrogate_escape":
        return line[:-1].encode("utf-8", "surrogateescape") + b', "text2": "\\udc80"}'
    if kind == "raw_surrogate":
        return line[:-1].encode("utf-8", "surrogateescape") + b', "t": "\xed\xa0\x80"}'
    if kind == "deep":
        depth = draw(st.sampled_from([10, 900, 5000, 200_000]))
        return line[:-1].encode("utf-8", "surrogateescape") + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"
    if kind == "unclosed":
        return b"[" * draw(st.sampled_from([3, 100_000]))
    if kind == "nan_token":
        token = draw(st.sampled_from([b"NaN", b"-Infinity", b"1e999"]))
        return line[:-1].encode("utf-8", "surrogateescape") + b', "reward": ' + token + b"}"
    if kind == "nan_elsewhere":
        token = draw(st.sampled_from([b"NaN", b"Infinity", b"-1e400"]))
        return line[:-1].encode("utf-8", "surrogateescape") + b', "note": {"x": [' + token + b"]}}"
    if kind == "both_kinds":
        return line[:-1].encode("utf-8", "surrogateescape") + b', "text": "a solution"}'
    if kind == "blank":
        return b"  \t"
    if kind == "crlf":
        return raw + b"\r"
    return b"\xef\xbb\xbf" + raw


def jsonl_files(good_lines, odd_lines, max_lines: int = 6):
    """Files of up to ``max_lines`` good lines; about half of them spoilt once or twice: an odd line inserted, or a
    line's bytes mutated."""

    @st.composite
    def files(draw) -> bytes:
        lines = [
            json.dumps(draw(good_lines), ensure_ascii=draw(st.booleans()))
            for _ in range(draw(st.integers(0, max_lines)))
        ]
        for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2]))):
            if draw(st.booleans()) or not lines:
                lines.insert(draw(st.integers(0, len(lines))), json.dumps(draw(odd_lines)))
            else:
                at = draw(st.integers(0, len(lines) - 1))
                lines[at] = _mutate(draw, lines[at]).decode("utf-8", "surrogateescape")
        encoded = [line.encode("utf-8", "surrogateescape") for line in lines]
        body = b"\n".join(encoded) + draw(st.sampled_from([b"\n", b"", b"\n\n"]))
        encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8 with a BOM", "utf-16"]))
        if encoding == "utf-8 with a BOM":
            return b"\xef\xbb\xbf" + body
        if encoding == "utf-16":
            return body.decode("utf-8", "replace").encode("utf-16")
        return body

    return files()
