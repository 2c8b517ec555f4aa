#!/usr/bin/env bash
# GCPO training end to end on one device, offline, meant to take minutes: proves an installation before cluster
# hours. Run it through scripts/smoke_1gpu.sh (one GPU) or scripts/smoke_cpu.sh (a machine without GPUs); this is
# their shared body, with the device as its first option.
#
# Builds a tiny Qwen3-architecture policy with random weights (tests/special_e2e/smoke/policy.py) and three prompts
# from the package's own data, then runs python -m recipe.gcpo.main_gcpo on the device (vLLM generating, the
# FSDP actor updating, the GCPO credit actor embedding beside them) for STEPS steps, saves a checkpoint,
# resumes for one more step, and checks what the trainer wrote (tests/special_e2e/smoke/checks.py): both runs exit
# 0, the gcpo/* and timing_s/gcpo_* metrics are present and finite, all-wrong groups got zero advantage, the
# resumed run starts after the saved step. The reward marks about half the rollouts correct by a hash of the
# text (tests/special_e2e/smoke/reward.py), so all-wrong, mixed and all-correct groups all occur.
#
# Usage: bash scripts/smoke.sh --device gpu|cpu [--dry-run] [--estimator gcpo|grpo] [--compare] [--steps N]
#                              [--kill-credit-actor-after S] [--kill-reward-worker-after S] [key=value ...]
#   --device D        gpu (one CUDA GPU) or cpu (verl's CPU platform of tests/special_e2e/cpu_platform.py)
#   --dry-run         build the policy and data, compose and validate the run's config and print it
#   --estimator E     the advantage estimator (default gcpo; grpo runs the same smoke with verl's GRPO)
#   --compare         run the GCPO smoke, then the GRPO smoke, and print their step times side by side
#   --steps N         steps before the checkpoint (default 2); the resumed run adds one
#   --kill-credit-actor-after S   SIGKILL the credit actor(s) once step S is logged (first run); the check then
#                     asks that Ray restarted them and that every later step still has GCPO's credit
#   --kill-reward-worker-after S  the same for one of verl's reward workers; later steps must still be scored
#   --launcher L      instead of the smoke's own config, run launcher L (scripts/run_*.sh: its reward manager,
#                     overlong buffer, validation sets, dynamic batch sizes, data loader workers) with the tiny
#                     policy and small sizes as environment variables, this device's settings as overrides, on
#                     30 prompts of the real data (scripts/prepare_data.py --local-dir SMOKE_DATA_SOURCE):
#                     validation, STEPS steps, a checkpoint, the final validation; then its checks
#   key=value         Hydra overrides for every run (they win over everything here)
# Environment: SMOKE_DIR (${TMPDIR:-/tmp}/gcpo-smoke[-cpu]: model, data, one folder per estimator), PYTHON
#   (python3), SMOKE_GPU_MEM_UTIL (0.15: vLLM's share of the GPU), SMOKE_N_RESP (8 rollouts per prompt),
#   SMOKE_MAX_RESPONSE_LENGTH (64), SMOKE_ATTN (auto: flash_attention_2 with padding removal when flash-attn
#   is installed, else sdpa without it; or flash_attention_2 | sdpa), SMOKE_RUN_TIMEOUT (seconds one trainer
#   run may take before it is stopped: 900; a run takes about 300 on 2 cores), SMOKE_RAY_CPUS (cpu: logical CPUs of the run's Ray, 24),
#   SMOKE_DATA_SOURCE (--launcher: the folder of local data copies, GCPO_SHARED_DATA or ../shared/data).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
# the smoke harness and the CPU platform (tests/special_e2e/) are not in the wheel: every process of the run (this
# script's python, the trainer, each Ray worker, vLLM's workers) imports them from this checkout, first on the path
# (verl's wheel installs a `tests` package of its own)
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"

