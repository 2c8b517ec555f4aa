"""Make GCPO known to verl: the ``gcpo`` advantage estimator (and the baselines ``dqo``, ``dra_grpo``, ``diver``,
``copo``, ``mc_grpo``), the ``gcpo_sync`` trainer, and a start-up check.

Imported by ``recipe.gcpo.main_gcpo``. To use verl's stock entry point instead, have verl import it in every
process: ``VERL_USE_EXTERNAL_MODULES=recipe.gcpo.register python -m verl.trainer.main_ppo
--config-path <recipe/gcpo/config> --config-name gcpo_trainer ...`` (and pass the variable on to Ray workers).

The check: with an estimator that needs embeddings or texts (gcpo, dqo, dra_grpo, diver), or with Div-R1's actor
loss (algorithm.div_r1), constructing any trainer other than the GCPO trainer fails at once, naming the entry
point, instead of at the first advantage step after models and rollouts are up (or, for Div-R1, never).
"""

from __future__ import annotations

import functools

from omegaconf import OmegaConf
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

import recipe.gcpo.baselines  # noqa: F401  (registers "copo" and "mc_grpo")
import recipe.gcpo.diver  # noqa: F401  (registers "diver")
import recipe.gcpo.estimator  # noqa: F401  (registers "gcpo", "dqo" and "dra_grpo")
from recipe.gcpo.diver import DIVER_ESTIMATOR
from recipe.gcpo.gcpo_trainer import GCPOTrainer
from recipe.gcpo.settings import EMBEDDING_ESTIMATORS, needs_gcpo_trainer

# estimators whose inputs only the GCPO trainer computes (embeddings, or the response texts for DIVER)
TRAINER_ESTIMATORS = (*EMBEDDING_ESTIMATORS, DIVER_ESTIMATOR)


def install_startup_check() -> None:
    original = PPOTrainer.__init__
    if getattr(original, "_gcpo_startup_check", False):
        return

    @functools.wraps(original)
    def checked_init(self, config, *args, **kwargs):
        estimator = config.algorithm.adv_estimator
        if estimator in TRAINER_ESTIMATORS and not isinstance(self, GCPOTrainer):
            raise ValueError(needs_gcpo_trainer(f"trainer class {type(self).__name__}", estimator))
        if OmegaConf.select(config, "algorithm.div_r1.enable") and not isinstance(self, GCPOTrainer):
            raise ValueError(f"algorithm.div_r1.enable=true needs the GCPO trainer, which gives the actor the Div-R1 "
                             f"loss; trainer class {type(self).__name__} would train without it. Launch with "
                             "`python -m recipe.gcpo.main_gcpo`.")
        original(self, config, *args, **kwargs)

    checked_init._gcpo_startup_check = True
    PPOTrainer.__init__ = checked_init


install_startup_check()
