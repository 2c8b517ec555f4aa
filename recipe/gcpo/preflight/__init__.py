"""Every start-up check of a whole config, run by the entry point before Ray or a GPU is touched: what would
otherwise fail minutes into a cluster start-up (or not fail at all). One module a concern:

* :mod:`~recipe.gcpo.preflight.recipe_blocks`: the recipe's blocks, parsed once, and the trainer they need (each
  baseline's own checks are in its module under ``recipe/gcpo/baselines/``);
* :mod:`~recipe.gcpo.preflight.legacy_reward` and :mod:`~recipe.gcpo.preflight.reward`: verl's legacy reward keys
  moved into ``reward.*``, then the reward function and the keyword arguments verl passes it;
* :mod:`~recipe.gcpo.preflight.verl_keys`: verl's keys that verl reads late (the estimator) or untyped (numbers);
* :mod:`~recipe.gcpo.preflight.machine`: this machine (GPUs or the Ray cluster, the weights, loggers, data files).

:func:`validate` runs the config's checks in order, the dry run's as a run's. What start-up prints about what will
run is :mod:`recipe.gcpo.run_summary`'s.
"""

from __future__ import annotations

import warnings

from omegaconf import DictConfig
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

from recipe.gcpo.config import ConfigError, Facts, run_checks
from recipe.gcpo.preflight import machine, recipe_blocks, reward, verl_keys
from recipe.gcpo.preflight.recipe_blocks import check_recipe
from recipe.gcpo.preflight.schema import check_resolves, check_schema, check_verl_dataclasses
from recipe.gcpo.preflight.verl_keys import check_values
from recipe.gcpo.settings import RecipeSettings


def config_facts(config: DictConfig) -> Facts:
    """The facts the start-up checks read of ``config``, each read once (:class:`~recipe.gcpo.config.Facts`)."""
    tables = (verl_keys.FACTS, recipe_blocks.FACTS, reward.FACTS, machine.FACTS)
    names = [name for table in tables for name in table]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # a later module's reader would silently replace an earlier one's
        raise RuntimeError(f"start-up facts defined by two modules: {twice}")
    return Facts(config, {name: reader for table in tables for name, reader in table.items()})


def check_verl_config(config: DictConfig) -> dict:
    """verl's keys and values, read as the user wrote them (the entry point runs it before verl's legacy reward keys
    move, and :func:`validate` after): every value resolves, the rule table's values, then every key and kind against
    verl's schema. Returns the config resolved, as plain Python.

    Raises:
        ConfigError: the first that fails, naming its key.
    """
    resolved = check_resolves(config)
    check_values(config)
    check_schema(resolved)
    return resolved


def validate(config: DictConfig) -> RecipeSettings:
    """Every start-up check of the config: its values resolve, then verl's
    keys and values (its schema, the rule tables, the batch's geometry), the recipe's, the reward's, the encoder's,
    the loggers', the data files', then verl's own (its config dataclasses, its ``validate_config``); returns the
    recipe's settings, parsed once.

    Raises:
        ConfigError: the first check that fails, in one line naming the key.
    """
    resolved = check_verl_config(config)
    facts = config_facts(config)
    run_checks(verl_keys.CHECKS, facts)
    settings = check_recipe(config, facts)
    run_checks(reward.CHECKS, facts)
    run_checks(machine.CONFIG_CHECKS, facts)
    with warnings.catch_warnings():
        # need_critic's "Disabled critic as algorithm.adv_estimator != gae": what every estimator but gae does, and
        # what the start-up lines say (docs/training.md#a-clean-start-up)
        warnings.filterwarnings("ignore", message="Disabled critic", category=UserWarning)
        use_critic = need_critic(config)
    check_verl_dataclasses(config, resolved, use_critic)
    try:
        validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=use_critic)
    except (ValueError, AssertionError) as error:  # verl's own checks: their messages name the key
        raise ConfigError(None, f"verl's validate_config: {' '.join(str(error).split())}") from None
    return settings
