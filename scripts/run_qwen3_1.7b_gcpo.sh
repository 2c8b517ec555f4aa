#!/usr/bin/env bash
# GCPO on Qwen3-1.7B-Base, DAPO-Math-17K (same settings as the 4B run).
#
# Usage: bash scripts/run_qwen3_1.7b_gcpo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-1.7B-Base}"
: "${EXPERIMENT_NAME:=qwen3-1.7b-gcpo}"
METHOD_ARGS=(algorithm.adv_estimator=gcpo)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
