"""Hydra entry point of the GCPO recipe: ``python -m recipe.gcpo.main_gcpo [key=value ...]``.

verl 0.9.1's V1 PPO entry point (``verl.trainer.main_ppo``) with one difference: in verl's ``sync`` trainer mode
its task runner (:mod:`recipe.gcpo.task_runner`) builds the recipe's ``GCPOTrainer`` (verl's ``PPOTrainerSync`` plus
the credit actor) where verl builds ``PPOTrainerSync``; in verl's other modes verl's own trainer runs (the GCPO
estimators are refused there).

Before Ray or any GPU is touched it composes the config once (:mod:`recipe.gcpo.compose`: the recipe's
``config/gcpo_trainer.yaml``, or a config of the user's own named with ``--config-path`` / ``--config-name``),
validates it and checks that this machine can start the run (:mod:`recipe.gcpo.preflight`); the run then trains on
that same config object. Every refusal is a :class:`~recipe.gcpo.config.ConfigError` (or another exception of the
composition and the checks), turned here, in :func:`start`, into one line, ``error: <message>``, exit status 2
(``HYDRA_FULL_ERROR=1`` adds the traceback between two copies of that line). With ``GCPO_DRY_RUN=1`` it stops after
validation and prints the composed config (the launchers' ``--dry-run``) and writes nothing; a training run keeps
Hydra's run directory beside its checkpoints (``hydra.run.dir``), made only once every check has passed. Hydra's
inspection commands (``--help``, ``--cfg``, ``--info``) show that same composition; a multirun is refused.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Mapping, NoReturn, Optional, Sequence

import ray


class _NoPlatformFallbackWarning(logging.Filter):
    """Drops verl's "No supported accelerator detected ... Falling back to 'nvidia'" (and its follow-up) in this
    process: on a machine without GPUs the start-up check says so in one line of its own, and a dry run needs none."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("No supported accelerator detected") or "is registered but not available" in message
        )


# before verl is imported: verl looks for its platform once per process, possibly while being imported
logging.getLogger("verl.plugin.platform.platform_manager").addFilter(_NoPlatformFallbackWarning())
from omegaconf import DictConfig
from verl.trainer.main_ppo import run_ppo
from verl.utils.device import auto_set_device

from recipe.gcpo.compose import compose, hydra_session, one_line, parse_command_line, run_composed, run_hydra_command
from recipe.gcpo.config import ConfigError
from recipe.gcpo.preflight import check_verl_config, validate
from recipe.gcpo.preflight.legacy_reward import migrate_legacy_reward
from recipe.gcpo.preflight.machine import check_accelerator, check_data_files, check_model_path
from recipe.gcpo.run_summary import print_dry_run, print_startup
from recipe.gcpo.task_runner import GCPOTaskRunner

# exit status of a run stopped by its config or by this machine (Hydra's own is 1)
CONFIG_ERROR_EXIT = 2


def fail(reason: str, error: BaseException | None = None) -> NoReturn:
    """Stop with the one-line reason; ``HYDRA_FULL_ERROR=1`` adds ``error``'s traceback, then the reason again
    (first and last, whatever scrolls by)."""
    line = f"error: {reason}"
    print(line, file=sys.stderr, flush=True)
    if error is not None and os.environ.get("HYDRA_FULL_ERROR") == "1":
        traceback.print_exception(error)
        print(line, file=sys.stderr, flush=True)
    raise SystemExit(CONFIG_ERROR_EXIT)


def adapt(config: DictConfig) -> list[str]:
    """What the entry point changes in the composed config before anything reads it: verl's device auto-detection,
    and verl's own migration of the legacy reward keys, which verl's V1 entry point does not run (so that they are
    honoured, not ignored); returns a line per migrated block."""
    auto_set_device(config)
    return migrate_legacy_reward(config)


def accept_run(config: DictConfig, choices: Mapping[str, Optional[str]], notes: Sequence[str] = ()) -> None:
    """Every check a run must pass before anything is started or written: the config's, then (once the start-up
    lines have said what will run) the model path's, this machine's and the data files'. A dry run stops short of
    this machine's checks and warns about the model path. ``choices``: the config's group choices, which name the
    protocol; ``notes``: what the composition added.

    Raises:
        ConfigError: the first check that fails (verl's own checks raise their own types).
    """
    check_verl_config(config)  # before anything reads a value or moves a key
    migrated = adapt(config)
    settings = validate(config)
    print_startup(config, settings.gcpo, choices, [*notes, *migrated])
    if dry_run_requested():
        try:
            check_model_path(config)
        except ConfigError as problem:  # a dry run loads no model: it says what a run would stop on
            print(f"# warning (a run stops here): {problem}", file=sys.stderr, flush=True)
        return
    check_model_path(config)
    check_accelerator(config)
    check_data_files(config)


def dry_run_requested() -> bool:
    return os.environ.get("GCPO_DRY_RUN", "0") == "1"


def train(config: DictConfig) -> None:
    """verl's V1 run (Ray, the workers, training) with the recipe's task runner, on an accepted config."""
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(GCPOTaskRunner))


def start(argv: list[str]) -> None:
    """The entry point: compose the config once, check it (and this machine), then train on it in Hydra's run
    directory, made only once every check passed (a refused run writes nothing); a dry run stops after the checks
    and makes no run directory. The one place a refusal becomes its line (:func:`fail`)."""
    with hydra_session():
        try:
            command = parse_command_line(argv)
            if command.hydra_command:  # --help, --cfg, --info ... on the same composition; a multirun is refused
                run_hydra_command(command)
                return
            composed = compose(command)
            accept_run(composed.config, composed.choices, composed.notes)
        except Exception as error:  # composing and checking read only the config and this machine: what they
            fail(one_line(error), error)  # raise is the config's (verl's own checks raise their own types)
        if dry_run_requested():
            print_dry_run(composed.config, entry_point=Path(__file__))
            return
        run_composed(composed, lambda: train(composed.config))  # a failure in training is Hydra's to report


def cli(argv: Optional[list[str]] = None) -> None:
    """``python -m recipe.gcpo.main_gcpo [key=value ...]`` (``argv``: the arguments, by default the command line's)."""
    try:
        start(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None


if __name__ == "__main__":
    cli()
