"""The benchmark scripts run end to end on a tiny batch (their numbers are for docs/benchmarks.md, not tests)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_encoder_benchmark_runs():
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "dev" / "bench_encoder.py"),
            "--lengths",
            "64",
            "--texts-per-length",
            "4",
            "--prompts",
            "4",
            "--group-size",
            "4",
            "--repeats",
            "1",
            "--skip-baseline",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "FAIL" not in out and "whole credit call: 4 prompts x 4 responses" in out
    assert "advantage step, prefetched (s)" in out


def _run(*argv):
    proc = subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_the_credit_benchmark_times_shapley_and_leave_one_out_and_says_how_far_loo_lies_from_shapley():
    out = _run(ROOT / "dev" / "bench_credit.py", "--groups", "4", "--group-sizes", "8", "--repeats", "1")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| 8 |")]
    assert [(r[1].strip(), r[2].strip()) for r in rows] == [
        (rewards, method) for rewards in ("all-correct", "mixed") for method in ("exact", "mc M=64", "loo")
    ]
    loo = [r for r in rows if r[2].strip() == "loo" and r[1].strip() == "all-correct"][0]
    # on all-correct groups of similar embeddings leave-one-out credit is not the Shapley value (issue 47's question)
    assert float(loo[6].strip().rstrip(" %")) > 1.0
    assert all(float(r[3]) > 0 for r in rows)


def test_the_credit_benchmarks_coverage_and_memory_sections_run():
    out = _run(ROOT / "dev" / "bench_credit.py", "--coverage", "--coverage-groups", "2", "--coverage-seeds", "1")
    assert "PASS  coverage of +-1.96 stderr >= 93 % at every M" in out
    assert [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ") and "%" in line] == [
        "4",
        "8",
        "16",
        "64",
        "256",
    ]
    out = _run(ROOT / "dev" / "bench_credit.py", "--memory", "--memory-sizes", "64", "--permutations", "8")
    assert out.splitlines()[-1].startswith("| 64 |")


def test_the_signal_benchmark_runs_on_the_shared_rollouts(shared_data):
    out = _run(
        ROOT / "dev" / "bench_signal.py",
        "--data-dir",
        shared_data,
        "--groups",
        "3",
        "--dtypes",
        "float32",
        "float16",
        "--noise-seeds",
        "1",
        "--with-reference",
    )
    assert "## model responses: default, all_correct_scale=group" in out
    assert "## model responses + reference solutions: all_correct_scale=batch (all-correct groups scaled" in out
    assert "| float16 |" in out and "| float32 + N(0, 0.001) per coordinate, seed 0 |" in out
    assert "PASS  model responses, float16" in out


def test_the_length_distribution_benchmark_compares_actors_with_one_process():
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "dev" / "bench_encoder.py"),
            "--mode",
            "lengths",
            "--responses",
            "8",
            "--group-size",
            "4",
            "--mean-pieces",
            "300",
            "--max-pieces",
            "600",
            "--shards",
            "1",
            "2",
            "--repeats",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert rows[-3].startswith("in this process") and rows[-2:] == ["1 actor(s)", "2 actor(s)"]
    assert "Same advantages as in this process" in proc.stdout


@pytest.mark.parametrize("script", ["bench_signal.py", "compare_verifiers.py"])
def test_scripts_on_the_shared_data_say_where_to_get_it(script, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "dev" / script), "--data-dir", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "GCPO_SHARED_DATA" in proc.stderr and "openai/grade-school-math" in proc.stderr
