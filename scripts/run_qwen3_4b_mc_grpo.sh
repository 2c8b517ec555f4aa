#!/usr/bin/env bash
# MC-GRPO baseline: GRPO with the group's median reward as baseline.
#
# Usage: bash scripts/run_qwen3_4b_mc_grpo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-mc-grpo}"
METHOD_ARGS=(algorithm.adv_estimator=mc_grpo)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
