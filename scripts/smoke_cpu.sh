#!/usr/bin/env bash
# GCPO training end to end on a machine without GPUs: the real path of a cluster run (vLLM generating, the FSDP
# actor updating, the credit actor, reward workers, TransferQueue, checkpoint, resume) with a tiny policy on the
# CPU, in minutes. Run it before a cluster to prove an installation; CI runs it on every change.
#
# Usage: bash scripts/smoke_cpu.sh [--compare] [--steps N] [--estimator gcpo|grpo] [--dry-run] [--no-resume]
#                                  [--trainer-mode sync|colocate_async]
#                                  [--kill-credit-actor-after S] [--kill-reward-worker-after S] [key=value ...]
#        bash scripts/smoke_cpu.sh --launcher run_qwen3_4b_gcpo.sh [--steps N] [key=value ...]
#        bash scripts/smoke_cpu.sh --container [any of the above]
#   (first form)   the smoke (python -m tests.special_e2e.smoke run) on the CPU: tiny policy, three prompts x 8
#                  rollouts, STEPS steps, a checkpoint, one resumed step, the checks; --compare runs GCPO then
#                  GRPO and prints the ratio; --no-resume: the first run only (no checkpoint, no resumed run);
#                  --trainer-mode colocate_async: verl's asynchronous mode on the same devices (one batch generated
#                  ahead, partial rollouts resumed after each weight update; separate_async needs two GPUs)
#   --launcher L   one of scripts/run_*.sh with its own config (reward manager, overlong buffer, validation sets,
#                  dynamic batch sizes, data loader) but the tiny policy, small sizes and the CPU settings as
#                  overrides, on 30 prompts of the real data, for STEPS steps (default 2) with validation before
#                  and after and a checkpoint
#   --container    the same smoke inside the CPU image (GCPO_CPU_IMAGE, default localhost/gcpo-verl-cpu:0.1.0, from
#                  scripts/build_image.sh) with its environment and checkout, started with podman as the sbatch
#                  starts containers (the host's network and shared memory; its own process IDs here, where other
#                  runs may share the machine), SMOKE_DIR and the machine-wide lock bound in; GCPO_PODMAN_OPTIONS:
#                  podman's options (default: --runtime runc and the limits machines of this kind accept)
# The first call builds the smoke's own environment (scripts/setup_cpu_env.sh: verl 0.9.1, the CPU build of vLLM
# 0.24.0 and torch 2.11.0, about 7.3 GB, in GCPO_CPU_VENV, default .venv-cpu) and says where; later calls reuse
# it. One CPU smoke at a time (two do not fit in 24 GiB): a second one waits for the first.
# Environment: GCPO_CPU_VENV, SMOKE_DIR (${TMPDIR:-/tmp}/gcpo-smoke-cpu), SMOKE_RUN_TIMEOUT (900 s a run) and
#   the rest of the smoke's (python -m tests.special_e2e.smoke run --help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${GCPO_CPU_VENV:=${ROOT}/.venv-cpu}"
: "${SMOKE_DIR:=${TMPDIR:-/tmp}/gcpo-smoke-cpu}"
export GCPO_CPU_VENV SMOKE_DIR

for arg in "$@"; do
  case "${arg}" in
    -h|--help)
      sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'
      echo "Options shared with the GPU smoke: python -m tests.special_e2e.smoke run --help"
      exit 0 ;;
  esac
done

args=()
container=0
for arg in "$@"; do
  if [[ "${arg}" == --container ]]; then container=1; else args+=("${arg}"); fi
done
if [[ "${container}" == 1 ]]; then
  : "${GCPO_CPU_IMAGE:=localhost/gcpo-verl-cpu:0.1.0}"
  : "${GCPO_PODMAN_OPTIONS:=--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=32768:32768}"
  if ! command -v podman > /dev/null; then
    echo "error: --container needs podman (apt-get install podman runc)" >&2; exit 2
  fi
  if ! podman image exists "${GCPO_CPU_IMAGE}"; then
    echo "error: --container: podman has no image ${GCPO_CPU_IMAGE} (build it: bash scripts/build_image.sh)" >&2; exit 2
  fi
  lock="${TMPDIR:-/tmp}/gcpo-smoke-cpu.lock"
  mkdir -p "${SMOKE_DIR}"
  touch "${lock}"
  read -r -a podman_options <<< "${GCPO_PODMAN_OPTIONS}"
  pass=()
  for name in $(compgen -e); do
    case "${name}" in SMOKE_*|OMP_*|VLLM_*|HF_*|TRANSFORMERS_*) pass+=(--env "${name}") ;; esac
  done
  echo "smoke: in ${GCPO_CPU_IMAGE}: bash scripts/smoke_cpu.sh ${args[*]}" >&2
  exec podman run --rm --network host --ipc host ${podman_options[@]+"${podman_options[@]}"} \
    -v "${SMOKE_DIR}:${SMOKE_DIR}" -v "${lock}:/tmp/gcpo-smoke-cpu.lock" ${pass[@]+"${pass[@]}"} \
    "${GCPO_CPU_IMAGE}" bash scripts/smoke_cpu.sh ${args[@]+"${args[@]}"}
fi

# shellcheck source=scripts/cpu_env/enter.sh
source "${ROOT}/scripts/cpu_env/enter.sh"

cd "${ROOT}"
# the harness (tests/special_e2e/, not in the wheel) from this checkout, first on the path (verl's wheel installs
# a `tests` package of its own); every process of the run inherits it
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON}" -m tests.special_e2e.smoke run --device cpu ${args[@]+"${args[@]}"}
