#!/usr/bin/env bash
# The multi-node path end to end on one machine without GPUs: a real two-node Slurm cluster made of Linux
# namespaces (tests/special_e2e/smoke/cluster.py), `sbatch docker/slurm_gcpo.sbatch scripts/run_qwen3_4b_gcpo.sh` run on
# it with the CPU settings and the launcher smoke's sizes, a resubmitted job resuming from the checkpoint, the
# checks, and the cluster removed again (also after a failure or Ctrl-C). CI runs it after the CPU smoke.
#
# Usage: bash scripts/smoke_cluster_cpu.sh [--nodes 2] [--steps 2] [--kill-node-after S]
#                                          [--kill-credit-actor-after S] [--launcher run_*.sh]
#                                          [--container] [key=value ...]
#   --container           every step of the jobs in the CPU image through podman (CONTAINER_RUNTIME=podman; the
#                         image GCPO_CPU_IMAGE, default localhost/gcpo-verl-cpu:0.1.0, from scripts/build_image.sh):
#                         sbatch -> srun -> podman on each node -> Ray across the nodes -> the image's launcher.
#                         GCPO_PODMAN_OPTIONS: podman's options here (default: --runtime runc and the limits
#                         machines of this kind accept)
#   --kill-node-after S   crash the last node once step S is logged: the job must end with one line naming it,
#                         and the resubmitted job resume from step S's checkpoint
#   python -m tests.special_e2e.smoke cluster --help lists every option
# Root only (network namespaces, Slurm's daemons); installs Debian's slurmctld, slurmd, slurm-client and munge when
# absent. Shares the CPU smoke's environment (.venv-cpu) and its machine-wide lock: one CPU run at a time.
# Environment: GCPO_CPU_VENV, CLUSTER_SMOKE_DIR (/var/tmp/gcpo-cluster-smoke: what every node shares: the policy,
#   data, checkpoints, logs). Needs no data from outside the project: the smoke's prompts train and validate.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${GCPO_CPU_VENV:=${ROOT}/.venv-cpu}"
export GCPO_CPU_VENV

for arg in "$@"; do
  case "${arg}" in
    -h|--help) sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
  esac
done
if [[ "${EUID}" != 0 ]]; then
  echo "error: the cluster smoke needs root (network namespaces, Slurm's and munge's daemons); run it as root" >&2
  exit 2
fi

packages=()
programs=(slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge nsenter:util-linux ip:iproute2)
if [[ " $* " == *" --container"* ]]; then programs+=(podman:podman runc:runc); fi
for pair in "${programs[@]}"; do
  command -v "${pair%%:*}" > /dev/null || packages+=("${pair#*:}")
done
if ((${#packages[@]})); then
  echo "cluster smoke: installing ${packages[*]} (Debian's packages)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" > /dev/null
fi

# shellcheck source=scripts/cpu_env/enter.sh
source "${ROOT}/scripts/cpu_env/enter.sh"
cd "${ROOT}"
# the harness (tests/special_e2e/) from this checkout, first on the path, in every process on every node (the jobs'
# environment is this one: sbatch --export=ALL, then srun, `ray start` and the launcher inherit it)
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON}" -m tests.special_e2e.smoke cluster "$@"
