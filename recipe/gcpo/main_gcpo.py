"""Hydra entry point of the GCPO recipe: ``python -m recipe.gcpo.main_gcpo [key=value ...]``.

Composes ``config/gcpo_trainer.yaml`` (verl's ``ppo_trainer`` plus the GCPO keys), validates it before Ray or
any GPU is touched, then runs verl's V1 training loop with the GCPO trainer. With ``GCPO_DRY_RUN=1`` it stops
after validation and prints the composed config (what the launchers' ``--dry-run`` does).
"""

from __future__ import annotations

import os

import hydra
import ray
from omegaconf import OmegaConf
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.utils.device import auto_set_device

from recipe.gcpo.div_r1 import validate_div_r1_config
from recipe.gcpo.diver import validate_diver_config
from recipe.gcpo.settings import validate_gcpo_config, validate_group_contrastive


DRY_RUN_MARKER = "# composed config (GCPO dry run)"


class GCPOTaskRunner(TaskRunnerV1.__ray_actor_class__):
    """verl's V1 task runner, with the GCPO estimator and trainer registered in its process."""

    def run(self, config):
        import recipe.gcpo.register  # noqa: F401

        return super().run(config)


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
    validate_diver_config(config)
    validate_div_r1_config(config)
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
