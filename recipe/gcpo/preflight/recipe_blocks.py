"""Start-up checks of the recipe's blocks in a whole config: parsed once (:class:`RecipeSettings`), run by the
trainer they need, and each checked against verl's keys it depends on. GCPO's checks are here; each baseline's are
in its own module (``recipe/gcpo/baselines/<name>.py``), reached through the registry.
"""

from __future__ import annotations

from typing import Optional

from omegaconf import DictConfig, OmegaConf

from gcpo_core.credit.shapley.exact import EXACT_LIMIT
from recipe.gcpo.config import (
    GCPO_FILTER_METRIC,
    SYNC_TRAINER_MODE,
    ConfigError,
    GCPOSettings,
    check_rollout_groups,
    recipe_trainer_problem,
)
from recipe.gcpo.preflight.verl_keys import uses_v1
from recipe.gcpo.settings import RecipeSettings


def check_recipe(config: DictConfig) -> RecipeSettings:
    """The recipe's own start-up checks of a full trainer config; returns its parsed settings.

    Raises:
        ConfigError: a bad recipe value, a setting that needs the GCPO trainer outside it, or one of the checks below.
    """
    settings = RecipeSettings.parse(config)  # what the trainer will parse, by the same code
    check_recipe_trainer(config, settings)
    if settings.gcpo is not None:
        check_gcpo(config, settings.gcpo)
    for baseline, block in settings.selected:
        if baseline.check is not None:
            baseline.check(config, block)
    return settings


def in_recipe_trainer_mode(config: DictConfig) -> bool:
    """Whether the recipe's entry point builds the GCPO trainer for this config (verl's V1 trainer in sync mode)."""
    return uses_v1(config) and trainer_mode(config) == SYNC_TRAINER_MODE


def trainer_mode(config: DictConfig) -> Optional[str]:
    return OmegaConf.select(config, "trainer.v1.trainer_mode")


def check_recipe_trainer(config: DictConfig, settings: RecipeSettings) -> None:
    """A setting only the GCPO trainer serves runs in the mode the recipe's entry point builds it for.

    Raises:
        ConfigError: such a setting with ``trainer.use_v1=false`` or another ``trainer.v1.trainer_mode``.
    """
    need = settings.trainer_need()
    if need is not None and not in_recipe_trainer_mode(config):
        found = f"trainer.use_v1={uses_v1(config)}, trainer.v1.trainer_mode={trainer_mode(config)}"
        key, _, value = need.setting.partition("=")
        raise ConfigError(key, f"{value} {recipe_trainer_problem(need, found)}")


def check_gcpo(config: DictConfig, settings: GCPOSettings) -> None:
    """Start-up checks of an embedding estimator (gcpo, dqo, dra_grpo) beyond its block's own values.

    Raises:
        ConfigError: too few rollouts per prompt or a multi-turn loop, a group past ``credit.max_group_size`` or
            past exact Shapley's limit, or DAPO group filtering that would silently discard all-correct groups.
    """
    estimator = config.algorithm.adv_estimator
    n = config.actor_rollout_ref.rollout.n
    check_rollout_groups(config, estimator)
    if settings.credit.method == "exact" and n > EXACT_LIMIT:
        raise ConfigError(
            "algorithm.gcpo.credit.method",
            f"exact enumerates 2^n coalitions: with rollout.n={n} > {EXACT_LIMIT} use auto or mc",
        )
    if n > settings.credit.max_group_size:
        raise ConfigError(
            "actor_rollout_ref.rollout.n",
            f"{n} exceeds algorithm.gcpo.credit.max_group_size={settings.credit.max_group_size}",
        )
    filter_groups = config.algorithm.get("filter_groups") or {}
    metric = filter_groups.get("metric")
    if filter_groups.get("enable", False) and metric != GCPO_FILTER_METRIC and not settings.filter_all_correct:
        raise ConfigError(
            "algorithm.filter_groups.metric",
            f"{metric!r} with algorithm.filter_groups.enable=true drops every group whose rollouts are "
            "all correct, which is where GCPO gives a signal GRPO does not. Use "
            f"{GCPO_FILTER_METRIC} with the GCPO reward function "
            "(recipe/gcpo/reward.py: it drops only groups without a GCPO signal), or set "
            "algorithm.gcpo.filter_all_correct=true to accept DAPO's filtering.",
        )
