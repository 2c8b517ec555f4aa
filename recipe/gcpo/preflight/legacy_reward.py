"""verl's legacy top-level reward keys, moved into ``reward.*`` before any check reads the reward.

verl 0.9.1's V1 trainer reads only ``reward.*``. The classic top-level ``custom_reward_function`` / ``reward_model`` /
``sandbox_fusion`` keys most launchers set are read only by verl's fully-async entry point, which migrates them with
``verl.experimental.reward_loop.migrate_legacy_reward_impl``. The recipe applies that same function, so a launcher's
``custom_reward_function.path=my_reward.py`` trains on ``my_reward.py`` instead of being ignored; one that also sets a
different ``reward.custom_reward_function`` is refused.
"""

from __future__ import annotations

from typing import Mapping

from omegaconf import DictConfig, OmegaConf, open_dict

from recipe.gcpo.config import ConfigError, Facts, run_checks
from recipe.gcpo.preflight.reward import DEFAULT_REWARD_FN_NAME, FACTS, FUNCTION_CHECKS, RECIPE_REWARD


def _set(values: Mapping) -> bool:
    """Whether a legacy block sets anything (verl's rule: a value that is not None)."""
    for value in values.values():
        if isinstance(value, Mapping):
            if _set(value):
                return True
        elif value is not None:
            return True
    return False


def migrate_legacy_reward(config: DictConfig) -> list[str]:
    """Move verl's legacy reward keys into ``reward.*`` with verl's own migration, in place; returns one line per
    block moved (none when no legacy key is set).

    Raises:
        ConfigError: a classic ``custom_reward_function`` whose path or name differs from a
            ``reward.custom_reward_function`` of the user's own (:func:`keep_reward_function`).
        ConfigError: a legacy reward function that ``FUNCTION_CHECKS`` refuses (named by the legacy keys).
    """
    legacy = {
        key: OmegaConf.to_container(config[key], resolve=True)
        if isinstance(config.get(key), DictConfig)
        else config.get(key)
        for key in ("custom_reward_function", "reward_model", "sandbox_fusion")
    }
    moved = [key for key, values in legacy.items() if isinstance(values, Mapping) and _set(values)]
    if not moved:
        return []
    lines = []
    if "custom_reward_function" in moved:
        classic = legacy["custom_reward_function"]
        if classic.get("path") is None and OmegaConf.select(config, "reward.custom_reward_function.path") is None:
            raise ConfigError(
                "custom_reward_function.name",
                f"{classic.get('name')} without custom_reward_function.path: verl would run its data_source "
                "dispatch and ignore the name; set the path of the file that defines it",
            )
        keep_reward_function(config, classic)
    from verl.experimental.reward_loop import migrate_legacy_reward_impl

    migrate_legacy_reward_impl(config)
    if "custom_reward_function" in moved:
        with open_dict(config):
            if not config.reward.custom_reward_function.get("name"):
                config.reward.custom_reward_function.name = DEFAULT_REWARD_FN_NAME
        # checked here, while the keys the user wrote are known: after the move its problems would be reported
        # under reward.custom_reward_function, which the user never wrote
        run_checks(FUNCTION_CHECKS, Facts(config, {**FACTS, "written_as": lambda f: "custom_reward_function"}))
        reward = config.reward.custom_reward_function
        lines.append(
            f"custom_reward_function (verl's legacy key) -> reward.custom_reward_function: {reward.path}:"
            f"{reward.name}, moved as verl's migrate_legacy_reward_impl moves it"
        )
    lines += [
        f"{key} (verl's legacy keys) -> reward.{key}, moved as verl's migrate_legacy_reward_impl moves them"
        for key in moved
        if key != "custom_reward_function"
    ]
    return lines


def keep_reward_function(config: DictConfig, classic: Mapping) -> None:
    """Where ``reward.custom_reward_function`` names a function of its own (not the config's default: the recipe's
    reward, or none), a classic top-level ``custom_reward_function`` may only repeat it: verl's migration replaces the
    whole block with the classic one, so a classic ``name`` beside a full ``reward.*`` would run ``None:<name>``
    (verl's data_source dispatch) and a classic ``path`` would replace the user's function, each with exit 0. The
    classic block's unset keys are filled from ``reward.*`` so that the migration keeps it. A classic block alone
    (``reward.*`` at its default) is migrated as it is.

    Raises:
        ConfigError: a classic path or name that differs from ``reward.custom_reward_function``'s, naming both.
    """
    current = OmegaConf.select(config, "reward.custom_reward_function") or {}
    path, name = current.get("path"), current.get("name") or DEFAULT_REWARD_FN_NAME
    if path is None or (path, name) == RECIPE_REWARD:
        return  # reward.* is the config's default: the classic block says which function runs
    given = {"path": path, "name": name}
    clash = [key for key in ("path", "name") if classic.get(key) is not None and classic[key] != given[key]]
    if clash:
        raise ConfigError(
            f"custom_reward_function.{clash[0]}",
            f"verl's legacy block ({classic.get('path')}:{classic.get('name')}), which the V1 trainer does not read, "
            f"and reward.custom_reward_function ({path}:{name}) name different reward functions "
            f"({' and '.join(clash)}): keep one, reward.custom_reward_function",
        )
    with open_dict(config):
        for key, value in given.items():
            if classic.get(key) is None:
                config.custom_reward_function[key] = value
