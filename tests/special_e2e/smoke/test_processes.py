"""tests/special_e2e/smoke/processes.py on real processes: a run's processes are the ones with its marker, reaping
stops them and only them, stopping a process tree stops its descendants (SIGKILL for one that ignores SIGTERM), the memory sampler and the fault injector work from the files a run writes."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.special_e2e.smoke import processes

SLEEPER = "import time; time.sleep(120)"


@pytest.fixture
def spawn():
    started = []

    def start(marker=None, child=False):
        env = dict(os.environ)
        env.pop(processes.MARKER_ENV, None)
        if marker is not None:
            env[processes.MARKER_ENV] = marker
        # with child=True the process starts a grandchild and exits: the grandchild is re-parented, as Ray's
        # processes are when the trainer that started them has gone
        code = (f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {SLEEPER!r}]); " if child else "") + (
            "" if child else SLEEPER
        )
        proc = subprocess.Popen([sys.executable, "-c", code], env=env)
        started.append(proc)
        if child:
            proc.wait(timeout=30)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()


def _wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_stopping_a_tree_stops_the_process_and_its_descendants_and_kills_what_ignores_sigterm(spawn):
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    code = (
        f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {stubborn!r}]); "
        f"subprocess.Popen([sys.executable, '-c', {SLEEPER!r}]); time.sleep(120)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    bystander = spawn()
    assert _wait_for(lambda: len(psutil.Process(parent.pid).children()) == 2)
    children = psutil.Process(parent.pid).children()
    stopped = processes.stop_tree(parent.pid, grace_s=1)
    assert set(stopped) == {parent.pid, *(c.pid for c in children)}
    assert parent.wait(timeout=10) == -signal.SIGTERM  # the exit status is left to its parent
    assert _wait_for(lambda: not any(processes._running(c) for c in children))
    assert bystander.poll() is None and processes.stop_tree(parent.pid) == []


def test_the_run_is_the_processes_with_its_marker_and_reaping_stops_only_them(spawn):
    ours, other, unmarked = spawn("run-a"), spawn("run-b"), spawn()
    spawn("run-a", child=True)  # a process of the run whose parent has gone
    assert _wait_for(lambda: len(list(processes.run_processes("run-a", memory=False))) == 2)
    found = {p.pid for p in processes.run_processes("run-a")}
    assert ours.pid in found and other.pid not in found and unmarked.pid not in found
    assert all(p.memory_bytes > 0 for p in processes.run_processes("run-a"))
    stopped = processes.reap("run-a", grace_s=5)
    assert {p.pid for p in stopped} == found
    assert _wait_for(lambda: not list(processes.run_processes("run-a", memory=False)))
    assert other.poll() is None and unmarked.poll() is None  # another run's processes live on


def test_an_empty_marker_is_refused():
    with pytest.raises(ValueError, match="every process"):
        list(processes.run_processes(""))


@pytest.mark.parametrize(
    "title, kind",
    [
        ("ray::CreditWorker.embed", "ray::CreditWorker"),
        ("ray::TransferQueueStorageUnit#3:SimpleStorageUnit", "ray::SimpleStorageUnit"),
        ("ray::agent_loop_worker_0_49c5f523:AgentLoopWorkerTQ", "ray::AgentLoopWorkerTQ"),
        ("/venv/bin/python -m recipe.gcpo.main_gcpo a=b", "python -m recipe.gcpo.main_gcpo"),
        ("/venv/bin/python3 /x/ray/dashboard/dashboard.py --x", "python dashboard.py"),
        ("/x/raylet --flag", "raylet"),
        ("", "?"),
    ],
)
def test_process_kinds(title, kind):
    assert processes.short_name(title) == kind


def test_the_memory_sampler_writes_the_peak_per_kind_until_told_to_stop(spawn, tmp_path):
    spawn("run-m")
    spawn("run-m")
    out = tmp_path / "memory.json"
    sampler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.special_e2e.smoke",
            "host-memory",
            "--out",
            str(out),
            "--marker",
            "run-m",
            "--interval",
            "0.2",
        ]
    )
    assert _wait_for(lambda: out.is_file() and json.loads(out.read_text())["samples"] >= 2)
    sampler.send_signal(signal.SIGTERM)
    assert sampler.wait(timeout=30) == 0
    summary = json.loads(out.read_text())
    kind = "python -c"
    assert summary["processes_by_kind"] == {kind: 2}
    assert 0 < summary["peak_by_kind_gib"][kind] <= summary["peak_total_gib"]


def test_the_fault_injector_waits_for_the_step_then_kills_the_role(spawn, tmp_path, monkeypatch):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 1, "data": {"training/global_step": 1}}) + "\n")
    victim = spawn("run-f")
    monkeypatch.setitem(processes.ROLE_TITLES, "credit", (f"{sys.executable} -c",))  # stands for ray::CreditWorker
    killed = []
    out = tmp_path / "fault.json"
    record = processes.inject_fault(
        "credit", "run-f", metrics, after_step=1, out=out, poll_s=0.05, kill=lambda pid, sig: killed.append((pid, sig))
    )
    assert killed == [(victim.pid, signal.SIGKILL)]
    assert json.loads(out.read_text()) == record and record["after_step"] == 1


def test_the_fault_injector_gives_up_when_its_parent_has_gone(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert (
        processes.inject_fault(
            "reward", "run-x", tmp_path / "none.jsonl", 1, tmp_path / "f.json", parent_pid=gone.pid, poll_s=0.05
        )
        is None
    )
    assert not (tmp_path / "f.json").exists()


def test_logged_steps_skip_validation_records_and_a_partial_last_line(tmp_path):
    metrics = tmp_path / "m.jsonl"
    metrics.write_text(
        json.dumps({"step": 0, "data": {"val-core/x": 1}})
        + "\n"
        + json.dumps({"step": 1, "data": {"training/global_step": 1}})
        + "\n"
        + '{"step": 2, "da'
    )
    assert processes.logged_steps(metrics) == {1}
    assert processes.logged_steps(tmp_path / "absent.jsonl") == set()
