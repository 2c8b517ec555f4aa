"""Make the recipe's advantage estimators known to verl, and refuse at once a config that needs the GCPO trainer
under any other trainer.

Registers ``gcpo``, ``dqo``, ``dra_grpo`` (recipe.gcpo.estimator), ``diver`` (recipe.gcpo.baselines.diver) and ``copo``,
``mc_grpo`` (recipe.gcpo.baselines.reward_only) in verl's estimator registry. It registers no trainer mode: the GCPO trainer is built by
the recipe's entry point, ``python -m recipe.gcpo.main_gcpo``, for verl's own ``trainer.v1.trainer_mode=sync``.

Under verl's stock entry point (``VERL_USE_EXTERNAL_MODULES=recipe.gcpo.register python -m verl.trainer.main_ppo
--config-path <checkout>/recipe/gcpo/config --config-name gcpo_trainer ...``: verl imports the module in every
process that imports verl and has the variable, which a Ray started by verl inherits; on an existing Ray cluster
it must be in the environment of ``ray start`` on every node):

* verl's own estimators and the reward-only baselines (``mc_grpo``, and ``copo`` with
  ``algorithm.copo.blend=advantage``) run with verl's stock trainer, as they would under the recipe's entry point;
* a config that needs the GCPO trainer (``gcpo``, ``dqo``, ``dra_grpo``, ``diver``, Div-R1's actor loss
  ``algorithm.div_r1``, COPO's loss blend ``algorithm.copo.blend=loss`` or ``algorithm.group_contrastive``)
  fails when verl constructs its trainer, before any worker, model or rollout starts, with a message naming
  ``python -m recipe.gcpo.main_gcpo``. Without this check verl's trainer would ignore
  ``algorithm.group_contrastive`` and stop only at the first advantage step for the embedding estimators.
"""

from __future__ import annotations

import functools

from omegaconf import OmegaConf
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

import recipe.gcpo.baselines.reward_only  # noqa: F401  (registers "copo" and "mc_grpo")
import recipe.gcpo.baselines.diver  # noqa: F401  (registers "diver")
import recipe.gcpo.estimator  # noqa: F401  (registers "gcpo", "dqo" and "dra_grpo")
from recipe.gcpo.baselines.diver import DIVER_ESTIMATOR
from recipe.gcpo.gcpo_trainer import GCPOTrainer
from recipe.gcpo.settings import EMBEDDING_ESTIMATORS, needs_gcpo_trainer

# estimators whose inputs only the GCPO trainer computes (embeddings, or the response texts for DIVER)
TRAINER_ESTIMATORS = (*EMBEDDING_ESTIMATORS, DIVER_ESTIMATOR)


def needs_the_gcpo_trainer(config) -> str | None:
    """Why ``config`` cannot run under a trainer other than GCPOTrainer (None: it can)."""
    estimator = config.algorithm.adv_estimator
    if estimator in TRAINER_ESTIMATORS:
        return f"algorithm.adv_estimator={estimator}"
    if OmegaConf.select(config, "algorithm.div_r1.enable", default=False):
        return "algorithm.div_r1.enable=true"
    if estimator == "copo" and OmegaConf.select(config, "algorithm.copo.blend", default="loss") == "loss":
        return "algorithm.copo.blend=loss"
    if OmegaConf.select(config, "algorithm.group_contrastive.enable", default=False):
        return "algorithm.group_contrastive.enable=true"
    return None


def install_startup_check() -> None:
    original = PPOTrainer.__init__
    if getattr(original, "_gcpo_startup_check", False):
        return

    @functools.wraps(original)
    def checked_init(self, config, *args, **kwargs):
        needed_by = needs_the_gcpo_trainer(config)
        if needed_by is not None and not isinstance(self, GCPOTrainer):
            found = f"trainer class {type(self).__name__}"
            if needed_by.startswith("algorithm.adv_estimator="):
                raise ValueError(needs_gcpo_trainer(found, config.algorithm.adv_estimator))
            if needed_by.startswith("algorithm.copo."):
                raise ValueError(f"{needed_by} needs the GCPO trainer, which gives the actor COPO's blended loss; "
                                 f"{found} would train GRPO's loss alone. Launch with `python -m recipe.gcpo.main_gcpo`, "
                                 "or set algorithm.copo.blend=advantage.")
            if needed_by.startswith("algorithm.div_r1."):
                raise ValueError(f"{needed_by} needs the GCPO trainer, which gives the actor the Div-R1 loss; {found} "
                                 "would train without it. Launch with `python -m recipe.gcpo.main_gcpo`.")
            raise ValueError(f"{needed_by} needs the GCPO trainer, which injects the reference solutions before "
                             "the old log-probabilities; launch with `python -m recipe.gcpo.main_gcpo` (or "
                             f"scripts/run_qwen3_4b_group_contrastive.sh) (found: {found}).")
        original(self, config, *args, **kwargs)

    checked_init._gcpo_startup_check = True
    PPOTrainer.__init__ = checked_init


install_startup_check()
