#!/usr/bin/env bash
# DAPO baseline on Qwen3-4B-Base: GRPO plus DAPO dynamic sampling (groups with equal accuracy are dropped and refilled).
#
# Usage: bash scripts/run_qwen3_4b_dapo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-dapo}"
METHOD_ARGS=(algorithm.adv_estimator=grpo
  algorithm.filter_groups.enable=true
  algorithm.filter_groups.metric=acc
  algorithm.filter_groups.max_inflight_gen_batches=2)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
