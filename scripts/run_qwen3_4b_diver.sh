#!/usr/bin/env bash
# DIVER baseline (arXiv 2509.26209) on Qwen3-4B-Base: reward + lambda * the response's diversity within its group
# (correct responses only, clipped, lambda decaying over the first 100 steps), normalised like GRPO; the settings
# are algorithm.diver.* (recipe/gcpo/config/gcpo_trainer.yaml, gcpo_core/baselines/diver.py).
#
# Usage: bash scripts/run_qwen3_4b_diver.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-diver}"
METHOD_ARGS=(algorithm.adv_estimator=diver)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
