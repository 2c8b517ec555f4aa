"""Fuzzing `gcpo eval` as test_credit_fuzz.py fuzzes `gcpo credit` (Hypothesis, derandomised by tests/conftest.py):
whatever the generation file's bytes or the flags, it either writes the results with pass@k for every k asked, or
fails with exactly one line that names the file (its line, where one is to blame) or the flag, exit status 2,
writing nothing. Never a traceback, and nothing else on stderr (no warning)."""

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gcpo_core.cli import main
from tests.gcpo_core.cli.fuzzing import jsonl_files, numbers, odd_values

RESPONSES = ["Answer: 7", "So $\\boxed{7}$.", "Answer: 8", "no idea", "$\\boxed{\\frac{1}{2}}$", ""]
good_problems = st.fixed_dictionaries(
    {
        "benchmark": st.sampled_from(["toy", "other"]),
        "id": st.one_of(st.integers(0, 2), st.sampled_from(["a", "b"])),
        "answer": st.one_of(st.sampled_from(["7", "\\frac{1}{2}", "x"]), st.integers(7, 8)),
        "responses": st.lists(st.sampled_from(RESPONSES), min_size=1, max_size=4),
    }
)
odd_problems = st.fixed_dictionaries(
    {},
    optional={
        "benchmark": st.one_of(st.sampled_from(["toy", ""]), odd_values),
        "data_source": odd_values,
        "id": st.one_of(st.sampled_from([0, "0", 10**30]), odd_values),
        "index": odd_values,
        "problem": st.one_of(st.text(max_size=6), odd_values),
        "input": odd_values,
        "answer": st.one_of(numbers, odd_values),
        "gts": odd_values,
        "reward_model": st.one_of(st.fixed_dictionaries({"ground_truth": odd_values}), odd_values),
        "responses": st.one_of(st.lists(st.sampled_from(RESPONSES), max_size=2), odd_values),
        "output": st.one_of(st.sampled_from(RESPONSES), odd_values),
    },
)
generation_files = jsonl_files(good_problems, odd_problems, max_lines=4)

FLAG_VALUES = {
    "--ks": ["0", "1", "2", "3", "-1", "100000000000000000000", "x", "1.5"],
    "--cluster-threshold": ["0.9", "1", "-1", "5", "-1.01", "nan", "inf", "x"],
    "-k": ["0", "1", "16", "-2"],
    "--temperature": ["0", "0.6", "-1", "nan", "inf"],
    "--top-p": ["0", "0.95", "1", "1.5", "nan"],
    "--max-tokens": ["0", "1", "-5"],
    "--tp": ["0", "1"],
    "--seed": ["0", "-1", "1.5"],
}
single_flags = st.sampled_from(
    [["--bogus"], ["--ks"], ["--run", "noequals"], ["--run", "a="], ["--run", "=x"], ["--run", "{src}"]]
)
flags = st.lists(
    st.one_of(
        st.sampled_from(sorted(FLAG_VALUES)).flatmap(lambda f: st.sampled_from(FLAG_VALUES[f]).map(lambda v: [f, v])),
        single_flags,
    ),
    max_size=3,
).map(lambda pairs: [token for pair in pairs for token in pair])

VALID_FILE = "".join(
    json.dumps(r) + "\n"
    for r in [
        {"benchmark": "toy", "id": 0, "answer": "7", "responses": ["Answer: 7", "So $\\boxed{7}$.", "Answer: 8"]},
        {"benchmark": "toy", "id": 1, "answer": 7, "responses": ["Answer: 7", "no idea", "Answer: 7"]},
        {"benchmark": "other", "id": "a", "answer": "\\frac{1}{2}", "responses": ["$\\boxed{0.5}$"] * 3},
    ]
).encode()


def _run(data: bytes, argv_flags: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        src, out = folder / "gens.jsonl", folder / "out"
        src.write_bytes(data)
        argv_flags = [token.replace("{src}", str(src)) for token in argv_flags]
        err, table = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(table):
            code = main(["eval", str(src), "--no-embeddings", "--out-dir", str(out), *argv_flags])
        err = err.getvalue()
        assert code in (0, 2), err
        if code == 2:
            assert err.startswith("gcpo eval: ") and err.count("\n") == 1, err
            named = str(src) in err or " --" in err or "-k/--samples" in err or "gcpo eval: argument " in err
            assert named or "two runs are named" in err, err
            assert sorted(p.name for p in folder.iterdir()) == ["gens.jsonl"], err
            return
        assert err == f"\nresults and plots in {out}/\n", err  # no warning, no progress noise
        results = json.loads((out / "results.json").read_text("utf-8"))
        ks = [int(v) for f, v in zip(argv_flags, argv_flags[1:]) if f == "--ks"]
        for per_benchmark in results.values():
            for metrics in per_benchmark.values():
                for k in ks:  # every k asked for is in every benchmark's results, a number
                    assert math.isfinite(metrics[f"pass@{k}"]), metrics
        assert len(table.getvalue().splitlines()) == 2 + sum(len(b) for b in results.values())


@given(generation_files)
def test_any_generation_file_gives_results_or_one_line(data):
    _run(data, [])


@given(flags)
def test_any_flags_give_results_or_one_line(argv_flags):
    _run(VALID_FILE, argv_flags)


@settings(max_examples=25)
@given(generation_files, flags)
def test_any_generations_with_any_flags_give_results_or_one_line(data, argv_flags):
    _run(data, argv_flags)
