"""The deadline pool: results in order, a stuck item killed at its deadline, the pool working afterwards."""

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gcpo_core.rewards import deadline_pool
from gcpo_core.rewards.deadline_pool import DeadlinePool, WorkerError

ROOT = Path(__file__).resolve().parents[3]
# math.factorial of a huge number: seconds to minutes of C code that never releases the GIL
GIL_HOG = 10**8


@pytest.fixture
def sleep_pool():
    with DeadlinePool("time:sleep", workers=2, startup_timeout_s=60) as pool:
        yield pool


def test_results_come_back_in_order():
    with DeadlinePool("math:sqrt", workers=1) as pool:
        outcomes = pool.map([4.0, 9.0, 16.0], timeout_s=10)
    assert [o.value for o in outcomes] == [2.0, 3.0, 4.0] and not any(o.timed_out for o in outcomes)
    assert pool.map([], timeout_s=1) == []


def test_an_item_past_its_deadline_is_timed_out_and_the_rest_still_run(sleep_pool):
    start = time.monotonic()
    outcomes = sleep_pool.map([0.0, 60.0, 0.0, 0.01], timeout_s=0.5)
    assert time.monotonic() - start < 60  # the 60-s item was cut off (three workers' start-ups on a busy machine)
    assert [o.timed_out for o in outcomes] == [False, True, False, False]
    assert outcomes[1].retried and not outcomes[2].retried
    # tried twice (the default retries=1), each try on its own worker
    assert (sleep_pool.timeouts, sleep_pool.retries, sleep_pool.restarts) == (1, 1, 2)
    assert [o.timed_out for o in sleep_pool.map([0.0], timeout_s=5)] == [False]  # a fresh worker took over


def test_without_retries_one_missed_deadline_times_an_item_out(sleep_pool):
    outcomes = sleep_pool.map([60.0, 0.0], timeout_s=0.5, retries=0)
    assert [o.timed_out for o in outcomes] == [True, False] and not outcomes[0].retried
    assert (sleep_pool.timeouts, sleep_pool.retries, sleep_pool.restarts) == (1, 0, 1)
    with pytest.raises(ValueError, match="retries must be an integer >= 0"):
        sleep_pool.map([0.0], timeout_s=1, retries=-1)


def test_an_item_that_missed_its_deadline_once_is_graded_on_the_retry(tmp_path):
    """What a busy machine does to a grade: the first try is slow (here: the first try of each item sleeps past
    the deadline), the second is not. The item is graded, not scored as timed out."""
    module = tmp_path / "slow_first_try.py"
    module.write_text(
        textwrap.dedent(f"""
        import os, time
        def grade(name):
            marker = os.path.join({str(tmp_path)!r}, name)
            if not os.path.exists(marker):
                open(marker, "w").close()
                time.sleep(30)
            return name.upper()
    """)
    )
    sys.path.insert(0, str(tmp_path))
    try:
        with DeadlinePool("slow_first_try:grade", workers=1, startup_timeout_s=60) as pool:
            outcomes = pool.map(["a", "b"], timeout_s=1.0)
    finally:
        sys.path.remove(str(tmp_path))
    assert [(o.value, o.timed_out, o.retried) for o in outcomes] == [("A", False, True), ("B", False, True)]
    assert (pool.timeouts, pool.retries) == (0, 2)


def test_an_answer_already_in_the_pipe_is_taken_after_the_deadline():
    """A caller kept from a CPU (a busy machine) may look only after the deadline has passed: an answer that came in
    time is already in the pipe, and it is taken, not counted as a missed deadline."""
    with DeadlinePool("math:sqrt", workers=1, startup_timeout_s=60) as pool:
        worker = pool._ready_worker([None])
        try:
            worker.send(([4.0, 9.0], 10))
            assert select.select([worker.process.stdout], [], [], 60)[0], "no answer within 60 s"
            time.sleep(0.2)  # both answers written (they are a few bytes each, written one after the other)
            late = time.monotonic() - 1.0
            assert worker.receive(late) == (True, (True, 2.0))
            assert worker.receive(late) == (True, (True, 3.0))
            assert worker.receive(late) == (False, None)  # nothing more in the pipe: the deadline holds
        finally:
            worker.stop(kill=True)


