"""The processes of one smoke run: found by a marker in their environment, sampled, faulted and stopped.

The smoke (:mod:`.run`) starts each trainer run with ``GCPO_SMOKE_MARKER=<unique id>`` in its environment; every
process the run starts (Ray's GCS and raylet, the task runner, FSDP and vLLM workers, vLLM's engine processes,
reward workers, the credit actors) inherits it, and no other process on the machine has it. So the run's
processes can be listed even after the trainer exited and its children were re-parented, and stopped without
touching any other Ray cluster on the machine (``ray stop`` would stop them all).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import psutil

MARKER_ENV = "GCPO_SMOKE_MARKER"

# how Ray titles an actor's process (setproctitle): "ray::<ClassName>" or "ray::<ClassName>.<method>"
ROLE_TITLES = {
    "credit": ("ray::CreditWorker",),
    "reward": ("ray::RewardLoopWorker",),
}


@dataclass(frozen=True)
class RunProcess:
    pid: int
    title: str  # the process's command line as it shows it (Ray actors retitle themselves)
    memory_bytes: int  # proportional set size: shared pages split among their sharers, so processes add up


def _memory(process: psutil.Process) -> int:
    try:
        return process.memory_full_info().pss
    except (psutil.AccessDenied, AttributeError):  # no smaps to read: resident size, shared pages counted in full
        return process.memory_info().rss


def _title(process: psutil.Process) -> str:
    try:
        cmdline = process.cmdline()
    except (psutil.Error, OSError):
        return ""
    return " ".join(cmdline) if cmdline else process.name()


def run_processes(marker: str, memory: bool = True, known: Optional[dict] = None) -> Iterator[RunProcess]:
    """The live processes whose environment holds ``GCPO_SMOKE_MARKER=marker`` (this process excluded), with their
    memory when ``memory`` (reading it costs far more than finding them). ``known`` caches, across calls, whether a
    process (by pid and start time) is the run's, so that a sampler reads each environment once."""
    if not marker:
        raise ValueError("an empty marker would match every process")
    me = os.getpid()
    known = {} if known is None else known
    for process in psutil.process_iter():
        if process.pid == me:
            continue
        try:
            key = (process.pid, process.create_time())
            if key not in known:
                known[key] = process.environ().get(MARKER_ENV) == marker
            if not known[key]:
                continue
            yield RunProcess(process.pid, _title(process), _memory(process) if memory else 0)
        except (psutil.Error, OSError):  # gone, a zombie, or not ours to read
            continue


def short_name(title: str) -> str:
    """A process's kind for the memory table: a Ray actor's class, else the program and its module."""
    words = title.split()
    if not words:
        return "?"
    first = words[0]
    if first.startswith("ray::"):
        # "ray::Class", "ray::Class.method", "ray::<actor name>:Class"; an idle pooled worker is "ray::IDLE"
        return "ray::" + first[len("ray::") :].rsplit(":", 1)[-1].split(".")[0]
    name = Path(first).name
    if name.startswith("python") and len(words) > 2 and words[1] == "-m":
        return f"python -m {words[2]}"
    if name.startswith("python") and len(words) > 1:
        return f"python {Path(words[1]).name}"
    return name


