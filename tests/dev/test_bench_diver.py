"""dev/bench_diver.py runs end to end on a tiny group and checks its implementations agree."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_diver_benchmark_runs_and_its_implementations_agree():
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "dev" / "bench_diver.py"),
            "--group-size",
            "4",
            "--words",
            "40",
            "--repeats",
            "1",
            "--groups",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "all implementations agree" in proc.stdout and "FAIL" not in proc.stdout
    assert "| 40 |" in proc.stdout