: "${PYTHON:=python3}"
: "${SMOKE_DIR:=${TMPDIR:-/tmp}/gcpo-smoke}"
: "${SMOKE_GPU_MEM_UTIL:=0.15}"
: "${SMOKE_N_RESP:=8}"
: "${SMOKE_MAX_RESPONSE_LENGTH:=64}"
: "${SMOKE_ATTN:=auto}"
: "${SMOKE_RUN_TIMEOUT:=900}"
: "${SMOKE_RAY_CPUS:=24}"
# the smoke data holds three prompts (correct rates 0, 0.5, 1): one batch is all of them
PROMPTS_PER_STEP=3
MAX_PROMPT_LENGTH=512
RUN_MARKER=".gcpo-smoke-run"

usage() { sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; }

device=""
estimator_given=""
steps=2
dry_run=0
compare=0
kill_credit_after=""
kill_reward_after=""
launcher=""
overrides=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --device)
      [[ $# -ge 2 ]] || { echo "error: --device needs a value (gpu or cpu)" >&2; exit 2; }
      device="$2"; shift ;;
    --device=*) device="${1#--device=}" ;;
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
    --kill-credit-actor-after)
      [[ $# -ge 2 ]] || { echo "error: --kill-credit-actor-after needs a step" >&2; exit 2; }
      kill_credit_after="$2"; shift ;;
    --kill-credit-actor-after=*) kill_credit_after="${1#*=}" ;;
    --kill-reward-worker-after)
      [[ $# -ge 2 ]] || { echo "error: --kill-reward-worker-after needs a step" >&2; exit 2; }
      kill_reward_after="$2"; shift ;;
    --kill-reward-worker-after=*) kill_reward_after="${1#*=}" ;;
    --launcher)
      [[ $# -ge 2 ]] || { echo "error: --launcher needs a launcher (e.g. run_qwen3_4b_gcpo.sh)" >&2; exit 2; }
      launcher="$2"; shift ;;
    --launcher=*) launcher="${1#--launcher=}" ;;
    -h|--help) usage; exit 0 ;;
    --*) echo "error: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) overrides+=("$1") ;;
  esac
  shift
done
[[ "${device}" == "gpu" || "${device}" == "cpu" ]] || {
  echo "error: --device must be gpu or cpu, got '${device}' (scripts/smoke_1gpu.sh, scripts/smoke_cpu.sh)" >&2; exit 2; }
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
for name in kill_credit_after kill_reward_after; do
  value="${!name}"
  if [[ -n "${value}" ]]; then
    [[ "${value}" =~ ^[1-9][0-9]*$ && "${value}" -lt "${steps}" ]] || {
      echo "error: --${name//_/-} must be a step from 1 to $((steps - 1)) (one before the last of --steps ${steps}), got '${value}'" \
        | sed 's/kill-credit-after/kill-credit-actor-after/; s/kill-reward-after/kill-reward-worker-after/' >&2
      exit 2; }
  fi
done
if [[ -n "${kill_credit_after}" ]]; then
  for estimator in "${estimators[@]}"; do
    [[ "${estimator}" == "gcpo" ]] || {
      echo "error: --kill-credit-actor-after needs the gcpo estimator (grpo has no credit actor)" >&2; exit 2; }
  done
fi
if [[ -n "${launcher}" ]]; then
  launcher="$(basename "${launcher}")"
  [[ "${launcher}" == run_*.sh && -f "${ROOT}/scripts/${launcher}" ]] || {
    known=("${ROOT}"/scripts/run_*.sh)
    echo "error: --launcher must be one of: ${known[*]##*/} (got '${launcher}')" >&2
    exit 2; }
  [[ "${compare}" == "0" && -z "${estimator_given}${kill_credit_after}${kill_reward_after}" ]] || {
    echo "error: --launcher runs the launcher's own method: leave out --compare, --estimator and --kill-*" >&2; exit 2; }
fi
[[ "${SMOKE_RUN_TIMEOUT}" =~ ^[1-9][0-9]*$ ]] || {
  echo "error: SMOKE_RUN_TIMEOUT must be a positive number of seconds, got '${SMOKE_RUN_TIMEOUT}'" >&2; exit 2; }

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

