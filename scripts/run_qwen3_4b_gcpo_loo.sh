#!/usr/bin/env bash
# GCPO ablation: leave-one-out credit instead of Shapley.
#
# Usage: bash scripts/run_qwen3_4b_gcpo_loo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-gcpo-loo}"
METHOD_ARGS=(algorithm.adv_estimator=gcpo
  algorithm.gcpo.credit.method=loo)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
