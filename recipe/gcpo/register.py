"""Make GCPO known to verl: the ``gcpo`` advantage estimator (and the baselines ``dqo``, ``dra_grpo``, ``copo``,
``mc_grpo``), the ``gcpo_sync`` trainer, and a start-up check.

Imported by ``recipe.gcpo.main_gcpo``. To use verl's stock entry point instead, have verl import it in every
process: ``VERL_USE_EXTERNAL_MODULES=recipe.gcpo.register python -m verl.trainer.main_ppo
--config-path <recipe/gcpo/config> --config-name gcpo_trainer ...`` (and pass the variable on to Ray workers).

The check: with an estimator that needs embeddings (gcpo, dqo, dra_grpo), constructing any trainer other than the
GCPO trainer fails
at once, naming the entry point, instead of at the first advantage step after models and rollouts are up.
"""

from __future__ import annotations

import functools

from verl.trainer.ppo.v1.trainer_base import PPOTrainer

import recipe.gcpo.baselines  # noqa: F401  (registers "copo" and "mc_grpo")
import recipe.gcpo.estimator  # noqa: F401  (registers "gcpo", "dqo" and "dra_grpo")
from recipe.gcpo.gcpo_trainer import GCPOTrainer
from recipe.gcpo.settings import EMBEDDING_ESTIMATORS, needs_gcpo_trainer


def install_startup_check() -> None:
    original = PPOTrainer.__init__
    if getattr(original, "_gcpo_startup_check", False):
        return

    @functools.wraps(original)
    def checked_init(self, config, *args, **kwargs):
        estimator = config.algorithm.adv_estimator
        if estimator in EMBEDDING_ESTIMATORS and not isinstance(self, GCPOTrainer):
            raise ValueError(needs_gcpo_trainer(f"trainer class {type(self).__name__}", estimator))
        original(self, config, *args, **kwargs)

    checked_init._gcpo_startup_check = True
    PPOTrainer.__init__ = checked_init


install_startup_check()
