#!/usr/bin/env bash
# COPO baseline (arXiv 2508.04138) as its official code trains: a local (GRPO) and a global PPO loss, blended per
# response by the group's answer entropy (algorithm.copo.*, recipe/gcpo/baselines/copo.py; defaults: the released run_copo.sh).
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
