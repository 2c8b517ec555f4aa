"""Everything the recipe adds to verl's config, parsed into one object by one function: :meth:`RecipeSettings.parse`.

The driver's start-up checks (:mod:`recipe.gcpo.preflight`) and the trainer (``GCPOTrainer.__init__``) both build
their settings with it, so a value the trainer would refuse after Ray is up is refused at start-up under every
estimator (``algorithm.gcpo.credit`` under ``diver``, whose normalisation reads it, for one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import DictConfig

from gcpo_core.baselines.diver import DiverConfig
from gcpo_core.credit.config import CreditConfig
from recipe.gcpo.baselines.copo import CopoSettings, copo_loss_settings
from recipe.gcpo.baselines.div_r1 import DivR1Settings, div_r1_settings
from recipe.gcpo.baselines.diver import diver_normalisation, diver_settings
from recipe.gcpo.baselines.group_contrastive import GroupContrastiveSettings, group_contrastive_settings
from recipe.gcpo.baselines.mc_grpo import MCGRPOSettings
from recipe.gcpo.config import GCPOSettings, gcpo_settings


@dataclass(frozen=True)
class RecipeSettings:
    """Every block the recipe adds to verl's config, parsed once per process.

    Attributes:
        gcpo: ``algorithm.gcpo`` when the estimator embeds the responses (gcpo, dqo, dra_grpo), else None.
        diver: ``algorithm.diver`` when the estimator is ``diver``, else None (the block is parsed regardless).
        diver_normalisation: how ``diver`` normalises its shaped reward (from ``algorithm.gcpo.credit`` and verl's
            ``norm_adv_by_std_in_grpo``) when the estimator is ``diver``, else None.
        div_r1: ``algorithm.div_r1`` when enabled, else None. copo: ``algorithm.copo`` when ``copo`` trains with
            the loss blend, else None. group_contrastive: ``algorithm.group_contrastive`` (``enable`` says whether
            it runs). mc_grpo: ``algorithm.mc_grpo``.
    """

    gcpo: Optional[GCPOSettings]
    diver: Optional[DiverConfig]
    diver_normalisation: Optional[CreditConfig]
    div_r1: Optional[DivR1Settings]
    copo: Optional[CopoSettings]
    group_contrastive: GroupContrastiveSettings
    mc_grpo: MCGRPOSettings

    @classmethod
    def parse(cls, config: DictConfig) -> "RecipeSettings":
        """Parse every recipe block (a typo fails even in a block the run does not use).

        Raises:
            ValueError: a bad value or an unknown key, naming its key path.
        """
        diver = diver_settings(config)
        return cls(
            gcpo=gcpo_settings(config),
            diver=diver,
            diver_normalisation=diver_normalisation(config.algorithm) if diver is not None else None,
            div_r1=div_r1_settings(config),
            copo=copo_loss_settings(config),
            group_contrastive=group_contrastive_settings(config),
            mc_grpo=MCGRPOSettings.from_algorithm_config(config.algorithm),
        )
