#!/usr/bin/env bash
# "GRPO" baseline on Qwen3-4B-Base: verl's GRPO estimator under the shared protocol, which is DAPO's trainer
# settings without dynamic sampling (clip-higher 0.2/0.28, token-mean loss, no KL loss, overlong length shaping),
# so it differs from the GCPO run only in algorithm.adv_estimator. It is not verl's stock GRPO example (KL loss,
# clip 0.2, no length shaping): PROTOCOL=stock runs that (docs/protocol.md).
#
# Usage: bash scripts/run_qwen3_4b_grpo.sh [--dry-run] [hydra.key=value ...]
# Settings: scripts/common.sh (environment variables; command-line overrides win).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:=Qwen/Qwen3-4B-Base}"
: "${EXPERIMENT_NAME:=qwen3-4b-grpo}"
METHOD_ARGS=(algorithm.adv_estimator=grpo)
# shellcheck source=scripts/common.sh
source "${SCRIPT_DIR}/common.sh"
gcpo_launch "$@"
