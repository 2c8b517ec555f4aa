#!/usr/bin/env bash
# GCPO training end to end on a machine without GPUs: the real path of a cluster run (vLLM generating, the FSDP
# actor updating, the credit actor, reward workers, TransferQueue, checkpoint, resume) with a tiny policy on the
# CPU, in minutes. Run it before a cluster to prove an installation; CI runs it on every change.
#
# Usage: bash scripts/smoke_cpu.sh [--compare] [--steps N] [--estimator gcpo|grpo] [--dry-run]
#                                  [--kill-credit-actor-after S] [--kill-reward-worker-after S] [key=value ...]
#        bash scripts/smoke_cpu.sh --launcher run_qwen3_4b_gcpo.sh [--steps N] [key=value ...]
#   (first form)   the smoke (python -m tests.special_e2e.smoke run) on the CPU: tiny policy, three prompts x 8
#                  rollouts, STEPS steps, a checkpoint, one resumed step, the checks; --compare runs GCPO then
#                  GRPO and prints the ratio
#   --launcher L   one of scripts/run_*.sh with its own config (reward manager, overlong buffer, validation sets,
#                  dynamic batch sizes, data loader) but the tiny policy, small sizes and the CPU settings as
#                  overrides, on 30 prompts of the real data, for STEPS steps (default 2) with validation before
#                  and after and a checkpoint
# The first call builds the smoke's own environment (scripts/setup_cpu_env.sh: verl 0.9.1, the CPU build of vLLM
# 0.24.0 and torch 2.11.0, about 7.3 GB, in GCPO_CPU_VENV, default .venv-cpu) and says where; later calls reuse
# it. One CPU smoke at a time (two do not fit in 24 GiB): a second one waits for the first.
# Environment: GCPO_CPU_VENV, SMOKE_DIR (${TMPDIR:-/tmp}/gcpo-smoke-cpu), SMOKE_RUN_TIMEOUT (900 s a run) and
#   the rest of the smoke's (python -m tests.special_e2e.smoke run --help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${GCPO_CPU_VENV:=${ROOT}/.venv-cpu}"
: "${SMOKE_DIR:=${TMPDIR:-/tmp}/gcpo-smoke-cpu}"
export GCPO_CPU_VENV SMOKE_DIR

for arg in "$@"; do
  case "${arg}" in
    -h|--help)
      sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'
      echo "Options shared with the GPU smoke: python -m tests.special_e2e.smoke run --help"
      exit 0 ;;
  esac
done

# shellcheck source=scripts/cpu_env/enter.sh
source "${ROOT}/scripts/cpu_env/enter.sh"

cd "${ROOT}"
# the harness (tests/special_e2e/, not in the wheel) from this checkout, first on the path (verl's wheel installs
# a `tests` package of its own); every process of the run inherits it
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON}" -m tests.special_e2e.smoke run --device cpu "$@"
