"""Make the recipe's advantage estimators known to verl, and refuse at once a config that needs the GCPO trainer
under any other trainer.

Registers ``gcpo``, ``dqo``, ``dra_grpo`` (recipe.gcpo.estimator), ``diver`` (recipe.gcpo.baselines.diver), ``copo``
(recipe.gcpo.baselines.copo) and ``mc_grpo`` (recipe.gcpo.baselines.mc_grpo) in verl's estimator registry. It
registers no trainer mode: the GCPO trainer is built by the recipe's entry point, ``python -m recipe.gcpo.main_gcpo``,
for each of verl's own trainer modes (``recipe.gcpo.gcpo_trainer.GCPO_TRAINERS``). Which settings need that trainer,
and the message, are :meth:`recipe.gcpo.settings.RecipeSettings.trainer_need` and
:func:`recipe.gcpo.settings.recipe_trainer_message`.

Under verl's stock entry point (``VERL_USE_EXTERNAL_MODULES=recipe.gcpo.register python -m verl.trainer.main_ppo
--config-path <checkout>/recipe/gcpo/config --config-name gcpo_trainer ...``: verl imports the module in every
process that imports verl and has the variable, which a Ray started by verl inherits; on an existing Ray cluster
it must be in the environment of ``ray start`` on every node):

* verl's own estimators and the baselines that need only the rewards (``mc_grpo``, and ``copo`` with
  ``algorithm.copo.blend=advantage``) run with verl's stock trainer, as they would under the recipe's entry point;
* a config that needs the GCPO trainer (``gcpo``, ``dqo``, ``dra_grpo``, ``diver``, Div-R1's actor loss
  ``algorithm.div_r1``, COPO's loss blend ``algorithm.copo.blend=loss`` or ``algorithm.group_contrastive``)
  fails when verl constructs its trainer, before any worker, model or rollout starts, with a message naming
  ``python -m recipe.gcpo.main_gcpo``. Without this check verl's trainer would ignore
  ``algorithm.group_contrastive`` and stop only at the first advantage step for the embedding estimators.
"""

from __future__ import annotations

import functools

from verl.trainer.ppo.v1.trainer_base import PPOTrainer

import recipe.gcpo.estimator  # noqa: F401  (registers "gcpo", "dqo" and "dra_grpo")
from recipe.gcpo.gcpo_trainer import GCPOSteps
from recipe.gcpo.settings import (
    RecipeSettings,  # its baselines register "diver", "copo" and "mc_grpo"
    recipe_trainer_message,
)


def install_startup_check() -> None:
    """Make verl's trainers refuse, as they are built, a config that needs the GCPO trainer (once per process)."""
    original = PPOTrainer.__init__
    if getattr(original, "_gcpo_startup_check", False):
        return

    @functools.wraps(original)
    def checked_init(self, config, *args, **kwargs):
        if not isinstance(self, GCPOSteps):  # the recipe's trainers parse the settings themselves
            # parsed once in this process: verl's estimators then read these settings each step
            need = RecipeSettings.parse(config).trainer_need()
            if need is not None:
                raise ValueError(recipe_trainer_message(need, f"trainer class {type(self).__name__}"))
        original(self, config, *args, **kwargs)

    checked_init._gcpo_startup_check = True
    PPOTrainer.__init__ = checked_init


install_startup_check()
