"""Worker processes that apply one function to items, each item within a deadline, from any thread.

Why: math-verify bounds its work with signal alarms, which only work on a process's main thread; verl calls
reward functions from executor threads, and one pathological answer (``\\boxed{9^{9^{9^{9^{9}}}}}``) then runs
sympy's big-integer arithmetic with the GIL held for ever: the whole process stalls, silently. Nothing inside
a process can interrupt that, but a process can be killed. :class:`DeadlinePool` sends items to worker
processes and reads their results one by one; an item whose result is not back by its deadline has its worker
killed and replaced, is reported as timed out, and the items after it go to the fresh worker.

What the deadline counts: the item's wall time less the time its worker spent waiting for a CPU (Linux's
``/proc/PID/schedstat``, the scheduler's run-queue delay), so a busy machine does not time out a correct answer
that a quiet one grades in a second, while an item that computes, or blocks, past its deadline is killed as before;
``_WALL_CAP`` bounds the wall time of a starved item. Where the kernel keeps no such account, the deadline is wall
time.

Why not ``concurrent.futures`` / ``multiprocessing`` / pebble: a multi-threaded caller cannot safely ``fork``,
and with ``spawn`` or ``forkserver`` every worker re-runs the caller's ``__main__`` script, so a plain script
without ``if __name__ == "__main__"`` that scores answers breaks (pebble's ProcessPool included: its worker
re-ran such a script and raised RuntimeError). The workers here are plain subprocesses (fork and exec at once,
safe in a threaded caller) running this module with the caller's ``sys.path``: nothing of the caller's
``__main__`` is imported, so they work the same in scripts, notebooks, pytest and Ray actors. They are also
cheaper per call: ``dev/bench_scorer.py`` measured a round trip of 66 us here against 175 us for pebble's
ProcessPool in the same run.

Protocol: length-prefixed pickles over the worker's own pipes (the worker's stdout is redirected to its
stderr, so a stray print cannot corrupt it). A worker whose caller died exits at the end of its input; one
stuck in an item after its caller died is ended by the CPU-time limit it sets itself before each item.
"""

from __future__ import annotations

import importlib
import math
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from typing import Any, Optional, Sequence

_HEADER = struct.Struct(">Q")
_READY = "ready"
# CPU seconds a worker may spend on one item beyond its deadline before it ends itself (it only
# matters when the caller is gone: a live caller kills the worker at the deadline)
_CPU_MARGIN_S = 2
# the most wall time one try of an item may take, in deadlines, however long its worker waited for a CPU
_WALL_CAP = 20


@dataclass(frozen=True)
class Outcome:
    """One item's result, or ``timed_out`` when its worker missed the deadline (or died on it) on every try;
    ``retried``: a try before the last missed it (a busy machine, not a pathological item)."""

    value: Any = None
    timed_out: bool = False
    retried: bool = False


class WorkerError(RuntimeError):
    """The function raised in a worker; the message carries the worker's traceback."""


