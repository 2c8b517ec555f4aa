"""A miniature GCPO-vs-GRPO experiment through the real training path on a CPU (``scripts/miniature.sh``).

:mod:`.task` (prompts with many distinct correct answers and their exact verifier), :mod:`.reward` (verl's
reward function on it), :mod:`.warm_start` (a tiny policy taught the task's format to a few tens of percent
correct), :mod:`.arms` (the compared arms as Hydra overrides), :mod:`.report` (held-out metrics, table and plots
from verl's validation dumps). The write-up is ``docs/miniature.md``.
"""
