"""The benchmark scripts run end to end on a tiny batch (their numbers are for docs/benchmarks.md, not tests)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_encoder_benchmark_runs_and_checks_the_ascii_shortcut():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_encoder.py"), "--lengths", "64", "--texts-per-length", "4",
         "--prompts", "4", "--group-size", "4", "--tokenizer-workers", "0", "--repeats", "1", "--skip-baseline"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "identical token ids" in out and "FAIL" not in out
    rows = {line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")}
    assert {"Rust normaliser", "ASCII shortcut", "0"} <= rows
    assert "advantage step's credit call takes" in out
