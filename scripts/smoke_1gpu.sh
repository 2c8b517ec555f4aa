#!/usr/bin/env bash
# GCPO training end to end on one GPU, offline, meant to take minutes: proves an installation before cluster hours.
# The smoke itself (what it builds, runs and checks) is scripts/smoke.sh; this runs it on the machine's GPU with
# the Python it finds (PYTHON, python3 by default), which must have verl 0.9.1 and vLLM.
#
# Usage: bash scripts/smoke_1gpu.sh [--dry-run] [--estimator gcpo|grpo] [--compare] [--steps N]
#                                   [--kill-credit-actor-after S] [--kill-reward-worker-after S] [key=value ...]
# Options and environment: scripts/smoke.sh (SMOKE_GPU_MEM_UTIL: vLLM's share of the GPU, 0.15).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/smoke.sh" --device gpu "$@"
