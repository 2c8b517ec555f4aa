"""Entry point of the GCPO recipe: ``python -m recipe.gcpo.main_gcpo [--config-path DIR --config-name NAME]
[key=value ...]``, verl 0.9.1's ``python -m verl.trainer.main_ppo`` with the recipe's config and task runner.

The command line is composed with Hydra's compose API and checked before Ray or any GPU is touched
(:mod:`verl_preflight`, with the recipe's rules: :data:`recipe.gcpo.checks.RECIPE`); a refusal is one line,
``error: <message>``, exit status 2, and nothing is written (``HYDRA_FULL_ERROR=1`` adds the traceback). An accepted
run says what will run (:mod:`recipe.gcpo.run_summary`), leaves Hydra's record (``.hydra/``) in ``hydra.run.dir``
and runs verl's ``run_ppo`` with :class:`GCPOTaskRunner`, which builds the recipe's trainer for verl's trainer mode
(``trainer.v1.trainer_mode``: verl's registered class with GCPO's steps). ``GCPO_DRY_RUN=1`` stops after
the checks, printing the composed config (the launchers' ``--dry-run``); ``--cfg job`` prints the composition alone.
"""

from __future__ import annotations

# first, before verl: importing verl_preflight keeps verl's "no accelerator" warning off a start without GPUs
from verl_preflight import Checked, check_config  # isort: split

import os
import sys
from pathlib import Path
from pprint import pprint
from typing import Optional, Sequence

import ray
from omegaconf import DictConfig, OmegaConf
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

from recipe.gcpo.checks import CONFIG_DIR, RECIPE
from recipe.gcpo.run_summary import print_dry_run, print_startup
from verl_preflight.front_door import Composition, Request, run, write_record

PROGRAM = "recipe.gcpo.main_gcpo"


def dry_run_requested() -> bool:
    return os.environ.get("GCPO_DRY_RUN", "0") == "1"


def check(composition: Composition, request: Request) -> Checked:
    """Every check of the composed config and of this machine (a dry run: the machine's as warnings), then what will
    run, in a line each (``gcpo: ...``); a dry run's print of the config follows."""
    config = composition.config
    checked = check_config(config, RECIPE, dry_run=dry_run_requested())
    settings = checked.settings
    choices = OmegaConf.to_container(composition.hydra.runtime.choices)
    print_startup(config, settings.gcpo, choices, [*composition.notes, *checked.notes])
    if dry_run_requested():
        for warning in checked.warnings:
            print(f"# warning (a run stops here): {warning}", file=sys.stderr, flush=True)
        print_dry_run(config, entry_point=Path(__file__))
    return checked


def accepted(composition: Composition, request: Request, checked: Checked) -> None:
    """Train on the accepted config, its record in Hydra's run directory first (a dry run writes nothing)."""
    if dry_run_requested():
        return
    write_record(composition.config, request, Path(composition.run_dir))
    train(composition.config)


def train(config: DictConfig) -> None:
    """verl's V1 run (Ray, the workers, training) with the recipe's task runner, on an accepted config."""
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(GCPOTaskRunner))


def cli(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m recipe.gcpo.main_gcpo [key=value ...]`` (``argv``: the arguments, by default the command line's)."""
    run(argv, CONFIG_DIR, "gcpo_trainer", PROGRAM, check, accepted, RECIPE)


# ---- the task runner (in its own Ray process, the only one of the driver's side that builds the trainer) ---------


def trainer_class(mode: str):
    """The trainer the recipe runs in verl's trainer mode ``mode``: verl's registered class with GCPO's steps."""
    # imported where the trainer is built (the task runner), not in the driver: the dry run never builds one, and the
    # trainer pulls in TransferQueue and verl's trainer stack
    from recipe.gcpo.gcpo_trainer import GCPO_TRAINERS

    return GCPO_TRAINERS[mode]


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
                release_credit(getattr(self, "trainer", None))
                tracking = getattr(self.trainer, "logger", None)
                if tracking is not None:
                    tracking.finish(exit_code=0 if succeeded else 1)
                end_wandb_service(exit_code=0 if succeeded else 1)
            finally:
                tq.close()


def release_credit(trainer) -> None:
    """Stop the credit actors and their decoding thread once training is over: verl's ``fit`` returns on its last
    step without calling ``on_train_end``, where the trainer releases them itself."""
    release = getattr(trainer, "release_credit", None)
    if release is not None:
        release()


def end_wandb_service(exit_code: int) -> None:
    """Stop W&B's service process while the task runner is still alive, where the run used W&B.

    ``wandb.finish`` (verl's ``Tracking.finish``) ends the run but leaves W&B's service (``wandb-core``) to an
    ``atexit`` hook; when Ray ends the task runner's process the service has already gone with the actor's other
    children, and the hook prints a 30-line ``ConnectionResetError: Connection lost`` traceback after a run that
    succeeded (stock verl's ``main_ppo`` does the same: docs/metrics.md#in-wb). ``wandb.teardown`` is W&B's own
    call for this, "not reliable in an atexit hook in setups such as multiprocessing"; it unregisters the hook.
    """
    wandb = sys.modules.get("wandb")  # imported by verl's tracker only when trainer.logger has wandb
    if wandb is not None:
        wandb.teardown(exit_code=exit_code)


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
    # run from the module's importable copy: Ray ships GCPOTaskRunner by reference to it
    from recipe.gcpo.main_gcpo import cli as _cli

    _cli()