# The CPU path (tests/special_e2e/cpu_platform.py): verl's platform override picks the project's CPU platform, which
# verl imports in every process as an external module; vLLM's CPU build keeps its KV cache small (GiB); each
# process may use every core (Ray would give each one thread: its phases run one after another).
if [[ "${device}" == "cpu" ]]; then
  export VERL_PLATFORM=cpu VERL_USE_EXTERNAL_MODULES=tests.special_e2e.cpu_platform
  : "${VLLM_CPU_KVCACHE_SPACE:=1}" "${OMP_NUM_THREADS:=$(nproc)}"
  export VLLM_CPU_KVCACHE_SPACE OMP_NUM_THREADS
fi

# the overrides every run on this device needs ($1: the run's own Ray folder; cpu only). On the CPU: FSDP2 (FSDP1
# moves the model to CUDA); float32 throughout, since a CPU without bf16 instructions emulates bfloat16 (verl's
# default compute dtype) about ten times slower; no torch.compile (a C++ build per process); no sleep mode (vLLM's
# CPU build has none); Ray with a logical GPU for the one "device" and more logical CPUs than cores (verl's actors
# each ask for one; with 2 they wait on each other forever), in a folder of the run's own.
device_args() {
  if [[ "${device}" == "cpu" ]]; then
    printf '%s\n' \
      "trainer.device=cpu" \
      "actor_rollout_ref.actor.strategy=fsdp2" \
      "actor_rollout_ref.ref.strategy=fsdp2" \
      "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}" \
      "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false" \
      "actor_rollout_ref.rollout.dtype=float32" \
      "+actor_rollout_ref.rollout.enable_sleep_mode=false" \
      "ray_kwargs.ray_init.num_cpus=${SMOKE_RAY_CPUS}" \
      "+ray_kwargs.ray_init.num_gpus=1" \
      "+ray_kwargs.ray_init._temp_dir=$1"
  fi
}

# the Hydra overrides of one run: $1 estimator, $2 run folder, $3 total training steps, $4 the run's Ray folder
trainer_args() {
  local estimator="$1" run_dir="$2" total_steps="$3" ray_dir="${4:-}"
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
    "reward.custom_reward_function.path=pkg://tests.special_e2e.smoke.reward"
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
  device_args "${ray_dir:-${run_dir}/ray}"
  printf '%s\n' "${args[@]}" ${overrides[@]+"${overrides[@]}"}
}

# Samplers beside a run: GPU memory (nvidia-smi) on a GPU, every process's resident memory on the CPU, and the
# fault injector; each also stops by itself when this script is gone.
helper_pids=()
start_helpers() {  # $1 run folder, $2 run number, $3 the run's process marker
  local run_dir="$1" run="$2" marker="$3"
  helper_pids=()
  if [[ "${device}" == "gpu" ]] && command -v nvidia-smi > /dev/null; then
    "${PYTHON}" -m tests.special_e2e.smoke gpu-memory --out "${run_dir}/gpu_memory_run${run}.json" --parent-pid "$$" &
    helper_pids+=($!)
  fi
  if [[ "${device}" == "cpu" ]]; then
    "${PYTHON}" -m tests.special_e2e.smoke host-memory --out "${run_dir}/host_memory_run${run}.json" \
      --marker "${marker}" --parent-pid "$$" &
    helper_pids+=($!)
  fi
  if [[ "${run}" == "1" ]]; then
    local target after
    for target in credit reward; do
      if [[ "${target}" == "credit" ]]; then after="${kill_credit_after}"; else after="${kill_reward_after}"; fi
      [[ -n "${after}" ]] || continue
      "${PYTHON}" -m tests.special_e2e.smoke fault --target "${target}" --after-step "${after}" --marker "${marker}" \
        --metrics "${run_dir}/metrics_run1.jsonl" --out "${run_dir}/fault_${target}.json" --parent-pid "$$" &
      helper_pids+=($!)
    done
  fi
}
stop_helpers() {
  local pid
  for pid in ${helper_pids[@]+"${helper_pids[@]}"}; do
    kill -TERM "${pid}" 2> /dev/null || true
    wait "${pid}" 2> /dev/null || true
  done
  helper_pids=()
}
current_marker=""
cleanup() {
  stop_helpers
  if [[ -n "${current_marker}" ]]; then "${PYTHON}" -m tests.special_e2e.smoke reap --marker "${current_marker}" || true; fi
}
trap cleanup EXIT

