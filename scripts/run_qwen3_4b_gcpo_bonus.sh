#!/usr/bin/env bash
# GCPO ablation: no redistribution; the Shapley credit is added to the reward as a bonus (r + 0.5 phi).
#
# Usage: bash scripts/run_qwen3_4b_gcpo_bonus.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-gcpo-bonus}"
METHOD_ARGS=(algorithm.adv_estimator=gcpo
  algorithm.gcpo.credit.advantage=mix
  algorithm.gcpo.credit.mix_coef=0.5)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
