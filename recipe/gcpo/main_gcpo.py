"""Hydra entry point of the GCPO recipe: ``python -m recipe.gcpo.main_gcpo [key=value ...]``.

Composes ``config/gcpo_trainer.yaml`` (verl's ``ppo_trainer`` plus the GCPO keys), validates it before Ray or
any GPU is touched, then runs verl's V1 training loop in its sync mode with the GCPO trainer (verl's
PPOTrainerSync plus the credit actor). With ``GCPO_DRY_RUN=1`` it stops
after validation and prints the composed config (what the launchers' ``--dry-run`` does).
"""

from __future__ import annotations

import os
from pprint import pprint

import hydra
import ray
from omegaconf import DictConfig, OmegaConf
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.utils.device import auto_set_device

from recipe.gcpo.settings import SYNC_TRAINER_MODE, validate_gcpo_config, validate_group_contrastive


DRY_RUN_MARKER = "# composed config (GCPO dry run)"


def trainer_class(mode: str):
    """The trainer the recipe runs in verl's trainer mode ``mode``: GCPOTrainer for ``sync``, verl's own else."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    if mode == SYNC_TRAINER_MODE:
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
                tracking = getattr(self.trainer, "logger", None)
                if tracking is not None:
                    tracking.finish(exit_code=0 if succeeded else 1)
            finally:
                tq.close()


def missing_data_files(config) -> list[str]:
    """Training / validation files that do not exist on this machine (remote URIs are not checked)."""
    files = []
    for key in ("train_files", "val_files"):
        value = OmegaConf.select(config, f"data.{key}")
        files += [value] if isinstance(value, str) else list(value or [])
    return [f for f in files if "://" not in str(f) and not os.path.exists(os.path.expanduser(str(f)))]


def validate(config) -> None:
    """Every start-up check: GCPO's own, then verl's."""
    validate_gcpo_config(config)
    validate_group_contrastive(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


@hydra.main(config_path="config", config_name="gcpo_trainer", version_base=None)
def main(config) -> None:
    auto_set_device(config)
    validate(config)
    if os.environ.get("GCPO_DRY_RUN", "0") == "1":
        print(DRY_RUN_MARKER)
        print(OmegaConf.to_yaml(config, resolve=True))
        for path in missing_data_files(config):
            print(f"# warning: {path} does not exist here (scripts/prepare_data.py writes it)")
        print("# GCPO dry run: the config composes and validates; nothing was started.")
        return
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(GCPOTaskRunner))


if __name__ == "__main__":
    main()