def reap(marker: str, grace_s: float = 5.0) -> list[RunProcess]:
    """Stop every process of the run: SIGTERM, then SIGKILL whatever is left after ``grace_s``."""
    found = list(run_processes(marker, memory=False))
    for proc in found:
        _signal(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(psutil.pid_exists(p.pid) for p in found):
        time.sleep(0.2)
    for proc in run_processes(marker, memory=False):
        _signal(proc.pid, signal.SIGKILL)
    return found


def stop_tree(pid: int, grace_s: float = 5.0) -> list[int]:
    """Stop a process and every descendant it has now (a run past its time, or one the smoke was interrupted in):
    SIGTERM, then SIGKILL whatever still runs after ``grace_s``, as ``timeout --kill-after`` does, but for the
    whole tree. Leaves the exit status to the parent (nothing is reaped here). Returns the pids signalled."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    for proc in tree:
        _signal(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_running(p) for p in tree):
        time.sleep(0.2)
    for proc in tree:
        if _running(proc):
            _signal(proc.pid, signal.SIGKILL)
    return [proc.pid for proc in tree]


def _running(process: psutil.Process) -> bool:
    """Alive and not merely a zombie waiting for its parent (the same process: psutil checks its start time)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _parent_alive(parent_pid: Optional[int]) -> bool:
    return parent_pid is None or psutil.pid_exists(parent_pid)


class _Stop:
    """Set by SIGTERM, so that a sampler finishes its file instead of dying mid-write."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, *_):
        self.requested = True


def sample_memory_until_stopped(
    out: Path, marker: str, interval_s: float = 5.0, parent_pid: Optional[int] = None
) -> dict:
    """Sample the run's processes' memory (PSS) until SIGTERM (or the parent is gone); write the peak per process
    kind (summed over the processes of one kind at one instant) and the peak total to ``out`` as JSON."""
    stop = _Stop()
    peak_by_kind: dict[str, int] = {}
    count_by_kind: dict[str, int] = {}
    peak_total = 0
    samples = 0
    known: dict = {}
    while not stop.requested and _parent_alive(parent_pid):
        by_kind: dict[str, int] = {}
        kinds: dict[str, int] = {}
        for proc in run_processes(marker, known=known):
            kind = short_name(proc.title)
            by_kind[kind] = by_kind.get(kind, 0) + proc.memory_bytes
            kinds[kind] = kinds.get(kind, 0) + 1
        samples += 1
        peak_total = max(peak_total, sum(by_kind.values()))
        for kind, rss in by_kind.items():
            peak_by_kind[kind] = max(peak_by_kind.get(kind, 0), rss)
            count_by_kind[kind] = max(count_by_kind.get(kind, 0), kinds[kind])
        _write_memory(out, peak_total, peak_by_kind, count_by_kind, samples, interval_s)
        time.sleep(interval_s)
    return _write_memory(out, peak_total, peak_by_kind, count_by_kind, samples, interval_s)


def _write_memory(out: Path, total: int, by_kind: dict, counts: dict, samples: int, interval_s: float) -> dict:
    gib = 1024**3
    summary = {
        "peak_total_gib": round(total / gib, 3),
        "peak_by_kind_gib": {k: round(v / gib, 3) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "processes_by_kind": dict(sorted(counts.items())),
        "samples": samples,
        "interval_s": interval_s,
    }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    tmp.replace(out)
    return summary


def logged_steps(metrics: Path) -> set[int]:
    """Training steps verl's file logger has written so far (a partly written last line is skipped)."""
    steps = set()
    try:
        text = metrics.read_text(encoding="utf-8")
    except OSError:
        return steps
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "training/global_step" in record.get("data", {}):
            steps.add(int(record["step"]))
    return steps


def inject_fault(
    target: str,
    marker: str,
    metrics: Path,
    after_step: int,
    out: Path,
    parent_pid: Optional[int] = None,
    poll_s: float = 0.5,
    kill: Callable[[int, int], None] = os.kill,
) -> Optional[dict]:
    """Once step ``after_step`` is in ``metrics``, SIGKILL the run's processes of ``target`` (``credit``: every
    credit actor; ``reward``: one reward worker) and record what was killed in ``out``. Returns the record, or
    None if the run ended (or the parent went away) first."""
    titles = ROLE_TITLES[target]
    stop = _Stop()
    while not stop.requested and _parent_alive(parent_pid):
        if after_step in logged_steps(metrics):
            victims = [p for p in run_processes(marker, memory=False) if p.title.startswith(titles)]
            if target == "reward":
                victims = victims[:1]
            record = {
                "target": target,
                "after_step": after_step,
                "time": time.time(),
                "killed": [{"pid": p.pid, "title": p.title} for p in victims],
            }
            for proc in victims:
                kill(proc.pid, signal.SIGKILL)
            out.write_text(json.dumps(record, indent=1), encoding="utf-8")
            return record
        time.sleep(poll_s)
    return None
