#!/usr/bin/env bash
# GCPO training end to end on one GPU, offline, meant to take minutes: proves an installation before cluster hours.
# The smoke itself (what it builds, runs and checks) is `python -m tests.special_e2e.smoke run`
# (tests/special_e2e/smoke/run.py); this runs it on the machine's GPU with the Python it finds (PYTHON, python3 by
# default), which must have verl 0.9.1 and vLLM.
#
# Usage: bash scripts/smoke_1gpu.sh [--dry-run] [--estimator gcpo|grpo] [--compare] [--steps N]
#                                   [--shape tiny|qwen3-0.6b|qwen3-1.7b]
#                                   [--kill-credit-actor-after S] [--kill-reward-worker-after S] [key=value ...]
# Options and environment: bash scripts/smoke_1gpu.sh --help (SMOKE_GPU_MEM_UTIL: vLLM's share of the GPU, 0.15).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
# the harness (tests/special_e2e/, not in the wheel) from this checkout, first on the path (verl's wheel installs
# a `tests` package of its own); every process of the run inherits it
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON:-python3}" -m tests.special_e2e.smoke run --device gpu "$@"
