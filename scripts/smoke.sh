#!/usr/bin/env bash
# GCPO training end to end on one GPU, offline, meant to take minutes: proves an installation before cluster hours.
#
# Builds a tiny Qwen3-architecture policy with random weights (recipe/gcpo/smoke/policy.py) and three prompts
# from the package's own data, then runs python -m recipe.gcpo.main_gcpo on one GPU (vLLM generating, the
# FSDP actor updating, the GCPO credit actor embedding on the same GPU) for STEPS steps, saves a checkpoint,
# resumes for one more step, and checks what the trainer wrote (recipe/gcpo/smoke/checks.py): both runs exit
# 0, the gcpo/* and timing_s/gcpo_* metrics are present and finite, all-wrong groups got zero advantage, the
# resumed run starts after the saved step. The reward marks about half the rollouts correct by a hash of the
# text (recipe/gcpo/smoke/reward.py), so all-wrong, mixed and all-correct groups all occur.
#
# Usage: bash scripts/smoke_1gpu.sh [--dry-run] [--estimator gcpo|grpo] [--compare] [--steps N] [key=value ...]
#   --dry-run         build the policy and data, compose and validate the run's config and print it (CPU)
#   --estimator E     the advantage estimator (default gcpo; grpo runs the same smoke with verl's GRPO)
#   --compare         run the GCPO smoke, then the GRPO smoke, and print their step times side by side
#   --steps N         steps before the checkpoint (default 2); the resumed run adds one
#   key=value         Hydra overrides for both runs (they win over everything here)
# Environment: SMOKE_DIR (${TMPDIR:-/tmp}/gcpo-smoke: model, data, one folder per estimator), PYTHON (python3),
#   SMOKE_GPU_MEM_UTIL (0.15: vLLM's share of the GPU), SMOKE_N_RESP (8 rollouts per prompt),
#   SMOKE_MAX_RESPONSE_LENGTH (64), SMOKE_ATTN (auto: flash_attention_2 with padding removal when flash-attn
#   is installed, else sdpa without it; or flash_attention_2 | sdpa).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

: "${PYTHON:=python3}"
: "${SMOKE_DIR:=${TMPDIR:-/tmp}/gcpo-smoke}"
: "${SMOKE_GPU_MEM_UTIL:=0.15}"
: "${SMOKE_N_RESP:=8}"
: "${SMOKE_MAX_RESPONSE_LENGTH:=64}"
: "${SMOKE_ATTN:=auto}"
# the smoke data holds three prompts (correct rates 0, 0.5, 1): one batch is all of them
PROMPTS_PER_STEP=3
MAX_PROMPT_LENGTH=512
RUN_MARKER=".gcpo-smoke-run"

usage() { sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; }

estimator_given=""
steps=2
dry_run=0
compare=0
overrides=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --compare) compare=1 ;;
    --estimator)
      [[ $# -ge 2 ]] || { echo "error: --estimator needs a value (gcpo or grpo)" >&2; exit 2; }
      estimator_given="$2"; shift ;;
    --estimator=*) estimator_given="${1#--estimator=}" ;;
    --steps)
      [[ $# -ge 2 ]] || { echo "error: --steps needs a value" >&2; exit 2; }
      steps="$2"; shift ;;
    --steps=*) steps="${1#--steps=}" ;;
    -h|--help) usage; exit 0 ;;
    --*) echo "error: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) overrides+=("$1") ;;
  esac
  shift
done
if [[ "${compare}" == "1" ]]; then
  [[ -z "${estimator_given}" ]] || { echo "error: --compare runs gcpo and grpo; leave out --estimator" >&2; exit 2; }
  estimators=(gcpo grpo)
else
  estimators=("${estimator_given:-gcpo}")
fi
for estimator in "${estimators[@]}"; do
  [[ "${estimator}" == "gcpo" || "${estimator}" == "grpo" ]] || {
    echo "error: --estimator must be gcpo or grpo, got '${estimator}'" >&2; exit 2; }
done
[[ "${steps}" =~ ^[1-9][0-9]*$ ]] || { echo "error: --steps must be a positive integer, got '${steps}'" >&2; exit 2; }

# offline: the encoder and the tiny policy are local files
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
# always a local Ray of its own: the run's environment (the metrics file's path) reaches its workers that way
unset RAY_ADDRESS

