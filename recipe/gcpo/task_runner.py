"""The recipe's Ray task runner: verl 0.9.1's V1 ``TaskRunnerV1`` building the GCPO trainer in verl's ``sync`` mode.

The entry point (:mod:`recipe.gcpo.main_gcpo`) hands it to verl's ``run_ppo``; it runs in its own Ray process, the
only one of the driver's side that imports the trainer (the driver and the dry run never build one).
"""

from __future__ import annotations

from pprint import pprint

from omegaconf import DictConfig, OmegaConf
from verl.trainer.main_ppo import TaskRunnerV1

from recipe.gcpo.config import SYNC_TRAINER_MODE


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