@pytest.fixture
def starved_pool():
    """A one-worker pool whose worker shares one CPU with 7 busy loops (pinned there with it): an item gets an eighth
    of a CPU at most, as on a 2-core machine with a load of 16, and less where other work runs."""
    if not os.path.exists(f"/proc/{os.getpid()}/schedstat"):
        pytest.skip("this kernel keeps no run-queue account (/proc/PID/schedstat): the deadline is wall time here")
    cpu = min(os.sched_getaffinity(0))
    pin = f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    with DeadlinePool("tests.gcpo_core.deadline_helpers:burn_cpu", workers=1, startup_timeout_s=60) as pool:
        pool.warm_up()
        (pid,) = pool.worker_pids()
        os.sched_setaffinity(pid, {cpu})
        busy = [subprocess.Popen([sys.executable, "-c", pin]) for _ in range(7)]
        try:
            yield pool
        finally:
            for process in busy:
                process.kill()
                process.wait()


class _ScriptedWorker:
    """A stand-in for a worker whose answer comes ``answer_at_s`` of wall time after it was made, having waited
    for a CPU for ``waiting`` of every second since: what the deadline counts, without depending on how busy
    this machine is."""

    exited, alive = False, True

    def __init__(self, answer_at_s: float, waiting: float):
        self.made, self.answer_at_s, self.waiting = time.monotonic(), answer_at_s, waiting

    def cpu_wait_s(self) -> float:
        return self.waiting * (time.monotonic() - self.made)

    def receive(self, deadline: float):
        answer_at = self.made + self.answer_at_s
        time.sleep(max(0.0, min(deadline, answer_at) - time.monotonic()))
        return (True, "answer") if time.monotonic() >= answer_at else (False, None)


def test_time_a_worker_waits_for_a_cpu_does_not_count_against_its_deadline():
    """An answer after 2 s of wall time, 90 % of it spent waiting for a CPU, is 0.2 s of the worker's own time:
    inside a 1-s deadline. The same answer from a worker that never waited is past it."""
    start = time.monotonic()
    assert DeadlinePool._receive_within(_ScriptedWorker(2.0, waiting=0.9), timeout_s=1.0) == (True, "answer")
    assert time.monotonic() - start >= 2.0
    start = time.monotonic()
    assert DeadlinePool._receive_within(_ScriptedWorker(2.0, waiting=0.0), timeout_s=1.0) == (False, None)
    assert 1.0 <= time.monotonic() - start < 2.0


def test_a_starved_worker_reports_its_wait_for_a_cpu(starved_pool):
    """The run-queue account the deadline discounts (/proc/PID/schedstat) grows while the worker is starved: 0.5 s of
    computing on an eighth of a CPU waits 3.5 s or more (the test asks for 1 s of it)."""
    (worker,) = [w for w in list(starved_pool._live) if w.alive]
    waited = worker.cpu_wait_s()
    (outcome,) = starved_pool.map([0.5], timeout_s=1000.0)
    assert outcome.value == 0.5 and not outcome.timed_out
    assert worker.cpu_wait_s() - waited > 1.0


def test_a_starved_item_still_ends_at_the_wall_cap(starved_pool, monkeypatch):
    """The run-queue delay extends a deadline only up to _WALL_CAP deadlines of wall time (here 1.2)."""
    monkeypatch.setattr(deadline_pool, "_WALL_CAP", 1.2)
    start = time.monotonic()
    (outcome,) = starved_pool.map([5.0], timeout_s=1.0, retries=0)
    assert outcome.timed_out and (starved_pool.timeouts, starved_pool.restarts) == (1, 1)
    # without the cap: 8 s or more, the 1 s of computing it then gets at an eighth of a CPU or less
    assert 1.2 <= time.monotonic() - start < 7.5


def test_a_worker_holding_the_gil_neither_blocks_the_caller_nor_outlives_its_deadline():
    result = {}

    def score():
        with DeadlinePool("math:factorial", workers=1, startup_timeout_s=60) as pool:
            result["outcomes"] = pool.map([5, GIL_HOG, 6], timeout_s=1.0)

    thread = threading.Thread(target=score)
    computed_before = time.process_time()
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert [o.timed_out for o in result["outcomes"]] == [False, True, False]
    assert result["outcomes"][0].value == 120 and result["outcomes"][2].value == 720
    # the hog computed in the worker, not in this process, whose threads it would have stopped while holding the GIL
    # for its two deadlines at least: this process's CPU time, which a busy machine does not inflate as it does the
    # gaps a sleeping thread sees
    assert time.process_time() - computed_before < 0.5


