#!/usr/bin/env bash
# MC-GRPO baseline (arXiv 2601.22582): G + 1 rollouts a prompt, the median one the pivot (left out), the others
# (r - median) / (MAD + 1e-3) (algorithm.mc_grpo.*). At the paper's small group size: G = 8, so 9 rollouts (N_RESP).
#
# Usage: bash scripts/run_qwen3_4b_mc_grpo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-mc-grpo}"
: "${N_RESP:=9}"
METHOD_ARGS=(algorithm.adv_estimator=mc_grpo)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
