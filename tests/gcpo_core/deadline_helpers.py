"""Functions for the deadline pool's workers in tests (importable from a fresh interpreter)."""

import time

INITIALISED = False


def slow_initializer() -> None:
    global INITIALISED
    time.sleep(1.5)
    INITIALISED = True


def initialised(_item) -> bool:
    return INITIALISED
