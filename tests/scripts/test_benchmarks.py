"""The benchmark scripts run end to end on a tiny batch (their numbers are for docs/benchmarks.md, not tests)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_encoder_benchmark_runs():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_encoder.py"), "--lengths", "64", "--texts-per-length", "4",
         "--prompts", "4", "--group-size", "4", "--repeats", "1", "--skip-baseline"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "FAIL" not in out and "whole credit call: 4 prompts x 4 responses" in out
    assert "advantage step, prefetched (s)" in out


def test_the_length_distribution_benchmark_compares_actors_with_one_process():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_encoder.py"), "--mode", "lengths", "--responses", "8",
         "--group-size", "4", "--mean-pieces", "300", "--max-pieces", "600", "--shards", "1", "2", "--repeats", "1"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|")[1].strip() for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert rows[-3].startswith("in this process") and rows[-2:] == ["1 actor(s)", "2 actor(s)"]
    assert "Same advantages as in this process" in proc.stdout