now() { date +%s.%N; }

# one bounded run: $1 label, $2 run folder, $3 run number, then the command; writes log_run<N>.txt, wall_run<N>.txt
# and metrics_run<N>.jsonl. The run is bounded by SMOKE_RUN_TIMEOUT, and afterwards every process it started (its
# Ray cluster, vLLM's workers) is stopped: they all carry the run's marker in their environment, nothing else does.
bounded_run() {
  local label="$1" run_dir="$2" run="$3"
  shift 3
  local start rc=0 attempt marker="${current_marker}"
  local log="${run_dir}/log_run${run}.txt" metrics="${run_dir}/metrics_run${run}.jsonl"
  for attempt in 1 2; do
    rc=0
    current_marker="${marker}"
    echo "+ $*"
    start_helpers "${run_dir}" "${run}" "${marker}"
    start="$(now)"
    GCPO_SMOKE_MARKER="${marker}" VERL_FILE_LOGGER_PATH="${metrics}" \
      timeout --kill-after=30 "${SMOKE_RUN_TIMEOUT}" "$@" 2>&1 | tee "${log}" || rc=$?
    awk -v a="${start}" -v b="$(now)" 'BEGIN { printf "%.1f\n", b - a }' > "${run_dir}/wall_run${run}.txt"
    stop_helpers
    "${PYTHON}" -m tests.special_e2e.smoke reap --marker "${marker}" || true
    current_marker=""
    # vLLM picks a free port, frees it, then binds it: on a busy machine another process can take it in between.
    # A run that died of that before its first step is run once more; anything else is a failure.
    if [[ "${attempt}" == 1 && "${rc}" != 0 && "${rc}" != 124 && "${rc}" != 137 ]] \
      && grep -q -E 'EADDRINUSE|Address already in use' "${log}" \
      && ! grep -q '"training/global_step"' "${metrics}" 2> /dev/null; then
      echo "smoke: ${label} died at start-up with EADDRINUSE (a port picked free was taken before it was bound," \
        "as on a busy machine): running it once more; first log: ${log%.txt}.attempt1.txt" >&2
      mv "${log}" "${log%.txt}.attempt1.txt"
      rm -f "${metrics}"
      continue
    fi
    break
  done
  if [[ "${rc}" == "124" || "${rc}" == "137" ]]; then
    echo "[FAIL] ${label} did not finish in SMOKE_RUN_TIMEOUT=${SMOKE_RUN_TIMEOUT} s and was stopped;" \
      "log: ${log}"
    return 1
  fi
  if [[ "${rc}" != "0" ]]; then
    echo "[FAIL] ${label} exited ${rc}; log: ${log}"
    return 1
  fi
  echo "[PASS] ${label} exited 0"
}

new_ray_dir() { mktemp -d "${TMPDIR:-/tmp}/gcpo-ray.XXXXXX"; }  # short: Ray's socket paths live under it

