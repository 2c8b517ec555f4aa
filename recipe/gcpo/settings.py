"""Everything the recipe adds to verl's config, parsed into one object by one function: :meth:`RecipeSettings.parse`;
and the recipe's baselines, registered here, one line each (docs/training.md#adding-a-baseline).

The driver's start-up checks (:mod:`recipe.gcpo.preflight`), the GCPO trainer and, under verl's stock trainers,
:mod:`recipe.gcpo.register` build their settings with it, so a value the trainer would refuse after Ray is up is
refused at start-up under every estimator; what runs after reads the parsed values (the estimators too, each step:
:func:`recipe.gcpo.baselines.block_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from omegaconf import DictConfig

from gcpo_core.credit.config import CreditConfig
from recipe.gcpo.baselines import BASELINES, Baseline, copo, div_r1, diver, group_contrastive, mc_grpo, register
from recipe.gcpo.config import EMBEDDING_ESTIMATORS, GCPOSettings, TrainerNeed, estimator_need

register(diver.BASELINE)
register(div_r1.BASELINE)
register(copo.BASELINE)
register(mc_grpo.BASELINE)
register(group_contrastive.BASELINE)


def recipe_estimators() -> tuple[str, ...]:
    """Every estimator the recipe registers in verl's registry (the driver checks a name against these and verl's
    own without importing the trainer)."""
    return (*EMBEDDING_ESTIMATORS, *(b.estimator for b in BASELINES.values() if b.estimator))


def recipe_blocks() -> tuple[str, ...]:
    """The recipe's blocks of verl's config, each parsed key by key by :meth:`RecipeSettings.parse`."""
    return ("algorithm.gcpo", *(b.block for b in BASELINES.values()))


@dataclass(frozen=True)
class RecipeSettings:
    """Every block the recipe adds to verl's config, parsed once per process.

    Attributes:
        estimator: ``algorithm.adv_estimator``.
        gcpo: ``algorithm.gcpo`` when the estimator embeds the responses (gcpo, dqo, dra_grpo), else None (the
            block is parsed regardless).
        credit: ``algorithm.gcpo.credit`` as this estimator reads it (GCPO's credit; DIVER's normalisation).
        blocks: every registered baseline's block, parsed, by name.
    """

    estimator: str
    gcpo: Optional[GCPOSettings]
    credit: CreditConfig
    blocks: Mapping[str, Any]

    @classmethod
    def parse(cls, config: DictConfig) -> "RecipeSettings":
        """Parse every recipe block (a typo fails even in a block the run does not use).

        Raises:
            ValueError: a bad value or an unknown key, naming its key path.
        """
        algorithm = config.algorithm
        estimator = algorithm.adv_estimator
        gcpo = GCPOSettings.from_algorithm_config(algorithm, estimator)
        return cls(
            estimator=estimator,
            gcpo=gcpo if estimator in EMBEDDING_ESTIMATORS else None,
            credit=gcpo.credit,
            blocks={name: baseline.parse(algorithm) for name, baseline in BASELINES.items()},
        )

    @property
    def selected(self) -> list[tuple[Baseline, Any]]:
        """The baselines this run uses, with their settings, in registration order."""
        return [
            (BASELINES[name], settings)
            for name, settings in self.blocks.items()
            if BASELINES[name].selected(self.estimator, settings)
        ]

    def trainer_need(self) -> Optional[TrainerNeed]:
        """The first setting that only the GCPO trainer serves (None: verl's own trainers serve it all)."""
        if self.gcpo is not None:
            return estimator_need(self.estimator)
        for baseline, settings in self.selected:
            need = baseline.needs_trainer(settings)
            if need is not None:
                return need
        return None