# the attention implementation of the FSDP actor (vLLM has its own kernels)
attention_args() {
  local attn="${SMOKE_ATTN}"
  if [[ "${attn}" == "auto" ]]; then
    if "${PYTHON}" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("flash_attn") is None)'; then
      attn=flash_attention_2
    else
      attn=sdpa
    fi
  fi
  case "${attn}" in
    # verl's default: packed sequences through flash-attn's varlen kernels (what the launchers run)
    flash_attention_2) ATTN_ARGS=("actor_rollout_ref.model.use_remove_padding=true") ;;
    # without flash-attn (vLLM's wheel does not bring it): padded batches through PyTorch's SDPA
    sdpa) ATTN_ARGS=("actor_rollout_ref.model.use_remove_padding=false"
                     "+actor_rollout_ref.model.override_config.attn_implementation=sdpa") ;;
    *) echo "error: SMOKE_ATTN must be auto, flash_attention_2 or sdpa, got '${attn}'" >&2; exit 2 ;;
  esac
  echo "smoke: FSDP actor attention: ${attn}" >&2
}
ATTN_ARGS=()
attention_args

# the Hydra overrides of one run: $1 estimator, $2 run folder, $3 total training steps
trainer_args() {
  local estimator="$1" run_dir="$2" total_steps="$3"
  local seq_len=$((MAX_PROMPT_LENGTH + SMOKE_MAX_RESPONSE_LENGTH))
  local args=(
    "algorithm.adv_estimator=${estimator}"
    "data.train_files=${SMOKE_DIR}/data/train.parquet"
    "data.val_files=${SMOKE_DIR}/data/val.parquet"
    "data.train_batch_size=${PROMPTS_PER_STEP}"
    "data.max_prompt_length=${MAX_PROMPT_LENGTH}"
    "data.max_response_length=${SMOKE_MAX_RESPONSE_LENGTH}"
    "data.truncation=error"
    "data.dataloader_num_workers=0"
    "actor_rollout_ref.model.path=${SMOKE_DIR}/model"
    "actor_rollout_ref.model.enable_gradient_checkpointing=true"
    "actor_rollout_ref.actor.optim.lr=1e-6"
    "actor_rollout_ref.actor.ppo_mini_batch_size=${PROMPTS_PER_STEP}"
    "actor_rollout_ref.actor.use_dynamic_bsz=true"
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((4 * seq_len))"
    "actor_rollout_ref.actor.use_kl_loss=false"
    "actor_rollout_ref.actor.entropy_coeff=0"
    "actor_rollout_ref.rollout.name=vllm"
    "actor_rollout_ref.rollout.n=${SMOKE_N_RESP}"
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1"
    "actor_rollout_ref.rollout.gpu_memory_utilization=${SMOKE_GPU_MEM_UTIL}"
    "actor_rollout_ref.rollout.enforce_eager=true"
    # random weights: vLLM starts from dummy weights and gets the FSDP actor's on the first weight sync
    "actor_rollout_ref.rollout.load_format=dummy"
    "actor_rollout_ref.rollout.max_num_batched_tokens=$((4 * seq_len))"
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true"
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$((4 * seq_len))"
    "actor_rollout_ref.rollout.agent.num_workers=2"
    "reward.custom_reward_function.path=pkg://recipe.gcpo.smoke.reward"
    "reward.custom_reward_function.name=compute_score"
    "reward.num_workers=2"
    "algorithm.use_kl_in_reward=false"
    "trainer.logger=[\"console\",\"file\"]"
    "trainer.project_name=gcpo-smoke"
    "trainer.experiment_name=${estimator}"
    "trainer.nnodes=1"
    "trainer.n_gpus_per_node=1"
    "trainer.total_epochs=1000"
    "trainer.total_training_steps=${total_steps}"
    "trainer.save_freq=${steps}"
    "trainer.test_freq=-1"
    "trainer.val_before_train=false"
    "trainer.resume_mode=auto"
    "trainer.default_local_dir=${run_dir}/ckpt"
    "trainer.rollout_data_dir=${run_dir}/rollouts"
  )
  args+=("${ATTN_ARGS[@]}")
  if [[ "${estimator}" == "gcpo" ]]; then
    args+=(
      "algorithm.gcpo.dump.every_n_steps=1"
      "algorithm.gcpo.dump.max_groups=64"
      "algorithm.gcpo.dump.directory=${run_dir}/gcpo_dumps"
    )
  fi
  printf '%s\n' "${args[@]}" ${overrides[@]+"${overrides[@]}"}
}

