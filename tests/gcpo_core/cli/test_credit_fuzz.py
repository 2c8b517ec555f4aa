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
from tests.gcpo_core.cli.fuzzing import EXTREME_NUMBERS, jsonl_files, numbers, odd_values

ADDED = ("quality", "shapley", "advantage")

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

input_files = jsonl_files(good_rollouts, odd_rollouts)


FLAG_VALUES = {
    "--method": ["auto", "exact", "mc", "loo", "", "banana"],
    "--permutations": ["0", "2", "3", "8", "-8", "1e3", "x", "99999999999999999999"],
    "--seed": ["0", "7", "-1", "18446744073709551616", "1.5"],
    "--exact-max": ["0", "1", "22", "23", "-1"],
    "--kernel": ["cosine", "rbf", "linear"],
    "--rbf-bandwidth": ["1e-300", "1e300", "0", "-1", "nan", "inf", "1e-12", "0.5"],
    "--quality": ["binary", "clip", "sqrt", "none", "bogus"],
    "--advantage": ["shapley", "mix", "blend", "dra", "x"],
    "--mix-coef": ["0", "1", "nan", "inf", "-1", "1e308", "1e-320"],
    "--blend-weight": ["0", "0.5", "1", "1.0000001", "-0.1", "nan", "1e-320"],
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


@given(input_files)
def test_any_input_file_gives_finite_credit_or_one_line(data):
    _run(data, [])


@given(flags)
def test_any_flags_give_finite_credit_or_one_line(argv_flags):
    _run(VALID_FILE, argv_flags)


@given(input_files, flags)
def test_any_input_with_any_flags_gives_finite_credit_or_one_line(data, argv_flags):
    _run(data, argv_flags)
