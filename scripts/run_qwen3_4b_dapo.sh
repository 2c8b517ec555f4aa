#!/usr/bin/env bash
# DAPO baseline on Qwen3-4B-Base: the "GRPO" arm plus DAPO's dynamic sampling (groups whose responses are all
# right or all wrong are dropped and refilled), i.e. DAPO in full under the shared protocol.
# PROTOCOL=stock: verl-recipe's DAPO recipe (docs/protocol.md).
#
# Usage: bash scripts/run_qwen3_4b_dapo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-dapo}"
STOCK_PROTOCOL=dapo-recipe
METHOD_ARGS=(algorithm.adv_estimator=grpo
  algorithm.filter_groups.enable=true
  algorithm.filter_groups.metric=acc)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
