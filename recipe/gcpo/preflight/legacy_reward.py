"""verl's legacy top-level reward keys (``custom_reward_function``, ``reward_model``, ``sandbox_fusion``), moved into
``reward.*`` before any check reads the reward. verl 0.9.1's V1 trainer reads only ``reward.*``; only verl's fully-async
entry point migrates them, with ``verl.experimental.reward_loop.migrate_legacy_reward_impl``. The recipe applies that
same function, so a launcher's ``custom_reward_function.path=my_reward.py`` trains on it instead of being ignored.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from omegaconf import DictConfig, open_dict

from recipe.gcpo.config import Check, Facts, plain, run_checks
from recipe.gcpo.preflight import reward

CLASSIC = "custom_reward_function"
LEGACY_KEYS = (CLASSIC, "reward_model", "sandbox_fusion")


def _set(values: Mapping) -> bool:
    """Whether a legacy block sets anything (verl's rule: a value that is not None)."""
    return any(_set(v) if isinstance(v, Mapping) else v is not None for v in values.values())


# the config's facts before the move (fn_path, fn_name: reward.custom_reward_function's, as the user wrote it)
FACTS: dict[str, Callable[[Facts], Any]] = {
    **reward.FACTS,
    "moved": lambda f: [k for k in LEGACY_KEYS if isinstance(v := plain(f.config.get(k)), Mapping) and _set(v)],
    "classic": lambda f: {"path": None, "name": None, **plain(f.config.custom_reward_function)},
    # reward.custom_reward_function names a function of its own, not the config's default (the recipe's, or none)
    "own": lambda f: f["fn_path"] is not None and (f["fn_path"], f["fn_name"]) != reward.RECIPE_REWARD,
    "clash": lambda f: [k for k in ("path", "name") if f["classic"][k] not in (None, f[f"fn_{k}"])],
    "clash_list": lambda f: " and ".join(f["clash"]),
}
# a classic custom_reward_function block: beside a function of reward.*'s own it may only repeat it, as verl's
# migration replaces the whole block with the classic one (a classic name alone would run None:<name>, verl's
# data_source dispatch, and a classic path would replace the user's function, each with exit 0)
CHECKS: tuple[Check, ...] = (
    Check(
        "custom_reward_function.name",
        lambda f: f["classic"]["path"] is not None or f["fn_path"] is not None,
        "{classic[name]} without custom_reward_function.path: verl would run its data_source dispatch and ignore the "
        "name; set the path of the file that defines it",
    ),
    Check(
        "custom_reward_function.{clash[0]}",
        lambda f: not f["own"] or not f["clash"],
        "verl's legacy block ({classic[path]}:{classic[name]}), which the V1 trainer does not read, and "
        "reward.custom_reward_function ({fn_path}:{fn_name}) name different reward functions ({clash_list}): "
        "keep one, reward.custom_reward_function",
    ),
)


def migrate_legacy_reward(config: DictConfig) -> list[str]:
    """Move verl's legacy reward keys into ``reward.*`` with verl's own migration, in place; returns one line per
    block moved.

    Raises:
        ConfigError: what :data:`CHECKS` refuses, or :data:`reward.FUNCTION_CHECKS` under the legacy keys.
    """
    facts = Facts(config, FACTS)
    moved, lines = facts["moved"], []
    if not moved:
        return lines
    if CLASSIC in moved:
        run_checks(CHECKS, facts)
        with open_dict(config):  # its unset keys from reward.*'s own function, so that the move keeps it
            for key in ("path", "name") if facts["own"] else ():
                if facts["classic"][key] is None:
                    config.custom_reward_function[key] = facts[f"fn_{key}"]
    from verl.experimental.reward_loop import migrate_legacy_reward_impl

    migrate_legacy_reward_impl(config)
    if CLASSIC in moved:
        block = config.reward.custom_reward_function
        with open_dict(config):
            if not block.get("name"):
                block.name = reward.DEFAULT_REWARD_FN_NAME
        # checked here, where the keys the user wrote are known: validate would name reward.custom_reward_function
        run_checks(reward.FUNCTION_CHECKS, Facts(config, {**reward.FACTS, "written_as": lambda f: CLASSIC}))
        lines.append(
            f"custom_reward_function (verl's legacy key) -> reward.custom_reward_function: {block.path}:{block.name}, "
            "moved as verl's migrate_legacy_reward_impl moves it"
        )
    return lines + [
        f"{key} (verl's legacy keys) -> reward.{key}, moved as verl's migrate_legacy_reward_impl moves them"
        for key in moved
        if key != CLASSIC
    ]
