"""The project's end-to-end runs and what they import, outside the recipe (verl keeps its e2e runs in
``tests/special_e2e/`` too): the smoke harness (:mod:`.smoke`, ``python -m tests.special_e2e.smoke``) and verl's
CPU platform of the CPU runs (:mod:`.cpu_platform`).

Not in the wheel: every process of a run (the driver, each Ray worker, vLLM's worker processes) imports these
modules from the checkout, so whatever starts a run puts the checkout's root first on ``PYTHONPATH``
(:func:`checkout_path`; ``scripts/smoke_cpu.sh``, ``scripts/smoke_1gpu.sh``, ``scripts/smoke_cluster_cpu.sh`` and
``scripts/miniature.sh`` export it, and the processes inherit it). First, not merely present: verl's wheel installs a ``tests`` package of
its own into site-packages, which would hide this one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]


def checkout_path(pythonpath: Optional[str] = None) -> str:
    """A ``PYTHONPATH`` value: the checkout's root, then the entries of ``pythonpath`` (the root once)."""
    rest = [entry for entry in (pythonpath or "").split(os.pathsep) if entry and entry != str(ROOT)]
    return os.pathsep.join([str(ROOT), *rest])
