#!/usr/bin/env bash
# GRPO baseline on Qwen3-4B-Base: the GCPO run's settings with verl's GRPO estimator.
#
# Usage: bash scripts/run_qwen3_4b_grpo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-grpo}"
METHOD_ARGS=(algorithm.adv_estimator=grpo)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