# one trainer run of the smoke: $1 estimator, $2 run folder, $3 run number, $4 total steps
train() {
  local estimator="$1" run_dir="$2" run="$3" total_steps="$4"
  local args=() line rc=0 ray_dir
  ray_dir="$(new_ray_dir)"
  while IFS= read -r line; do args+=("${line}"); done \
    < <(trainer_args "${estimator}" "${run_dir}" "${total_steps}" "${ray_dir}")
  current_marker="gcpo-smoke-$$-${estimator}-${run}-${RANDOM}"
  # the run's temporary files (vLLM's sockets, verl's checkpoint locks) go with its Ray folder
  TMPDIR="${ray_dir}" bounded_run "${estimator} run ${run} (to step ${total_steps})" "${run_dir}" "${run}" \
    "${PYTHON}" -m recipe.gcpo.main_gcpo "${args[@]}" || rc=$?
  rm -rf "${ray_dir}"
  return "${rc}"
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
  local args=() line fault_args=()
  if [[ "${dry_run}" == "1" ]]; then
    while IFS= read -r line; do args+=("${line}"); done < <(trainer_args "${estimator}" "${run_dir}" "${steps}")
    echo "# smoke ${estimator} (${device}): the first run (steps 1-${steps}); the resumed run differs only in" \
      "trainer.total_training_steps=$((steps + 1)) and its metrics file"
    GCPO_DRY_RUN=1 "${PYTHON}" -m recipe.gcpo.main_gcpo "${args[@]}" || return 1
    return 0
  fi
  fresh_run_dir "${run_dir}" || return 1
  echo "${device}" > "${run_dir}/device_kind.txt"
  if [[ "${device}" == "gpu" ]] && command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "${run_dir}/device.txt" || true
  fi
  if [[ "${device}" == "cpu" ]]; then
    "${PYTHON}" -m tests.special_e2e.smoke describe-host > "${run_dir}/device.txt" || true
  fi
  train "${estimator}" "${run_dir}" 1 "${steps}" || return 1
  train "${estimator}" "${run_dir}" 2 "$((steps + 1))" || return 1
  [[ -z "${kill_credit_after}" ]] || fault_args+=(--fault credit)
  [[ -z "${kill_reward_after}" ]] || fault_args+=(--fault reward)
  "${PYTHON}" -m tests.special_e2e.smoke check --run-dir "${run_dir}" --estimator "${estimator}" --steps "${steps}" \
    --groups-per-step "${PROMPTS_PER_STEP}" ${fault_args[@]+"${fault_args[@]}"}
}

