"""Peak GPU memory of each process during a run, sampled with ``nvidia-smi``.

torch's own peak counters (``perf/max_memory_*`` in verl's metrics) only see the FSDP worker's allocator; vLLM's
engine and the GCPO credit actor are other processes, so the smoke run samples the driver's per-process usage
(``nvidia-smi --query-compute-apps``) and keeps each process's peak. A process is named by its command line at
its peak (Ray sets it to the actor and task, e.g. ``ray::CreditWorker.compute``). In a container whose PID
namespace hides the host's PIDs the name is ``?``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

QUERY = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]


@dataclass
class ProcessPeak:
    pid: int
    peak_mib: float
    name: str


def parse_compute_apps(csv_text: str) -> dict[int, float]:
    """``{pid: MiB}`` from ``nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits``
    (a process on several GPUs is summed; lines that are not ``pid, number`` are skipped, e.g. ``[N/A]``)."""
    usage: dict[int, float] = {}
    for line in csv_text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2:
            continue
        try:
            pid, mib = int(parts[0]), float(parts[1])
        except ValueError:
            continue
        usage[pid] = usage.get(pid, 0.0) + mib
    return usage


def process_name(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)[:200] or "?"


class PeakTracker:
    """Keeps every process's peak over the samples it is given."""

    def __init__(self, name_of: Callable[[int], str] = process_name):
        self.peaks: dict[int, ProcessPeak] = {}
        self.samples = 0
        self._name_of = name_of

    def add(self, usage: dict[int, float]) -> None:
        self.samples += 1
        for pid, mib in usage.items():
            peak = self.peaks.get(pid)
            if peak is None or mib > peak.peak_mib:
                self.peaks[pid] = ProcessPeak(pid, mib, self._name_of(pid))

    def summary(self) -> dict:
        rows = sorted(self.peaks.values(), key=lambda p: -p.peak_mib)
        return {"samples": self.samples, "processes": [asdict(p) for p in rows]}


def _alive(pid: Optional[int]) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sample_until_stopped(
    out: str | os.PathLike, interval_s: float = 0.5, query: Optional[list[str]] = None, parent_pid: Optional[int] = None
) -> dict:
    """Sample every ``interval_s`` until SIGTERM / SIGINT or until ``parent_pid`` is gone (so that a killed
    script leaves no sampler behind), then write the peaks as JSON to ``out``."""
    tracker = PeakTracker()
    stop = {"now": False}

    def _stop(*_):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    error = None
    while not stop["now"] and _alive(parent_pid):
        try:
            proc = subprocess.run(query or QUERY, capture_output=True, text=True, timeout=10)
            if proc.returncode == 0:
                tracker.add(parse_compute_apps(proc.stdout))
            else:
                error = proc.stderr.strip() or f"nvidia-smi exited {proc.returncode}"
        except (OSError, subprocess.TimeoutExpired) as err:
            error = str(err)
        time.sleep(interval_s)
    summary = tracker.summary()
    if error and not tracker.samples:
        summary["error"] = error
    Path(out).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary
