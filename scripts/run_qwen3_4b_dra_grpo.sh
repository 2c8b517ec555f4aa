#!/usr/bin/env bash
# DRA-GRPO baseline (arXiv 2505.09655): each reward divided by 1 + its summed similarity to the other completions.
#
# Usage: bash scripts/run_qwen3_4b_dra_grpo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-dra-grpo}"
METHOD_ARGS=(algorithm.adv_estimator=dra_grpo)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
