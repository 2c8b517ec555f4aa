"""The deadline pool: results in order, a stuck item killed at its deadline, the pool working afterwards."""

import os
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


def test_time_a_worker_waits_for_a_cpu_does_not_count_against_its_deadline(starved_pool, monkeypatch):
    """0.5 s of computing takes 4 s of wall time or more on an eighth of a CPU, past a 1-s deadline on every try if
    the deadline were wall time; the run-queue delay is not counted, so the item is graded on its first try (the
    wall cap, tested below, lifted: a busy machine may starve the worker further)."""
    monkeypatch.setattr(deadline_pool, "_WALL_CAP", 1000)
    start = time.monotonic()
    (outcome,) = starved_pool.map([0.5], timeout_s=1.0)
    took = time.monotonic() - start
    assert (outcome.value, outcome.timed_out, outcome.retried) == (0.5, False, False)
    assert took > 1.0, f"the worker was not starved ({took:.2f} s): this test checked nothing"
    assert (starved_pool.timeouts, starved_pool.retries, starved_pool.restarts) == (0, 0, 0)


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
