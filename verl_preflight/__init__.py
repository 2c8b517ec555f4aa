"""Start-up checks of a verl 0.9.1 ``ppo_trainer`` config: what verl would otherwise find minutes into a cluster
start-up, in a worker, or never (a key misspelt in a YAML or added with ``+``, a value verl compares with a string
late, a batch that does not split over the GPUs, a reward function that cannot take verl's arguments, a data file
that is not data, a machine without the GPUs the config asks for), each refused in one line naming the key.

Its face is :func:`check_config` (and :func:`~verl_preflight.reward.migrate_legacy_reward`, which it runs); a recipe
adds its own blocks and rules through an :class:`Extension`. ``python -m verl_preflight key=value ...`` checks a stock
verl run's config from the command line (:mod:`verl_preflight.__main__`); :mod:`verl_preflight.front_door` composes
a command line with Hydra's compose API, every failure of it one line too. Nothing here imports a recipe.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

from omegaconf import DictConfig

from verl_preflight import machine
from verl_preflight.errors import ConfigError, refuse
from verl_preflight.reward import check_reward, migrate_legacy_reward
from verl_preflight.rules import check_batch_geometry, check_estimator, check_lengths_and_shards, check_trainer_mode
from verl_preflight.schema import check_blocks, check_resolves, check_schema, check_verl_dataclasses
from verl_preflight.values import check_values

__all__ = ["ConfigError", "Extension", "Checked", "check_config", "migrate_legacy_reward", "refuse"]


class _NoPlatformFallbackWarning(logging.Filter):
    """Drops verl's "No supported accelerator detected ... Falling back to 'nvidia'" (and its follow-up), which verl
    logs as it is imported: on a machine without GPUs the machine's check says so in one line of its own, and a check
    of the config needs none. Installed as this package is imported, which is before verl (it imports verl late)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("No supported accelerator detected") or "is registered but not available" in message
        )


logging.getLogger("verl.plugin.platform.platform_manager").addFilter(_NoPlatformFallbackWarning())


@dataclass(frozen=True)
class Extension:
    """What a recipe adds to verl's config and its checks.

    Attributes:
        name: who reads the blocks, in a refusal ("the recipe": "not a key verl 0.9.1 or the recipe reads").
        blocks: ``() -> names`` of its blocks of the config (``algorithm.gcpo``, ...), which verl's schema does not
            check: its rules do (a function: what is registered when a config is checked).
        estimators: ``() -> names`` of the ``algorithm.adv_estimator`` values it registers where its trainer runs.
        rules: ``(config) -> settings``: its own checks, after verl's keys and before the reward and the machine;
            what it returns is :class:`Checked`'s ``settings``.
        reward: (path, name) of the reward function its config names when the user names none (a legacy reward
            block replaces it without a clash).
        prepared: (data file names, hint): files its data preparation writes, and how (for a missing one).
        config_folder: its Hydra config folder, on the search path of any config (its groups: ``+protocol=...``).
        keys_group: (group, option) of that folder that holds its ``blocks``, added to a config that lacks them.
    """

    name: str = ""
    blocks: Callable[[], tuple[str, ...]] = tuple
    estimators: Callable[[], tuple[str, ...]] = tuple
    rules: Optional[Callable[[DictConfig], Any]] = None
    reward: tuple[Optional[str], Optional[str]] = (None, None)
    prepared: tuple = ()
    config_folder: Any = None
    keys_group: Optional[tuple[str, str]] = None

    @property
    def reader(self) -> str:
        return f"verl 0.9.1 or {self.name}" if self.name else "verl 0.9.1"


class Checked(NamedTuple):
    """What :func:`check_config` has to say of a config it accepts: ``notes`` (legacy keys it moved), ``warnings``
    (a dry run's: what a run on this machine would be refused for) and the extension's ``settings``."""

    notes: list[str]
    warnings: list[str]
    settings: Any = None


def check_config(
    config: DictConfig, extension: Extension = Extension(), *, dry_run: bool = False, machine_checks: bool = True
) -> Checked:
    """Every check of a composed config, in the order a reader meets the problems: verl's blocks, that every value
    resolves, the value table, verl's schema of keys and kinds, then (verl's device set and its legacy reward keys
    moved, as verl's own entry points do, in place) the rules between keys, the extension's rules, the reward, the
    loggers and data files, verl's config dataclasses and its ``validate_config``, and last this machine (the model's
    weights, the GPUs or Ray cluster, the data files): a dry run gets those as warnings, ``machine_checks=False``
    skips them.

    Raises:
        ConfigError: the first that fails, naming its key.
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    check_blocks(config)
    resolved = check_resolves(config)
    check_values(config)
    check_schema(resolved, extension.blocks(), extension.reader)
    auto_set_device(config)
    notes = migrate_legacy_reward(config, extension.reward)
    check_estimator(config, extension.estimators(), "verl or " + extension.name if extension.name else "verl")
    check_batch_geometry(config)
    check_lengths_and_shards(config)
    check_trainer_mode(config)
    settings = extension.rules(config) if extension.rules is not None else None
    check_reward(config)
    machine.check_files_and_loggers(config)
    with warnings.catch_warnings():
        # need_critic's "Disabled critic as algorithm.adv_estimator != gae": what every estimator but gae does
        warnings.filterwarnings("ignore", message="Disabled critic", category=UserWarning)
        use_critic = need_critic(config)
    check_verl_dataclasses(config, resolved, use_critic)
    try:
        validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=use_critic)
    except (ValueError, AssertionError) as error:  # verl's own checks: their messages name the key
        refuse(None, f"verl's validate_config: {error}")
    found = []
    if machine_checks:
        checks = [machine.check_model_path]
        if not dry_run:
            checks += [machine.check_accelerators, lambda c: machine.check_data_files_exist(c, extension.prepared)]
        for check in checks:
            try:
                check(config)
            except ConfigError as problem:  # a dry run loads no model: it says what a run would stop on
                if not dry_run:
                    raise
                found.append(str(problem))
    return Checked(notes, found, settings)
