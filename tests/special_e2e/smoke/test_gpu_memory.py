"""Per-process peak GPU memory from nvidia-smi samples (the sampler is driven with a stand-in for nvidia-smi)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

from tests.special_e2e.smoke.gpu_memory import PeakTracker, parse_compute_apps

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_nvidia_smi_rows_are_parsed_and_odd_rows_skipped():
    text = "1234, 5120\n1234, 100\n99, [N/A]\nNo running processes found\n\n77, 12.5\n"
    assert parse_compute_apps(text) == {1234: 5220.0, 77: 12.5}


def test_each_process_keeps_its_peak_and_the_name_it_had_then():
    names = iter(["ray::A.gen", "ray::B", "ray::A.update"])
    tracker = PeakTracker(name_of=lambda pid: next(names))
    tracker.add({1: 100.0, 2: 50.0})
    tracker.add({1: 300.0, 2: 10.0})
    tracker.add({1: 200.0})
    assert tracker.summary() == {
        "samples": 3,
        "processes": [
            {"pid": 1, "peak_mib": 300.0, "name": "ray::A.update"},
            {"pid": 2, "peak_mib": 50.0, "name": "ray::B"},
        ],
    }


def _sampler(tmp_path, parent_pid=None):
    ready = tmp_path / "ready"
    fake_smi = ["sh", "-c", f"touch {ready}; echo '4242, 1000'; echo '4343, 250'"]
    code = (
        "import sys; from tests.special_e2e.smoke.gpu_memory import sample_until_stopped; "
        f"sample_until_stopped({str(tmp_path / 'peaks.json')!r}, 0.05, query={fake_smi!r}, parent_pid={parent_pid!r})"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    deadline = time.time() + 120
    while not ready.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "the sampler never ran its query"
    return proc


def test_sigterm_stops_the_sampler_and_writes_the_peaks(tmp_path):
    proc = _sampler(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    summary = json.loads((tmp_path / "peaks.json").read_text())
    assert summary["samples"] >= 1 and [p["peak_mib"] for p in summary["processes"]] == [1000.0, 250.0]


def test_the_sampler_stops_by_itself_when_its_script_is_gone(tmp_path):
    parent = subprocess.Popen(["sleep", "600"])
    threading.Thread(target=parent.wait, daemon=True).start()  # reaped as soon as it dies
    proc = _sampler(tmp_path, parent_pid=parent.pid)
    parent.kill()
    assert proc.wait(timeout=60) == 0
    assert json.loads((tmp_path / "peaks.json").read_text())["samples"] >= 1
