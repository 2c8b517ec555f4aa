#!/usr/bin/env bash
# Shared settings of every launcher (sourced by scripts/run_*.sh, never run by itself).
#
# Qwen3 base models on DAPO-Math-17K with DAPO's trainer settings (clip-higher 0.2/0.28, token-mean loss,
# no KL, overlong reward shaping: the Hydra config group protocol=shared), identical for GCPO and its
# baselines; a launcher only sets METHOD_ARGS (the estimator) and MODEL_PATH / EXPERIMENT_NAME. The entry point
# checks the model path (a hub id with the hub off, a path that is not an absolute folder) before anything
# starts. Everything below can be changed with an environment variable, and any Hydra override given on the
# command line wins over all of it.
#
#   NNODES (1)  GPUS_PER_NODE (8)  MODEL_PATH  DATA_DIR (~/data/gcpo)  TRAIN_FILE ($DATA_DIR/train.parquet)
#   CKPT_DIR (~/checkpoints)
#   LOGGER ('["console","wandb"]' if WANDB_API_KEY is set, else '["console"]')  PROJECT_NAME (gcpo-verl)
#   EXPERIMENT_NAME  TRAIN_BATCH_SIZE (256 prompts)  N_RESP (16 rollouts per prompt)  MINI_BATCH_SIZE (64)
#   MAX_PROMPT_LENGTH (2048)  MAX_RESPONSE_LENGTH (8192)  OVERLONG_BUFFER (4096)  LR (1e-6)
#   TOTAL_STEPS (500)  VAL_SETS ("aime24 aime25 math500 amc23")  VAL_N (16)  TP_SIZE (1)  GPU_MEM_UTIL (0.7)
#   RAY_ADDRESS (an existing Ray cluster: head_ip:6379)  RAY_NUM_CPUS (fixed CPU count for a local Ray)
#   DRY_RUN=1 or --dry-run: print the composed, validated config and stop (no GPU, no Ray).
#   TRAINER_MODE (sync): verl's V1 trainer mode, with the settings of verl's own asynchronous examples
#     (docs/advance/v1_async_trainer.md): colocate_async: one warm-up batch in flight
#     (trainer.v1.colocate_async.num_warmup_batches=1); separate_async: a rollout pool of its own beside the
#     trainer's, ROLLOUT_NNODES (NNODES) x ROLLOUT_GPUS_PER_NODE (half of GPUS_PER_NODE, the other half training),
#     weights over CHECKPOINT_ENGINE (nccl), TRAIN_BATCH_SIZE / MINI_BATCH_SIZE mini-batches a step
#     (trainer.v1.separate_async.parameter_sync_step), one warm-up batch.

# ---- protocol (docs/protocol.md) ------------------------------------------------------------------------------
# PROTOCOL selects the hyperparameters every arm shares:
#   shared       (default) this project's comparison protocol: DAPO's trainer settings without dynamic sampling
#                (the arms differ only in their method's keys; docs/protocol.md says why each value is what it is)
#   verl-grpo    verl's stock GRPO example for Qwen3-4B (examples/grpo_trainer/run_qwen3_4b_fsdp.sh): low-variance
#                KL loss 0.001, clip 0.2, no length shaping, 512 prompts x 5, mini-batch 256, greedy validation
#   dapo-recipe  verl-recipe's DAPO recipe (dapo/run_dapo_qwen2.5_32b.sh): 512 prompts x 16, mini-batch 32, 3x
#                the prompts in flight for dynamic sampling (its gen batch 1536), 20k responses with the length
#                penalty from 16k, validation at T 1.0, top-p 0.7, n 1
#   stock        the launcher's own reference: dapo-recipe for launchers with dynamic sampling (STOCK_PROTOCOL
#                in the launcher), verl-grpo for the others
# Its trainer settings are the Hydra config group recipe/gcpo/config/protocol/<name>.yaml (protocol=<name>); its
# sizes are the environment defaults below, since verl's token budgets are computed from them. The data, model,
# schedule and the method's keys are the launcher's under every protocol. Environment variables (TRAIN_BATCH_SIZE,
# N_RESP, ...) still win over a protocol's values, command-line overrides over all.
# INFLIGHT_GEN_BATCHES, when set, replaces the protocol's prompt batches in flight under dynamic sampling
# (algorithm.filter_groups.max_inflight_gen_batches: shared 2, verl-grpo 1, dapo-recipe 3).
: "${PROTOCOL:=shared}"
if [[ "${PROTOCOL}" == "stock" ]]; then PROTOCOL="${STOCK_PROTOCOL:-verl-grpo}"; fi
case "${PROTOCOL}" in
  shared) ;;
  verl-grpo)
    : "${TRAIN_BATCH_SIZE:=512}" "${MINI_BATCH_SIZE:=256}" "${N_RESP:=5}" "${VAL_N:=1}" ;;
  dapo-recipe)
    : "${TRAIN_BATCH_SIZE:=512}" "${MINI_BATCH_SIZE:=32}" "${N_RESP:=16}" "${VAL_N:=1}"
    : "${MAX_RESPONSE_LENGTH:=20480}" "${OVERLONG_BUFFER:=4096}" ;;
  *)
    echo "PROTOCOL must be one of shared, verl-grpo, dapo-recipe, stock; got '${PROTOCOL}'" >&2
    exit 2 ;;
