"""Hydra entry point of the GCPO recipe: ``python -m recipe.gcpo.main_gcpo [key=value ...]``.

verl 0.9.1's V1 PPO entry point (``verl.trainer.main_ppo``) with one difference: in verl's ``sync`` trainer mode
its task runner builds the recipe's ``GCPOTrainer`` (verl's ``PPOTrainerSync`` plus the credit actor) where verl
builds ``PPOTrainerSync``. The mode stays ``sync``, so every branch of verl's trainer that reads it (replay buffer,
gen batch size, DAPO refill, checkpoints, resume) is verl's sync one; in verl's other modes verl's own trainer
runs (the GCPO estimators are refused there).

Before Ray or any GPU is touched it composes the config once (:mod:`recipe.gcpo.compose`: the recipe's
``config/gcpo_trainer.yaml``, verl's ``ppo_trainer`` plus the GCPO keys, or a config of the user's own named with
``--config-path`` / ``--config-name``), validates it and checks that this machine can start the run (every check is
in :mod:`recipe.gcpo.preflight`); the run then trains on that same config object. A bad override or value stops it
with one line saying why, exit status 2 (``HYDRA_FULL_ERROR=1`` adds the traceback between two copies of that
line). With ``GCPO_DRY_RUN=1`` it stops after validation and prints the composed config (what the launchers'
``--dry-run`` does) and writes nothing; a training run keeps Hydra's run directory beside its checkpoints
(``hydra.run.dir`` in the config), made only once every check has passed: a refused run writes nothing.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path
from pprint import pprint
from typing import Mapping, NoReturn, Optional

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
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
from verl.utils.device import auto_set_device

from recipe.gcpo.compose import (
    compose,
    hydra_session,
    one_line,
    parse_command_line,
    run_composed,
    run_hydra_command,
)
from recipe.gcpo.config import SYNC_TRAINER_MODE, ConfigError
from recipe.gcpo.preflight import validate
from recipe.gcpo.preflight.legacy_reward import migrate_legacy_reward
from recipe.gcpo.preflight.machine import accelerator_problem, missing_data_files, missing_data_hint, model_path_problem
from recipe.gcpo.run_summary import local_gpu, memory_lines, protocol_line, startup_lines

DRY_RUN_MARKER = "# composed config (dry run)"
DRY_RUN_DONE = "# dry run ({estimator}): the config composes and validates; nothing was started."
# exit status of a run stopped by its config or by this machine (Hydra's own is 1)
CONFIG_ERROR_EXIT = 2


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


def accept_run(config: DictConfig, choices: Mapping[str, Optional[str]], notes: list[str] = ()) -> None:
    """Every check a run must pass before anything is started or written: the config's, this machine's, the data
    files'; then says what will run (``choices``: the config's group choices, which name the protocol; ``notes``:
    what the composition added). A dry run stops short of this machine's checks and warns about the model path.

    Raises:
        ValueError: the first check that fails, one line naming the key (:class:`~recipe.gcpo.config.ConfigError`
            where it has one).
    """
    migrated = adapt(config)
    settings = validate(config).gcpo
    lines = [*notes, *migrated, *startup_lines(config, settings), protocol_line(choices)]
    if settings is not None:  # the credit actor's GPU memory beside vLLM's share, computed from the config
        lines += memory_lines(settings, config, *local_gpu())
    for line in lines:
        print(f"gcpo: {line}", flush=True)
    model_problem = model_path_problem(config)
    if dry_run_requested():
        if model_problem is not None:  # a dry run loads no model: it says what a run would stop on
            print(f"# warning (a run stops here): {model_problem}", file=sys.stderr, flush=True)
        return
    for problem in (model_problem, accelerator_problem(config)):
        if problem is not None:
            raise ConfigError(None, problem)
    missing = missing_data_files(config)
    if missing:
        raise ConfigError(
            "data.train_files",
            f"{missing[0]} does not exist (data.train_files / data.val_files): {missing_data_hint(missing[0])}"
            + (f" ({len(missing) - 1} more missing)" if len(missing) > 1 else ""),
        )


def dry_run_requested() -> bool:
    return os.environ.get("GCPO_DRY_RUN", "0") == "1"


def print_dry_run(config: DictConfig) -> None:
    """What a dry run prints after the start-up lines: the entry point's file, the composed config, the data files
    that are not here, and that nothing was started."""
    # which copy of the recipe runs: an installed one and a checkout on the path can differ
    print(f"# entry point: {Path(__file__).resolve()}")
    print(DRY_RUN_MARKER)
    print(OmegaConf.to_yaml(config, resolve=True))
    for path in missing_data_files(config):
        print(f"# warning: {path} does not exist here ({missing_data_hint(path)})")
    print(DRY_RUN_DONE.format(estimator=f"adv_estimator={config.algorithm.adv_estimator}"))


def train(config: DictConfig) -> None:
    """verl's V1 run (Ray, the workers, training) with the recipe's task runner, on an accepted config."""
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(GCPOTaskRunner))


def start(argv: list[str]) -> None:
    """The entry point: compose the config once, check it (and this machine), then train on it in Hydra's run
    directory, made only once every check passed (a refused run writes nothing); a dry run stops after the
    checks and makes no run directory. Every refusal is one line, exit status 2 (:func:`fail`)."""
    command = parse_command_line(argv)
    if command.hydra_command:  # Hydra's own commands: Hydra composes, and a job it runs is checked the same way
        run_hydra_command(command, lambda config: _checked_train(config, HydraConfig.get().runtime.choices))
        return
    with hydra_session():
        try:
            composed = compose(command)
            accept_run(composed.config, composed.choices, composed.notes)
        except Exception as error:  # composing and checking read only the config and this machine: what they
            fail(one_line(error), error)  # raise is the config's (verl's own checks raise their own types)
        if dry_run_requested():
            print_dry_run(composed.config)
            return
        run_composed(composed, lambda: train(composed.config))  # a failure in training is Hydra's to report


def _checked_train(config: DictConfig, choices: Mapping[str, Optional[str]]) -> None:
    try:
        accept_run(config, choices)
    except Exception as error:  # as in start()
        fail(one_line(error), error)
    if not dry_run_requested():
        train(config)


def cli(argv: Optional[list[str]] = None) -> None:
    """``python -m recipe.gcpo.main_gcpo [key=value ...]`` (``argv``: the arguments, by default the command line's)."""
    try:
        start(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None


if __name__ == "__main__":
    cli()
