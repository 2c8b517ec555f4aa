#!/usr/bin/env bash
# "Div-R1" baseline on Qwen3-4B-Base, our reading of the GCPO paper's name: Diversity-Aware Policy Optimization
# (arXiv 2505.23433), verl's GRPO loss minus lambda (0.01) * the token entropy of the correct responses; the
# settings are algorithm.div_r1.* (recipe/gcpo/baselines/div_r1.py, gcpo_core/baselines/div_r1.py).
#
# Usage: bash scripts/run_qwen3_4b_div_r1.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-div-r1}"
METHOD_ARGS=(algorithm.adv_estimator=grpo
  algorithm.div_r1.enable=true)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