sampler_pid=""
start_sampler() {  # $1: output file; the sampler also stops by itself when this script is gone
  sampler_pid=""
  if command -v nvidia-smi > /dev/null; then
    "${PYTHON}" -m recipe.gcpo.smoke gpu-memory --out "$1" --parent-pid "$$" &
    sampler_pid=$!
  fi
}
stop_sampler() {
  if [[ -n "${sampler_pid}" ]]; then
    kill -TERM "${sampler_pid}" 2> /dev/null || true
    wait "${sampler_pid}" 2> /dev/null || true
    sampler_pid=""
  fi
}
trap stop_sampler EXIT

now() { date +%s.%N; }

# one trainer run: $1 estimator, $2 run folder, $3 run number, $4 total steps; writes wall_run<N>.txt
train() {
  local estimator="$1" run_dir="$2" run="$3" total_steps="$4"
  local args=() line start rc=0
  while IFS= read -r line; do args+=("${line}"); done < <(trainer_args "${estimator}" "${run_dir}" "${total_steps}")
  echo "+ ${PYTHON} -m recipe.gcpo.main_gcpo ${args[*]}"
  start_sampler "${run_dir}/gpu_memory_run${run}.json"
  start="$(now)"
  VERL_FILE_LOGGER_PATH="${run_dir}/metrics_run${run}.jsonl" \
    "${PYTHON}" -m recipe.gcpo.main_gcpo "${args[@]}" 2>&1 | tee "${run_dir}/log_run${run}.txt" || rc=$?
  awk -v a="${start}" -v b="$(now)" 'BEGIN { printf "%.1f\n", b - a }' > "${run_dir}/wall_run${run}.txt"
  stop_sampler
  if [[ "${rc}" != "0" ]]; then
    echo "[FAIL] ${estimator} run ${run} (to step ${total_steps}) exited ${rc}; log: ${run_dir}/log_run${run}.txt"
    return 1
  fi
  echo "[PASS] ${estimator} run ${run} (to step ${total_steps}) exited 0"
}

# a fresh run folder: resume_mode=auto would otherwise pick up an earlier smoke's checkpoints
fresh_run_dir() {
  local run_dir="$1"
  if [[ -e "${run_dir}" && ! -f "${run_dir}/${RUN_MARKER}" ]]; then
    echo "error: ${run_dir} exists and is not a smoke run folder; set SMOKE_DIR elsewhere" >&2
    return 1
  fi
  rm -rf "${run_dir}"
  mkdir -p "${run_dir}"
  touch "${run_dir}/${RUN_MARKER}"
}

# the whole smoke of one estimator (called in an || list, where set -e is off: every failure returns)
smoke() {
  local estimator="$1"
  local run_dir="${SMOKE_DIR}/${estimator}"
  local args=() line
  if [[ "${dry_run}" == "1" ]]; then
    while IFS= read -r line; do args+=("${line}"); done < <(trainer_args "${estimator}" "${run_dir}" "${steps}")
    echo "# smoke ${estimator}: the first run (steps 1-${steps}); the resumed run differs only in" \
      "trainer.total_training_steps=$((steps + 1)) and its metrics file"
    GCPO_DRY_RUN=1 "${PYTHON}" -m recipe.gcpo.main_gcpo "${args[@]}" || return 1
    return 0
  fi
  fresh_run_dir "${run_dir}" || return 1
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "${run_dir}/device.txt" || true
  fi
  train "${estimator}" "${run_dir}" 1 "${steps}" || return 1
  train "${estimator}" "${run_dir}" 2 "$((steps + 1))" || return 1
  "${PYTHON}" -m recipe.gcpo.smoke check --run-dir "${run_dir}" --estimator "${estimator}" --steps "${steps}" \
    --groups-per-step "${PROMPTS_PER_STEP}"
}

"${PYTHON}" -m recipe.gcpo.smoke build --out "${SMOKE_DIR}"
failed=()
for estimator in "${estimators[@]}"; do
  smoke "${estimator}" || failed+=("${estimator}")
done
if [[ "${compare}" == "1" && "${dry_run}" == "0" && ${#failed[@]} -eq 0 ]]; then
  "${PYTHON}" -m recipe.gcpo.smoke compare --gcpo "${SMOKE_DIR}/gcpo" --grpo "${SMOKE_DIR}/grpo"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "smoke FAILED: ${failed[*]}" >&2
  exit 1
fi
