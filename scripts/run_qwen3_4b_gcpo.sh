#!/usr/bin/env bash
# GCPO on Qwen3-4B-Base, DAPO-Math-17K: Shapley credit over the team's log-det volume (recipe/gcpo).
#
# Usage: bash scripts/run_qwen3_4b_gcpo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-gcpo}"
METHOD_ARGS=(algorithm.adv_estimator=gcpo)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
