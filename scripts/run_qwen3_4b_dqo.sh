#!/usr/bin/env bash
# DQO-style baseline (arXiv 2509.04784): reward + alpha * leave-one-out log-det diversity of the unweighted embeddings (alpha = credit.mix_coef).
#
# Usage: bash scripts/run_qwen3_4b_dqo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-dqo}"
METHOD_ARGS=(algorithm.adv_estimator=dqo
  algorithm.gcpo.credit.mix_coef=0.5)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
