"""The one-GPU smoke run (``bash scripts/smoke_1gpu.sh``): a tiny random Qwen3 policy, a few prompts from the
package's own data, a reward that marks about half the rollouts correct, and the checks run on what the trainer
wrote (metrics, credit dumps, checkpoints).

* :mod:`.policy`: the tiny Qwen3-architecture policy and its offline tokenizer, saved in HF format.
* :mod:`.data`: train / validation parquet in verl's format from ``gcpo_core/data``.
* :mod:`.reward`: the smoke reward (verl custom reward function signature).
* :mod:`.checks`: reading the file logger's metrics and the credit dumps, and the pass / fail checks.
* :mod:`.report`: per-phase timings, peak GPU memory and the GCPO / GRPO step-time comparison.
* :mod:`.gpu_memory`: peak GPU memory per process, sampled with ``nvidia-smi``.

``python -m recipe.gcpo.smoke --help`` lists the commands the script uses.
"""
