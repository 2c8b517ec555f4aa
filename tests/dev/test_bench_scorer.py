"""The scorer benchmark runs end to end on a few answers (its numbers are for docs/benchmarks.md, not tests)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_scorer_benchmark_runs_and_checks_bounded_equals_in_process(shared_data):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "dev" / "bench_scorer.py"),
            "--data-dir",
            str(shared_data),
            "--answers",
            "24",
            "--repeats",
            "1",
            "--round-trips",
            "20",
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "| bounded, one call per answer |" in out and "| DeadlinePool |" in out
    assert "timed_out=True" in out
