#!/usr/bin/env bash
# A miniature GCPO-vs-GRPO experiment through the real path on a CPU (docs/miniature.md): a tiny policy warm-started
# on a naming task with many distinct correct answers per prompt (experiments/miniature/), trained by each arm from
# the same start with python -m recipe.gcpo.main_gcpo (vLLM generating, the FSDP actor updating, GCPO's credit
# actor), evaluated on held-out prompts every EVAL_EVERY steps; then the table and the plots.
#
# Usage: bash scripts/miniature.sh [--arms grpo,gcpo_group,gcpo_loo,dqo] [--seeds N] [--first-seed S] [--steps N]
#                                  [--eval-every N] [--eval-samples N] [--lr LR] [--warm-seed per-seed|N] [--out DIR]
#                                  [--figures DIR] [--dump-rollouts] [--timeout S] [--dry-run] [key=value ...]
#   --arms        which arms, comma-separated (default the ablation's four: grpo,gcpo_group,gcpo_loo,dqo; also
#                 gcpo_batch, gcpo_loo_mix4, gcpo_blend25 and gcpo_blend75; experiments/miniature/arms.py says
#                 what each is)
#   --seeds N     N seeds of every arm, S..S+N-1 (default 4, about 2.5-3 h for four arms; the 2026-11-25 reference
#                 is --arms grpo,gcpo_batch,gcpo_group --seeds 5, 1.8-2.2 h)
#   --first-seed S the first seed (default 1); issue 56's credit-shape run is --arms
#                 grpo,gcpo_group,gcpo_loo,gcpo_loo_mix4 --first-seed 101 --seeds 16 --eval-samples 64
#   --steps N     training steps of every run (default 40); --eval-every N (default 10) held-out evaluations
#   --eval-samples N held-out samples a prompt at each evaluation (default 16); distinct correct answers stay
#                 "among 16", estimated without bias from more
#   --lr LR       the actor's learning rate for every arm (default 1e-3)
#   --warm-seed W per-seed (default): seed s of every arm trains from warm start s (built once, kept in
#                 DIR/policy-warm<s>), so the seeds' spread includes the start's; N: every run from warm start N
#   --out DIR     data, warm start, runs, results.json and table.md (default ${TMPDIR:-/tmp}/gcpo-miniature; a
#                 relative DIR is the checkout's: the script runs there);
#                 finished runs there are kept and skipped, so a stopped experiment goes on where it stopped
#   --figures DIR where the PNGs go (default DIR of --out)
#   --dump-rollouts every run dumps its training rollouts (verl's trainer.rollout_data_dir: one <step>.jsonl a
#                 step, in the run's rollouts/), from which the report counts the all-correct groups of every arm
#   --timeout S   seconds one training run may take (default 1800)
#   --dry-run     build the data and the warm start, then compose and validate the first run's config
#   key=value     Hydra overrides for every run
# Uses the CPU smoke's environment and lock (scripts/smoke_cpu.sh; GCPO_CPU_VENV, default .venv-cpu).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
# the experiment (experiments/miniature/) and the CPU platform (tests/special_e2e/) are not in the wheel: every process
# of every run imports them from this checkout, first on the path (verl's wheel installs a `tests` package too)
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"
: "${GCPO_CPU_VENV:=${ROOT}/.venv-cpu}"
export GCPO_CPU_VENV

out="${TMPDIR:-/tmp}/gcpo-miniature"
args=()
overrides=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --out) [[ $# -ge 2 ]] || { echo "error: --out needs a folder" >&2; exit 2; }; out="$2"; shift ;;
    --out=*) out="${1#--out=}" ;;
    --dry-run|--dump-rollouts) args+=("$1") ;;
    --arms|--seeds|--first-seed|--steps|--eval-every|--eval-samples|--lr|--warm-seed|--figures|--timeout)
      [[ $# -ge 2 ]] || { echo "error: $1 needs a value" >&2; exit 2; }
      args+=("$1" "$2"); shift ;;
    --arms=*|--seeds=*|--first-seed=*|--steps=*|--eval-every=*|--eval-samples=*|--lr=*|--warm-seed=*|--figures=*|\
    --timeout=*)
      args+=("$1") ;;
    --*) echo "error: unknown option $1 (bash scripts/miniature.sh --help)" >&2; exit 2 ;;
    *=*) overrides+=("$1") ;;
    *) echo "error: '$1' is neither an option nor a key=value override" >&2; exit 2 ;;
  esac
  shift
done

# shellcheck source=scripts/cpu_env/enter.sh
source "${ROOT}/scripts/cpu_env/enter.sh"
unset RAY_ADDRESS
: "${OMP_NUM_THREADS:=$(nproc)}"
export OMP_NUM_THREADS
start=$(date +%s)
"${PYTHON}" -m experiments.miniature run --out "${out}" ${args[@]+"${args[@]}"} -- ${overrides[@]+"${overrides[@]}"}
echo "miniature: $(( ($(date +%s) - start) / 60 )) min in all, including the warm start (${out})"
