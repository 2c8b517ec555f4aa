#!/usr/bin/env bash
# GCPO with DAPO's dynamic sampling on Qwen3-4B-Base, to compare like with like against run_qwen3_4b_dapo.sh:
# groups that carry no GCPO signal (all wrong, or all correct with identical texts) are dropped and refilled,
# read from the recipe reward's gcpo_signal metric (DAPO's acc filter would drop the all-correct groups of
# different solutions, where GCPO's extra signal lives). PROTOCOL=stock: verl-recipe's DAPO recipe.
#
# Usage: bash scripts/run_qwen3_4b_gcpo_dynamic.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-gcpo-dynamic}"
STOCK_PROTOCOL=dapo-recipe
METHOD_ARGS=(algorithm.adv_estimator=gcpo
  algorithm.filter_groups.enable=true
  algorithm.filter_groups.metric=gcpo_signal)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