esac
# ---- end of protocol ---------------------------------------------------------------------------------------------

: "${NNODES:=1}"
: "${GPUS_PER_NODE:=8}"
: "${DATA_DIR:=${HOME}/data/gcpo}"
: "${CKPT_DIR:=${HOME}/checkpoints}"
: "${PROJECT_NAME:=gcpo-verl}"
: "${TRAIN_BATCH_SIZE:=256}"
: "${N_RESP:=16}"
: "${MINI_BATCH_SIZE:=64}"
: "${MAX_PROMPT_LENGTH:=2048}"
: "${MAX_RESPONSE_LENGTH:=8192}"
: "${OVERLONG_BUFFER:=4096}"
: "${LR:=1e-6}"
: "${TOTAL_STEPS:=500}"
: "${VAL_SETS:=aime24 aime25 math500 amc23}"
: "${VAL_N:=16}"
: "${TP_SIZE:=1}"
: "${GPU_MEM_UTIL:=0.7}"
: "${DRY_RUN:=0}"
: "${TRAINER_MODE:=sync}"
if [[ -z "${LOGGER:-}" ]]; then
  if [[ -n "${WANDB_API_KEY:-}" ]]; then LOGGER='["console","wandb"]'; else LOGGER='["console"]'; fi
fi

# The settings given as environment variables are numbers: one line naming a variable that is not (bash's own
# message for MAX_RESPONSE_LENGTH=8k is an arithmetic error, Hydra's for N_RESP=abc a bare TypeError).
gcpo_check_numbers() {
  local name value
  case "${TRAINER_MODE}" in
    sync|colocate_async|separate_async) ;;
    *) echo "error: TRAINER_MODE must be one of sync, colocate_async, separate_async, got '${TRAINER_MODE}'" >&2
       return 1 ;;
  esac
  for name in NNODES GPUS_PER_NODE TRAIN_BATCH_SIZE N_RESP MINI_BATCH_SIZE MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH \
      TOTAL_STEPS VAL_N TP_SIZE INFLIGHT_GEN_BATCHES ROLLOUT_NNODES ROLLOUT_GPUS_PER_NODE; do
    if [[ "${name}" =~ ^(INFLIGHT_GEN_BATCHES|ROLLOUT_NNODES|ROLLOUT_GPUS_PER_NODE)$ && -z "${!name+set}" ]]; then
      continue
    fi
    value="${!name}"
    if [[ ! "${value}" =~ ^[1-9][0-9]*$ ]]; then
      echo "error: ${name} must be a positive integer, got '${value}'" >&2
      return 1
    fi
  done
  if [[ ! "${OVERLONG_BUFFER}" =~ ^[0-9]+$ ]]; then
    echo "error: OVERLONG_BUFFER must be an integer >= 0, got '${OVERLONG_BUFFER}'" >&2
    return 1
  fi
  if [[ -n "${RAY_NUM_CPUS:-}" && ! "${RAY_NUM_CPUS}" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: RAY_NUM_CPUS must be a positive integer, got '${RAY_NUM_CPUS}'" >&2
    return 1
  fi
  for name in LR GPU_MEM_UTIL; do
    value="${!name}"
    if [[ ! "${value}" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] || [[ "${value}" =~ ^[0.]+([eE].*)?$ ]]; then
      echo "error: ${name} must be a number > 0, got '${value}'" >&2
      return 1
    fi
  done
}

gcpo_launch() {
  local args=()
  local arg
  for arg in "$@"; do
    if [[ "${arg}" == "--dry-run" ]]; then DRY_RUN=1; else args+=("${arg}"); fi
  done
  gcpo_check_numbers || exit 2

  local seq_len=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))
  local val_files="" name
  for name in ${VAL_SETS}; do val_files+="${val_files:+,}'${DATA_DIR}/val_${name}.parquet'"; done

  local data=(
    "data.train_files=${TRAIN_FILE:-${DATA_DIR}/train.parquet}"
    "data.val_files=[${val_files}]"
    "data.train_batch_size=${TRAIN_BATCH_SIZE}"
    "data.max_prompt_length=${MAX_PROMPT_LENGTH}"
    "data.max_response_length=${MAX_RESPONSE_LENGTH}"
    "data.filter_overlong_prompts=true"
  )
  local model=(
    "actor_rollout_ref.model.path=${MODEL_PATH}"
    "actor_rollout_ref.model.use_remove_padding=true"
    "actor_rollout_ref.model.enable_gradient_checkpointing=true"
  )
  local actor=(
    "actor_rollout_ref.actor.optim.lr=${LR}"
    "actor_rollout_ref.actor.ppo_mini_batch_size=${MINI_BATCH_SIZE}"
    "actor_rollout_ref.actor.use_dynamic_bsz=true"
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((2 * seq_len))"
    "actor_rollout_ref.actor.clip_ratio_low=0.2"
    "actor_rollout_ref.actor.loss_agg_mode=token-mean"
    "actor_rollout_ref.actor.entropy_coeff=0"
    "actor_rollout_ref.actor.optim.clip_grad=1.0"
  )
  local rollout=(
    "actor_rollout_ref.rollout.name=vllm"
    "actor_rollout_ref.rollout.n=${N_RESP}"
    "actor_rollout_ref.rollout.tensor_model_parallel_size=${TP_SIZE}"
    "actor_rollout_ref.rollout.gpu_memory_utilization=${GPU_MEM_UTIL}"
    "actor_rollout_ref.rollout.enable_chunked_prefill=true"
    "actor_rollout_ref.rollout.max_num_batched_tokens=${seq_len}"
    "actor_rollout_ref.rollout.temperature=1.0"
    "actor_rollout_ref.rollout.top_p=1.0"
    "actor_rollout_ref.rollout.top_k=-1"
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true"
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$((3 * seq_len))"
    "actor_rollout_ref.rollout.val_kwargs.n=${VAL_N}"
  )
  local reward=(
    "algorithm.use_kl_in_reward=false"
    # the protocol's DAPO reward manager and overlong shaping (config/protocol/) with this size of buffer
    "++reward.reward_kwargs.overlong_buffer_cfg.len=${OVERLONG_BUFFER}"
  )
  local trainer=(
    "trainer.logger=${LOGGER}"
    "trainer.project_name=${PROJECT_NAME}"
    "trainer.experiment_name=${EXPERIMENT_NAME}"
    "trainer.nnodes=${NNODES}"
    "trainer.n_gpus_per_node=${GPUS_PER_NODE}"
    "trainer.total_training_steps=${TOTAL_STEPS}"
    "trainer.val_before_train=true"
    "trainer.resume_mode=auto"
    "trainer.log_val_generations=10"
    "trainer.default_local_dir=${CKPT_DIR}/${PROJECT_NAME}/${EXPERIMENT_NAME}"
  )
  if [[ -n "${INFLIGHT_GEN_BATCHES:-}" ]]; then
    trainer+=("algorithm.filter_groups.max_inflight_gen_batches=${INFLIGHT_GEN_BATCHES}")
  fi
  trainer+=("trainer.v1.trainer_mode=${TRAINER_MODE}")
  case "${TRAINER_MODE}" in
    colocate_async) trainer+=("trainer.v1.colocate_async.num_warmup_batches=1") ;;
    separate_async)  # verl's example: half of each node trains, half generates
      local half=$((GPUS_PER_NODE / 2))
      trainer+=(
        "trainer.n_gpus_per_node=$((GPUS_PER_NODE - ${ROLLOUT_GPUS_PER_NODE:-${half}}))"
        "actor_rollout_ref.rollout.nnodes=${ROLLOUT_NNODES:-${NNODES}}"
        "actor_rollout_ref.rollout.n_gpus_per_node=${ROLLOUT_GPUS_PER_NODE:-${half}}"
        "actor_rollout_ref.rollout.checkpoint_engine.backend=${CHECKPOINT_ENGINE:-nccl}"
        "trainer.v1.separate_async.parameter_sync_step=$((TRAIN_BATCH_SIZE / MINI_BATCH_SIZE))"
        "trainer.v1.separate_async.num_warmup_batches=1"
      ) ;;
  esac
  if [[ -n "${RAY_NUM_CPUS:-}" && -z "${RAY_ADDRESS:-}" ]]; then
    trainer+=("ray_kwargs.ray_init.num_cpus=${RAY_NUM_CPUS}")
  fi

  if [[ "${DRY_RUN}" == "1" ]]; then export GCPO_DRY_RUN=1; fi
  if [[ -n "${RAY_ADDRESS:-}" ]]; then export RAY_ADDRESS; fi
  # the protocol's group first: a protocol=<name> on the command line replaces it (Hydra: the last choice counts)
  local cmd=(python3 -m recipe.gcpo.main_gcpo "protocol=${PROTOCOL}"
    "${data[@]}" "${model[@]}" "${actor[@]}" "${rollout[@]}" "${reward[@]}" "${trainer[@]}"
    "${METHOD_ARGS[@]}" ${args[@]+"${args[@]}"})
  # the command on standard output, so that standard error holds only what went wrong
  echo "+ ${cmd[*]}"
  exec "${cmd[@]}"
}
