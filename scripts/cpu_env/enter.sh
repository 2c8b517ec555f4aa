# shellcheck shell=bash
# Sourced by scripts/smoke_cpu.sh and scripts/miniature.sh: checks that this is a Linux machine without a GPU,
# takes the machine-wide lock of CPU runs (two do not fit in 24 GiB: a second one waits), builds or reuses the CPU
# environment (scripts/setup_cpu_env.sh, in GCPO_CPU_VENV) and puts its python first (PYTHON, PATH).
# Needs ROOT and GCPO_CPU_VENV; keeps file descriptor 9 (the lock) open for the caller's lifetime.
if [[ "$(uname -s)" != "Linux" ]]; then
  echo "error: CPU runs need Linux (vLLM's CPU build), not $(uname -s)" >&2; exit 2
fi
if command -v nvidia-smi > /dev/null && nvidia-smi > /dev/null 2>&1; then
  echo "error: this machine has a GPU: run scripts/smoke_1gpu.sh (the CPU platform is for machines without one)" >&2
  exit 2
fi

# one per machine, whatever its SMOKE_DIR; taken before the environment is (re)built, which a running smoke uses
lock="${TMPDIR:-/tmp}/gcpo-smoke-cpu.lock"
exec 9> "${lock}"
if ! flock -n 9; then
  echo "smoke: another CPU run (smoke or miniature) holds ${lock}; waiting for it (two do not fit in memory)" >&2
  flock 9
fi

bash "${ROOT}/scripts/setup_cpu_env.sh"
echo "CPU environment ${GCPO_CPU_VENV}" >&2
export PYTHON="${GCPO_CPU_VENV}/bin/python"
# the launchers run `python3`: the environment's
export PATH="${GCPO_CPU_VENV}/bin:${PATH}"