class _Worker:
    """One worker subprocess and the parent's end of its pipes."""

    def __init__(self, function: str, initializer: Optional[str], live: "set[_Worker]"):
        self._live = live
        live.add(self)
        self._stderr = tempfile.TemporaryFile()
        bootstrap = (
            f"import sys; sys.path[:] = {list(sys.path)!r}; "
            f"from gcpo_core.rewards.deadline_pool import _serve; _serve({function!r}, {initializer!r})"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", bootstrap],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            close_fds=True,
        )
        self._buffer = bytearray()
        self.ready = False
        self.exited = False  # its output ended: it died (or exited), whatever poll() says yet
        # poll, not select.select: that fails on descriptors >= 1024, common in Ray actors
        self._poller = select.poll()
        self._poller.register(self.process.stdout.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def cpu_wait_s(self) -> float:
        """Seconds the worker has spent runnable but waiting for a CPU (0 where the kernel does not say)."""
        try:
            with open(f"/proc/{self.process.pid}/schedstat") as stats:
                return int(stats.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    def send(self, message: Any) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.write(_HEADER.pack(len(payload)) + payload)
        self.process.stdin.flush()

    def receive(self, deadline: float) -> tuple[bool, Any]:
        """(True, message), or (False, None) when ``deadline`` (time.monotonic) passes or the worker dies first."""
        fd = self.process.stdout.fileno()
        while True:
            if len(self._buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self._buffer)
                if len(self._buffer) >= _HEADER.size + size:
                    message = pickle.loads(bytes(self._buffer[_HEADER.size : _HEADER.size + size]))
                    del self._buffer[: _HEADER.size + size]
                    return True, message
            remaining = deadline - time.monotonic()
            # what is already in the pipe is taken even past the deadline: a caller kept from a CPU (a busy
            # machine) looks late, and an answer that came in time is not a missed deadline
            if self._poller.poll(max(0, math.ceil(remaining * 1000))):
                chunk = os.read(fd, 1 << 20)
                if not chunk:  # the worker exited
                    self.exited = True
                    return False, None
                self._buffer += chunk
            elif remaining <= 0:
                return False, None

    def stderr_tail(self, chars: int = 3000) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", errors="replace")[-chars:]

    def stop(self, kill: bool) -> None:
        """End the worker: at once (``kill``), or by closing its input and killing it if it lingers."""
        self._live.discard(self)
        if kill:
            self.process.kill()
        else:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=None if kill else 2.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self._stderr):
            try:
                stream.close()
            except OSError:
                pass


class DeadlinePool:
    """Up to ``workers`` processes applying ``function`` ("module:name", importable in a fresh interpreter) to
    items, each within ``timeout_s`` (wall time less its worker's wait for a CPU). Thread-safe: each :meth:`map`
    call holds one worker for its items, concurrent calls use different workers (started on first need, so a single
    caller uses one).

    Args:
        function: the function's import path; it takes one picklable item and returns a picklable value.
        workers: the most worker processes at once.
        startup_timeout_s: how long a new worker may take to start before :meth:`map` raises.
        initializer: "module:name" of a function a worker calls once before its first item (imports, caches:
            work that must not count against an item's deadline).
    """

    def __init__(
        self, function: str, workers: int = 2, startup_timeout_s: float = 120.0, initializer: Optional[str] = None
    ):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        for role, path in (("function", function), ("initializer", initializer)):
            if path is not None and ":" not in path:
                raise ValueError(f"{role} must be 'module:name', got {path!r}")
        if not sys.executable:
            raise RuntimeError("DeadlinePool needs sys.executable to start its workers")
        self.function = function
        self.initializer = initializer
        self.workers = workers
        self.startup_timeout_s = startup_timeout_s
        self._slots: "queue.LifoQueue[list[Optional[_Worker]]]" = queue.LifoQueue()
        for _ in range(workers):
            self._slots.put([None])
        self._closed = False
        self._pid = os.getpid()
        # the workers alive now; whatever is left when the pool is garbage-collected or the interpreter exits is
        # stopped then
        self._live: set[_Worker] = set()
        weakref.finalize(self, _stop_all, self._live)
        self._lock = threading.Lock()
        self.timeouts = 0  # items timed out (on every try) since the pool started
        self.retries = 0  # items tried again after missing their deadline
        self.restarts = 0  # workers replaced after a timeout or a death

    def map(self, items: Sequence[Any], timeout_s: float, retries: int = 1) -> list[Outcome]:
        """``function(item)`` for each item, in order; an item not done within ``timeout_s`` seconds (counted from
        when its worker starts on it, after the worker's start-up and initializer: wall time less the time the worker
        waited for a CPU, and at most ``_WALL_CAP`` deadlines of wall time) is tried again on a fresh worker, up to
        ``retries`` times, and then is ``Outcome(timed_out=True)``: the deadline bounds a pathological item (at
        ``retries + 1`` deadlines), while an item that missed it for another reason (a worker slowed by memory
        pressure, or starved past the cap) gets another chance.

        Raises:
            WorkerError: ``function`` raised on an item (after the other items are done).
            RuntimeError: a worker could not start (its stderr is in the message), or the pool is closed.
        """
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        items = list(items)
        if not items:
            return []
        if self._closed:
            raise RuntimeError("this DeadlinePool is closed")
        if os.getpid() != self._pid:
            raise RuntimeError("a DeadlinePool cannot be used in a forked child process: create one there")
        outcomes: list[Optional[Outcome]] = [None] * len(items)
        missed = [0] * len(items)  # deadlines each item has missed
        errors: list[str] = []
        slot = self._slots.get()
        try:
            start = 0
            while start < len(items):
                worker = self._ready_worker(slot)
                request = (items[start:], math.ceil(timeout_s) + _CPU_MARGIN_S)
                try:
                    worker.send(request)
                except OSError:  # it died while idle (killed from outside): one fresh worker, one more try
                    worker.stop(kill=True)
                    slot[0] = None
                    worker = self._ready_worker(slot)
                    worker.send(request)
                index = start
                while index < len(items):
                    received, message = self._receive_within(worker, timeout_s)
                    if not received:
                        break
                    ok, value = message
                    if ok:
                        outcomes[index] = Outcome(value, retried=missed[index] > 0)
                    else:
                        outcomes[index] = Outcome(retried=missed[index] > 0)
                        errors.append(f"item {index}: {value}")
                    index += 1
                if index < len(items):  # the worker missed the deadline on this item, or died on it
                    worker.stop(kill=True)
                    slot[0] = self._spawn()  # its replacement starts up while we go on
                    missed[index] += 1
                    gave_up = missed[index] > retries
                    with self._lock:
                        self.restarts += 1
                        if gave_up:
                            self.timeouts += 1
                        else:
                            self.retries += 1
                    if gave_up:
                        outcomes[index] = Outcome(timed_out=True, retried=retries > 0)
                        index += 1
                start = index
        finally:
            if self._closed and slot[0] is not None:
                slot[0].stop(kill=False)
                slot[0] = None
            self._slots.put(slot)
        if errors:
            raise WorkerError(f"{self.function} raised in a worker:\n" + "\n".join(errors))
        return outcomes  # type: ignore[return-value]

    @staticmethod
    def _receive_within(worker: _Worker, timeout_s: float) -> tuple[bool, Any]:
        """The worker's next message, waiting until the wall time since now, less the time the worker waited for a
        CPU meanwhile, reaches ``timeout_s`` (a computing or blocked worker gets no more), or the wall time reaches
        ``_WALL_CAP`` deadlines."""
        # the run-queue account is read before the clock at the start and after it at each check, so that time this
        # (maybe starved) caller loses between the two reads is counted for the worker, never against it
        waited_at_start = worker.cpu_wait_s()
        start = time.monotonic()
        cap = start + _WALL_CAP * timeout_s
        deadline = start + timeout_s
        while True:
            received, message = worker.receive(deadline)
            if received or worker.exited or not worker.alive:
                return received, message
            now = time.monotonic()
            left = timeout_s - (now - start - (worker.cpu_wait_s() - waited_at_start))
            if left <= 0 or now >= cap:
                return False, None
            deadline = min(now + left, cap)

    def _ready_worker(self, slot: list[Optional[_Worker]]) -> _Worker:
        worker = slot[0]
        if worker is None or not worker.alive:
            if worker is not None:
                worker.stop(kill=True)
            worker = slot[0] = self._spawn()
        if not worker.ready:
            received, message = worker.receive(time.monotonic() + self.startup_timeout_s)
            if not received or message != _READY:
                detail = worker.stderr_tail()
                worker.stop(kill=True)
                slot[0] = None
                raise RuntimeError(
                    f"a worker for {self.function} did not start within {self.startup_timeout_s:g} s"
                    f" (exit code {worker.process.returncode}); its stderr:\n{detail}"
                )
            worker.ready = True
        return worker

    def _spawn(self) -> _Worker:
        return _Worker(self.function, self.initializer, self._live)

    def worker_pids(self) -> list[int]:
        """Process ids of the workers alive now (busy or idle)."""
        return sorted(w.process.pid for w in list(self._live) if w.alive)

    def warm_up(self) -> None:
        """Start one worker now (imports take a second or two) instead of on the first :meth:`map`."""
        slot = self._slots.get()
        try:
            self._ready_worker(slot)
        finally:
            self._slots.put(slot)

    def close(self) -> None:
        """Stop the idle workers now; a worker busy in :meth:`map` stops when that call returns."""
        self._closed = True
        idle = []
        while True:
            try:
                idle.append(self._slots.get_nowait())
            except queue.Empty:
                break
        for slot in idle:
            if slot[0] is not None:
                slot[0].stop(kill=False)
                slot[0] = None
            self._slots.put(slot)

    def __enter__(self) -> "DeadlinePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _stop_all(workers: "set[_Worker]") -> None:
    for worker in list(workers):
        worker.stop(kill=False)


# ----------------------------------------------------------------------------------------------- worker side
def _load(path: str) -> Any:
    module_name, name = path.split(":")
    return getattr(importlib.import_module(module_name), name)


def _serve(function: str, initializer: Optional[str] = None) -> None:
    """A worker's main loop: read (items, cpu_seconds) requests from stdin, answer each item as it is done."""
    import resource

    inbox = os.fdopen(os.dup(0), "rb")
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints from the function go to stderr, never into the protocol
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the CPU-time limit below must not write core files
    fn = _load(function)
    if initializer:
        _load(initializer)()

    def write(message: Any) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        outbox.write(_HEADER.pack(len(payload)) + payload)
        outbox.flush()

    write(_READY)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    while True:
        header = inbox.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # the caller closed our input (or died)
        (size,) = _HEADER.unpack(header)
        items, cpu_seconds = pickle.loads(inbox.read(size))
        for item in items:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            limit = math.ceil(usage.ru_utime + usage.ru_stime) + cpu_seconds
            if hard == resource.RLIM_INFINITY or limit <= hard:
                resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))
            try:
                write((True, fn(item)))
            except Exception:
                write((False, traceback.format_exc(limit=-8)))