def test_the_initializer_runs_before_the_first_item_and_not_against_its_deadline():
    helpers = "tests.gcpo_core.deadline_helpers"
    with DeadlinePool(f"{helpers}:initialised", workers=1, initializer=f"{helpers}:slow_initializer") as pool:
        outcomes = pool.map([0, 1], timeout_s=0.5)
    assert [(o.value, o.timed_out) for o in outcomes] == [(True, False), (True, False)]


def test_an_exception_in_the_function_is_raised_with_its_traceback_after_the_batch():
    with DeadlinePool("math:sqrt", workers=1) as pool:
        with pytest.raises(WorkerError, match="math domain error"):
            pool.map([4.0, -1.0, 9.0], timeout_s=10)
        assert [o.value for o in pool.map([25.0], timeout_s=10)] == [5.0]  # the protocol is still in step


def test_prints_in_the_worker_do_not_corrupt_the_results():
    with DeadlinePool("builtins:print", workers=1) as pool:
        assert [o.value for o in pool.map(["hello", "\x00\x01 binary-looking"], timeout_s=10)] == [None, None]


def test_a_worker_killed_while_idle_is_replaced(sleep_pool):
    sleep_pool.warm_up()
    (pid,) = sleep_pool.worker_pids()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while sleep_pool.worker_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [o.timed_out for o in sleep_pool.map([0.0, 0.0], timeout_s=5)] == [False, False]


def test_works_when_its_pipes_get_descriptors_above_1024():
    """Ray actors hold many sockets: select.select would fail on the worker's pipe there."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard limit on open files is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.dup(0) for _ in range(1100)]
    try:
        with DeadlinePool("math:sqrt", workers=1) as pool, DeadlinePool("time:sleep", workers=1) as sleeper:
            assert [o.value for o in pool.map([4.0], timeout_s=10)] == [2.0]
            assert [o.timed_out for o in sleeper.map([5.0], timeout_s=0.2)] == [True]
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_worker_that_cannot_start_is_a_clear_error():
    with DeadlinePool("no_such_module_for_gcpo:fn", workers=1, startup_timeout_s=60) as pool:
        with pytest.raises(RuntimeError, match="No module named 'no_such_module_for_gcpo'"):
            pool.map([1], timeout_s=1)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="workers"):
        DeadlinePool("time:sleep", workers=0)
    with pytest.raises(ValueError, match="module:name"):
        DeadlinePool("time.sleep")
    with pytest.raises(ValueError, match="initializer must be 'module:name'"):
        DeadlinePool("time:sleep", initializer="time.time")
    with DeadlinePool("time:sleep") as pool, pytest.raises(ValueError, match="timeout_s"):
        pool.map([0.0], timeout_s=0)


def test_close_stops_the_workers_and_refuses_more_work():
    pool = DeadlinePool("time:sleep", workers=1)
    pool.warm_up()
    (pid,) = pool.worker_pids()
    pool.close()
    assert pool.worker_pids() == [] and not _running(pid)
    with pytest.raises(RuntimeError, match="closed"):
        pool.map([0.0], timeout_s=1)


def test_a_pool_dropped_without_close_stops_its_workers():
    import gc

    pool = DeadlinePool("time:sleep", workers=1)
    pool.warm_up()
    (pid,) = pool.worker_pids()
    del pool
    gc.collect()
    assert not _running(pid)


def test_workers_of_a_caller_that_died_end_even_when_stuck(tmp_path):
    """A caller killed mid-item leaves a worker stuck with the GIL: its own CPU-time limit ends it."""
    script = tmp_path / "caller.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, sys, threading, time
        from gcpo_core.rewards.deadline_pool import DeadlinePool
        busy = DeadlinePool("math:factorial", workers=1)
        idle = DeadlinePool("math:factorial", workers=1)
        idle.warm_up()
        threading.Thread(target=busy.map, args=([{GIL_HOG}], 1.0), daemon=True).start()
        time.sleep(0.5)
        print(" ".join(map(str, idle.worker_pids() + busy.worker_pids())), flush=True)
        time.sleep(0.5)
        os.kill(os.getpid(), 9)
    """)
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == -9, proc.stderr[-2000:]
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 120  # a few CPU seconds, however loaded the machine
    while time.monotonic() < deadline and any(_running(pid) for pid in pids):
        time.sleep(0.2)
    assert not any(_running(pid) for pid in pids)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False
