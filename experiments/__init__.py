"""Experiments run through the recipe, outside it: not in the wheel, run from a checkout (``scripts/*.sh`` put its
root first on ``PYTHONPATH``, as for the smoke runs: :mod:`tests.special_e2e`)."""