# --launcher: the launcher's own config, small. Its settings are environment variables (scripts/common.sh), and
# this device's overrides come before the command line's.
launcher_smoke() {
  local run_dir="${SMOKE_DIR}/launcher-${launcher%.sh}" data_dir="${SMOKE_DIR}/launcher_data"
  local source="${SMOKE_DATA_SOURCE:-${GCPO_SHARED_DATA:-${ROOT}/../shared/data}}"
  local args=() line ray_dir rc=0
  if [[ ! -d "${source}" ]]; then
    echo "error: --launcher needs local copies of the data sets (scripts/prepare_data.py --local-dir): ${source}" \
      "is not a folder; set SMOKE_DATA_SOURCE (or GCPO_SHARED_DATA) to one" >&2
    return 1
  fi
  fresh_run_dir "${run_dir}" || return 1
  echo "${device}" > "${run_dir}/device_kind.txt"
  if [[ ! -f "${data_dir}/.complete" ]]; then
    local staged
    staged="$(mktemp -d)"
    cp -L "${source}"/*.jsonl "${staged}/"
    # MATH's train split is not among the local copies: MATH-500 (same rows: problem, solution, answer) stands in
    [[ -f "${staged}/math_train.jsonl" || ! -f "${staged}/math500.jsonl" ]] || cp "${staged}/math500.jsonl" "${staged}/math_train.jsonl"
    "${PYTHON}" scripts/prepare_data.py --local-dir "${staged}" --out-dir "${data_dir}" --train-limit 30 \
      --datasets dapo_math_17k,math,aime24,amc23 || { rm -rf "${staged}"; return 1; }
    rm -rf "${staged}"
    mkdir -p "${data_dir}"
    touch "${data_dir}/.complete"
  fi
  ray_dir="$(new_ray_dir)"
  while IFS= read -r line; do args+=("${line}"); done < <(device_args "${ray_dir}")
  args+=("${ATTN_ARGS[@]}"
    "trainer.logger=[\"console\",\"file\"]"
    "trainer.save_freq=${steps}"
    "trainer.test_freq=${steps}"
    "trainer.default_local_dir=${run_dir}/ckpt"
    "actor_rollout_ref.rollout.agent.num_workers=2"
    "reward.num_workers=2"
  )
  # A random policy never solves a real problem: on the math reward every group is all wrong, and every check of
  # the credit (and dynamic sampling, COPO's blended loss) would run on zeros. So the smoke's three prompts train
  # (an all-wrong, a mixed and an all-correct group every step) on the smoke reward. Its responses all run to the
  # length limit, so DAPO's overlong shaping always costs the whole penalty: at the launchers' factor 1 a correct
  # answer's reward is 0 and GCPO's quality 0 everywhere; at 0.5 a correct answer keeps 0.5, a wrong one -1.5.
  echo "smoke: the smoke's prompts and reward stand in for the math data and reward (a random policy solves" \
    "nothing), with half the overlong penalty (every response reaches the length limit)" >&2
  args+=("reward.custom_reward_function.path=pkg://tests.special_e2e.smoke.reward"
         "reward.custom_reward_function.name=compute_score"
         "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5")
  if [[ "${launcher}" == *group_contrastive* ]]; then args+=("data.train_files=${data_dir}/train_math.parquet"); fi
  if grep -q "adv_estimator=gcpo" "scripts/${launcher}"; then
    args+=("algorithm.gcpo.dump.every_n_steps=1" "algorithm.gcpo.dump.max_groups=64"
           "algorithm.gcpo.dump.directory=${run_dir}/gcpo_dumps")
  fi
  current_marker="gcpo-smoke-$$-launcher-${RANDOM}"
  TMPDIR="${ray_dir}" MODEL_PATH="${SMOKE_DIR}/model" DATA_DIR="${data_dir}" TRAIN_FILE="${SMOKE_DIR}/data/train.parquet" \
    NNODES=1 GPUS_PER_NODE=1 TRAIN_BATCH_SIZE=3 \
    MINI_BATCH_SIZE=3 N_RESP=4 MAX_PROMPT_LENGTH=1024 MAX_RESPONSE_LENGTH=64 OVERLONG_BUFFER=16 VAL_N=1 \
    VAL_SETS="aime24 amc23" TOTAL_STEPS="${steps}" GPU_MEM_UTIL="${SMOKE_GPU_MEM_UTIL}" CKPT_DIR="${run_dir}/ckpt" \
    bounded_run "${launcher} (${steps} steps)" "${run_dir}" 1 \
    bash "scripts/${launcher}" "${args[@]}" ${overrides[@]+"${overrides[@]}"} || rc=$?
  rm -rf "${ray_dir}"
  [[ "${rc}" == "0" ]] || return 1
  "${PYTHON}" -m tests.special_e2e.smoke check-launcher --run-dir "${run_dir}" --launcher "${launcher}" --steps "${steps}"
}

"${PYTHON}" -m tests.special_e2e.smoke build --out "${SMOKE_DIR}"
if [[ -n "${launcher}" ]]; then
  if [[ "${dry_run}" == "1" ]]; then
    echo "error: for a launcher's dry run use the launcher itself: bash scripts/${launcher} --dry-run" >&2; exit 2
  fi
  launcher_smoke || { echo "smoke FAILED: ${launcher}" >&2; exit 1; }
  exit 0
fi
failed=()
for estimator in "${estimators[@]}"; do
  smoke "${estimator}" || failed+=("${estimator}")
done
if [[ "${compare}" == "1" && "${dry_run}" == "0" && ${#failed[@]} -eq 0 ]]; then
  "${PYTHON}" -m tests.special_e2e.smoke compare --gcpo "${SMOKE_DIR}/gcpo" --grpo "${SMOKE_DIR}/grpo"
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "smoke FAILED: ${failed[*]}" >&2
  exit 1
fi
