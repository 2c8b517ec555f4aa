"""The smoke run (``bash scripts/smoke_1gpu.sh`` on one GPU, ``bash scripts/smoke_cpu.sh`` on the CPU; both start
``python -m tests.special_e2e.smoke run``, :mod:`.run`): a tiny random Qwen3 policy, a few prompts from the package's own data, a
reward that marks about half the rollouts correct, and the checks run on what the trainer wrote (metrics, credit
dumps, checkpoints, output), after a fault if one was injected.

* :mod:`.run`: the smoke itself: its options, the trainer runs (bounded in time, retried once after a taken
  port, their processes stopped after them), the checks and the comparison.
* :mod:`.policy`: the tiny Qwen3-architecture policy and its offline tokenizer, saved in HF format.
* :mod:`.data`: train / validation parquet in verl's format from ``gcpo_core/data``.
* :mod:`.reward`: the smoke reward (verl custom reward function signature).
* :mod:`.checks`: reading the file logger's metrics and the credit dumps, and the pass / fail checks.
* :mod:`.report`: per-phase timings, peak memory and the GCPO / GRPO step-time comparison.
* :mod:`.gpu_memory`: peak GPU memory per process, sampled with ``nvidia-smi``.
* :mod:`.processes`: one run's processes (by a marker in their environment): memory sampling, fault injection,
  and stopping whatever the run left behind.

``python -m tests.special_e2e.smoke --help`` lists the commands; ``... run --help`` the smoke's options.
"""
