"""Hydra entry point of the GCPO recipe: ``python -m recipe.gcpo.main_gcpo [key=value ...]``, with its task runner.

verl 0.9.1's V1 PPO entry point (``verl.trainer.main_ppo``) on Hydra's public API (``hydra.main``, as verl-recipe's
``dapo/main_dapo.py``) with two differences: in verl's ``sync`` trainer mode its task runner (:class:`GCPOTaskRunner`)
builds the recipe's ``GCPOTrainer`` (verl's ``PPOTrainerSync`` plus the credit actor) where verl builds
``PPOTrainerSync`` (in verl's other modes verl's own trainer runs; the GCPO estimators are refused there), and every
run is checked before Ray or any GPU is touched.

The checks are a Hydra callback (:class:`StartUpChecks`) that every composition of this process carries, the
recipe's ``config/gcpo_trainer.yaml`` or a config of the user's own (``--config-path`` / ``--config-name``, verl's
``ppo_trainer`` plus their keys): Hydra calls it on the composed config before it makes the run directory, so a
refused run writes nothing. It validates the config, checks that this machine can start the run
(:mod:`recipe.gcpo.preflight`), and the task trains on that config (Hydra copies it after the callback). A refusal
is one line, ``error: <message>``, exit status 2 (``HYDRA_FULL_ERROR=1`` adds the traceback between two copies of
that line). With ``GCPO_DRY_RUN=1`` it stops after validation, prints the composed config (the launchers'
``--dry-run``) and writes nothing. What Hydra itself refuses (an override of a key that does not exist, an override
its grammar cannot read, an unknown flag) is Hydra's own report, which names the key (exit 1; argparse's: 2).
Hydra's ``--help``, ``--cfg``, ``--info`` show the composition before the checks; a multirun is refused.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path
from pprint import pprint
from typing import Mapping, NoReturn, Optional, Sequence

import hydra
import ray
from hydra.conf import HydraConf
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback


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
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
from verl.utils.device import auto_set_device

from recipe.gcpo.config import SYNC_TRAINER_MODE, ConfigError, run_checks
from recipe.gcpo.preflight import check_verl_config, config_facts, machine, validate
from recipe.gcpo.preflight.legacy_reward import migrate_legacy_reward
from recipe.gcpo.run_summary import print_dry_run, print_startup

# exit status of a run stopped by its config or by this machine (Hydra's own is 1)
CONFIG_ERROR_EXIT = 2
CONFIG_DIR = Path(__file__).resolve().parent / "config"
# config/gcpo_keys/recipe.yaml: algorithm.gcpo and the baselines' blocks, for a user's config that lacks them
RECIPE_KEYS = CONFIG_DIR / "gcpo_keys" / "recipe.yaml"

_store = ConfigStore.instance()
# Hydra's own config (hydra/config, a structured config) with the start-up checks among its callbacks: every
# composition of this process, the recipe's config or a user's own, carries them; other Hydra apps are untouched.
# (The recipe's groups, protocol/ and gcpo_keys/, are on the search path of a user's config through
# hydra_plugins/gcpo_recipe.)
_store.store(
    group="hydra",
    name="config",
    node=HydraConf(callbacks={"gcpo_start_up_checks": {"_target_": "recipe.gcpo.main_gcpo.StartUpChecks"}}),
    provider="hydra",
)


def fail(reason: str, error: BaseException | None = None) -> NoReturn:
    """Stop with the one-line reason; ``HYDRA_FULL_ERROR=1`` adds ``error``'s traceback, then the reason again
    (first and last, whatever scrolls by)."""
    line = f"error: {reason}"
    print(line, file=sys.stderr, flush=True)
    if error is not None and os.environ.get("HYDRA_FULL_ERROR") == "1":
        traceback.print_exception(error)
        print(line, file=sys.stderr, flush=True)
    raise SystemExit(CONFIG_ERROR_EXIT)


def one_line(error: BaseException) -> str:
    """An exception's message on one line (OmegaConf's span several)."""
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    return text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}"


def add_recipe_keys(config: DictConfig, config_name: Optional[str]) -> list[str]:
    """The recipe's ``algorithm`` blocks (``config/gcpo_keys/recipe.yaml``) that ``config`` lacks, added with their
    defaults (a user's own config); returns a line saying so, or none."""
    recipe = OmegaConf.load(RECIPE_KEYS).algorithm
    missing = [key for key in recipe if key not in config.algorithm]
    with open_dict(config.algorithm):
        for key in missing:
            config.algorithm[key] = recipe[key]
    if not missing:
        return []
    blocks = ", ".join(f"algorithm.{key}" for key in missing)
    return [
        f"your config ({config_name}) has no {blocks}: the recipe's keys are added (from {RECIPE_KEYS}; "
        "+gcpo_keys=recipe before them lets the command line override them)"
    ]


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
    protocol; ``notes``: what the entry point added.

    Raises:
        ConfigError: the first check that fails (verl's own checks raise their own types).
    """
    check_verl_config(config)  # before anything reads a value or moves a key
    migrated = adapt(config)
    settings = validate(config)
    print_startup(config, settings.gcpo, choices, [*notes, *migrated])
    facts = config_facts(config)
    if dry_run_requested():
        try:
            run_checks(machine.MODEL_CHECKS, facts)
        except ConfigError as problem:  # a dry run loads no model: it says what a run would stop on
            print(f"# warning (a run stops here): {problem}", file=sys.stderr, flush=True)
        return
    run_checks(machine.RUN_CHECKS, facts)


def dry_run_requested() -> bool:
    return os.environ.get("GCPO_DRY_RUN", "0") == "1"


# whether the start-up checks accepted this call's config (the task refuses to train otherwise)
_accepted = False


class StartUpChecks(Callback):
    """The start-up checks as a Hydra callback: Hydra calls ``on_run_start`` on the composed config before
    ``run_job`` makes the run directory and copies the config (without Hydra's node) for the task."""

    def on_run_start(self, config: DictConfig, config_name: Optional[str] = None, **kwargs) -> None:
        HydraConfig.instance().set_config(config)  # ${hydra:...} resolves in the checks as in the run
        with read_write(config), open_dict(config):
            node = config.pop("hydra")  # the checks read the task's keys, as the task gets them
        try:
            notes = add_recipe_keys(config, config_name)
            accept_run(config, OmegaConf.to_container(node.runtime.choices), notes)
            if dry_run_requested():
                print_dry_run(config, entry_point=Path(__file__))
        except Exception as error:  # the checks read only the config and this machine: what they raise is the
            fail(one_line(error), error)  # config's (verl's own checks raise their own types)
        finally:
            with read_write(config), open_dict(config):
                config.hydra = node
        if dry_run_requested():
            raise SystemExit(0)  # before the run directory: a dry run writes nothing
        global _accepted
        _accepted = True

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        fail(
            "--multirun (-m) is not supported: the entry point composes, checks and starts one training run per "
            "call; start one call per setting (python -m recipe.gcpo.main_gcpo key=value ..., or a launcher with "
            "its overrides)"
        )


# the folder by its path: as a module path, recipe.gcpo.config would name config.py
@hydra.main(config_path=str(CONFIG_DIR), config_name="gcpo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    """Hydra's task, in the run directory: train on the config the start-up checks accepted."""
    if not _accepted:
        fail("the start-up checks did not run on this config (hydra.callbacks.gcpo_start_up_checks was removed)")
    train(config)


def train(config: DictConfig) -> None:
    """verl's V1 run (Ray, the workers, training) with the recipe's task runner, on an accepted config."""
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(GCPOTaskRunner))


def cli(argv: Optional[list[str]] = None) -> None:
    """``python -m recipe.gcpo.main_gcpo [key=value ...]`` (``argv``: the arguments, by default the command line's)."""
    program = sys.argv[:1]
    if argv is not None:  # hydra.main reads sys.argv
        sys.argv = [*program, *argv]
    global _accepted
    _accepted = False
    try:
        main()
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    finally:
        if argv is not None:
            sys.argv = program


# ---- the task runner (in its own Ray process, the only one of the driver's side that builds the trainer) ---------


def trainer_class(mode: str):
    """The trainer the recipe runs in verl's trainer mode ``mode``: GCPOTrainer for ``sync``, verl's own else."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    if mode == SYNC_TRAINER_MODE:
        # imported where the trainer is built (the task runner), not in the driver: the dry run never builds one,
        # and the trainer pulls in TransferQueue and verl's trainer stack
        from recipe.gcpo.gcpo_trainer import GCPOTrainer

        return GCPOTrainer
    return get_trainer_cls(mode)


class GCPOTaskRunner(TaskRunnerV1.__ray_actor_class__):
    """verl's V1 task runner, building ``trainer_class(mode)`` with the recipe's estimators registered."""

    def run(self, config: DictConfig):
        """verl 0.9.1's ``TaskRunnerV1.run`` line for line, but for the trainer class (verl looks it up in its
        trainer registry by the mode string, which would need a second name for the same mode)."""
        from verl.utils.logging_utils import configure_verl_logging

        import recipe.gcpo.register  # noqa: F401  (the recipe's estimators, in this process)

        configure_verl_logging()

        import transfer_queue as tq

        trainer_cls = trainer_class(config.trainer.v1.trainer_mode)

        config.transfer_queue.enable = True
        pprint(OmegaConf.to_container(config, resolve=True))
        OmegaConf.resolve(config)
        self.config = config

        # initialize transfer queue
        tq.init(config.transfer_queue)
        succeeded = False
        try:
            self.trainer = trainer_cls(config=config)
            self.trainer.init()
            self.init_agent_loop_manager()
            self.trainer.fit(self.agent_loop_manager)
            succeeded = True
        finally:
            try:
                stop_dataloader_workers(getattr(self, "trainer", None))
                tracking = getattr(self.trainer, "logger", None)
                if tracking is not None:
                    tracking.finish(exit_code=0 if succeeded else 1)
            finally:
                tq.close()


def stop_dataloader_workers(trainer) -> None:
    """Stop the training data loader's worker processes once training is over.

    verl keeps the training data iterator (``trainer.train_dataloader_it``, for the loader's checkpoint state), and
    with it ``data.dataloader_num_workers`` worker processes, after ``fit`` returns. When Ray then stops the task
    runner it kills those children first, and torch's SIGCHLD handler prints ``RuntimeError: DataLoader worker
    (pid ...) is killed by signal: Killed`` after a run that succeeded. Nothing reads the iterator after ``fit``.
    """
    iterator = getattr(trainer, "train_dataloader_it", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()
    if iterator is not None:
        trainer.train_dataloader_it = None


if __name__ == "__main__":
    # run from the module's importable copy: Hydra instantiates the callback (recipe.gcpo.main_gcpo.StartUpChecks)
    # from it, and Ray ships GCPOTaskRunner by reference to it
    from recipe.gcpo.main_gcpo import cli as _cli

    _cli()
