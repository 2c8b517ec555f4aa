"""Functions for the deadline pool's workers in tests (importable from a fresh interpreter)."""

import time

INITIALISED = False


def slow_initializer() -> None:
    global INITIALISED
    time.sleep(1.5)
    INITIALISED = True


def initialised(_item) -> bool:
    return INITIALISED


def burn_cpu(seconds: float) -> float:
    """Compute for ``seconds`` of this process's CPU time (however long that takes on the wall clock)."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
    return seconds
