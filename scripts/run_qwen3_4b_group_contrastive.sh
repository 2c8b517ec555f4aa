#!/usr/bin/env bash
# Group Contrastive PO baseline (arXiv 2510.07790, not GCPO): GRPO, and a reference solution replaces one rollout of every all-wrong group. Trains on MATH (needs reference solutions: scripts/prepare_data.py --datasets math).
#
# Usage: bash scripts/run_qwen3_4b_group_contrastive.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-group-contrastive}"
: "${TRAIN_FILE:=${DATA_DIR:-${HOME}/data/gcpo}/train_math.parquet}"
METHOD_ARGS=(algorithm.adv_estimator=grpo
  algorithm.group_contrastive.enable=true)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
