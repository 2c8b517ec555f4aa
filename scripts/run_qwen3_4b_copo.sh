#!/usr/bin/env bash
# COPO baseline (arXiv 2508.04138): GRPO's advantage blended with the prompt's batch-standardised mean reward by the group's consistency entropy.
#
# Usage: bash scripts/run_qwen3_4b_copo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-copo}"
METHOD_ARGS=(algorithm.adv_estimator=copo)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
