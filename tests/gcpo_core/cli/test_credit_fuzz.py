"""Fuzzing `gcpo credit` (Hypothesis, derandomised by tests/conftest.py): whatever the input file's bytes or the
flags, it either writes finite credit for every line, or fails with exactly one line that names the input
file (its line, where one is to blame) or the flag, exit status 2, writing nothing. Never a traceback."""

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gcpo_core.cli import main

ADDED = ("quality", "shapley", "advantage")

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

good_rollouts = st.fixed_dictionaries(
    {
        "group": st.one_of(st.sampled_from(["a", "b"]), st.integers(0, 1)),
        "reward": st.sampled_from([0, 1, -1, 0.5, 1.0]),
        "embedding": st.lists(
            st.one_of(st.integers(-2, 2), st.floats(-2, 2), st.sampled_from(EXTREME_NUMBERS)), min_size=2, max_size=2
        ).filter(lambda v: v.count(0) + v.count(0.0) < 2),
    }
)
odd_rollouts = st.fixed_dictionaries(
    {},
    optional={
        "group": st.one_of(st.sampled_from(["a", 1, 10**30, "1"]), odd_values),
        "reward": st.one_of(numbers, odd_values),
        "embedding": st.one_of(st.lists(numbers, min_size=1, max_size=3), odd_values),
        "text": st.one_of(st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2)),  # never a bare string:
        "note": odd_values,  # that would load the encoder
    },
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


@st.composite
def input_files(draw) -> bytes:
    lines = [json.dumps(draw(good_rollouts), ensure_ascii=draw(st.booleans())) for _ in range(draw(st.integers(0, 6)))]
    # about half the files are spoilt once or twice: an odd rollout inserted, or a line's bytes mutated
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2]))):
        if draw(st.booleans()) or not lines:
            lines.insert(draw(st.integers(0, len(lines))), json.dumps(draw(odd_rollouts)))
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


FLAG_VALUES = {
    "--method": ["auto", "exact", "mc", "loo", "", "banana"],
    "--permutations": ["0", "2", "3", "8", "-8", "1e3", "x", "99999999999999999999"],
    "--seed": ["0", "7", "-1", "18446744073709551616", "1.5"],
    "--exact-max": ["0", "1", "22", "23", "-1"],
    "--kernel": ["cosine", "rbf", "linear"],
    "--rbf-bandwidth": ["1e-300", "1e300", "0", "-1", "nan", "inf", "1e-12", "0.5"],
    "--quality": ["binary", "clip", "sqrt", "none", "bogus"],
    "--advantage": ["shapley", "mix", "dra", "x"],
    "--mix-coef": ["0", "1", "nan", "inf", "-1", "1e308", "1e-320"],
    "--epsilon": ["0", "1e-6", "1e308", "nan", "-inf", "1e-320"],
    "--std-floor": ["0", "0.1", "1e308", "-1", "nan"],
    "--max-group-size": ["0", "1", "2", "4096", "4097", "-3"],
}
flags = st.lists(
    st.one_of(
        st.sampled_from(sorted(FLAG_VALUES)).flatmap(lambda f: st.sampled_from(FLAG_VALUES[f]).map(lambda v: [f, v])),
        st.sampled_from([["--no-antithetic"], ["--no-stratified"], ["--no-std-norm"], ["--bogus"], ["--seed"]]),
    ),
    max_size=3,
).map(lambda pairs: [token for pair in pairs for token in pair])

VALID_FILE = "".join(
    json.dumps(r) + "\n"
    for r in [
        {"group": "a", "reward": 1, "embedding": [1.0, 0.0]},
        {"group": "a", "reward": 1, "embedding": [1.0, 0.0]},
        {"group": "a", "reward": 1, "embedding": [0.0, 1.0]},
        {"group": "a", "reward": 0, "embedding": [0.6, 0.8]},
        {"group": 2, "reward": 1, "embedding": [0.3, 0.9]},
        {"group": 2, "reward": 1, "embedding": [0.2, 0.9]},
    ]
).encode()


def _reject_constant(name):
    raise AssertionError(f"wrote {name}, which is not JSON")


def _run(data: bytes, argv_flags: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        src, out = folder / "in.jsonl", folder / "out.jsonl"
        src.write_bytes(data)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["credit", str(src), "-o", str(out), *argv_flags])
        err = err.getvalue()
        assert code in (0, 2), err
        if code == 2:
            assert err.startswith("gcpo credit: ") and err.count("\n") == 1, err
            assert str(src) in err or " --" in err or err.startswith("gcpo credit: argument --"), err
            assert sorted(p.name for p in folder.iterdir()) == ["in.jsonl"], err
            return
        written = out.read_text("utf-8").split("\n")
        rows = [json.loads(line, parse_constant=_reject_constant) for line in written if line]
        expected = [line for line in data.decode("utf-8-sig").split("\n") if line.strip(" \t\r")]
        assert len(rows) == len(expected)
        for row in rows:
            assert all(isinstance(row[k], float) and math.isfinite(row[k]) for k in ADDED), row


@given(input_files())
def test_any_input_file_gives_finite_credit_or_one_line(data):
    _run(data, [])


@given(flags)
def test_any_flags_give_finite_credit_or_one_line(argv_flags):
    _run(VALID_FILE, argv_flags)


@given(input_files(), flags)
def test_any_input_with_any_flags_gives_finite_credit_or_one_line(data, argv_flags):
    _run(data, argv_flags)
