"""``python -m verl_preflight [--config-path DIR --config-name NAME] key=value ...``: check a verl 0.9.1 run's config
as ``python -m verl.trainer.main_ppo`` would compose it (verl's ``ppo_trainer`` by default), before a GPU is
allocated. A config it refuses is one line, ``error: <key>: <problem>``, exit status 2; one it accepts prints what
this machine would refuse a run for (the model folder, the GPUs, the data files) as warnings, and exit status 0.
Nothing is started or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from verl_preflight import check_config
from verl_preflight.front_door import Composition, Request, run
from verl_preflight.machine import missing_data_files


def main(argv: Optional[Sequence[str]] = None) -> None:
    import verl

    def check(composition: Composition, request: Request):
        return check_config(composition.config, dry_run=True)

    def accepted(composition: Composition, request: Request, checked) -> None:
        for line in checked.notes:
            print(f"verl_preflight: {line}")
        for line in checked.warnings:
            print(f"warning (a run here stops on it): {line}")
        for key, path, hint in missing_data_files(composition.config):
            print(f"warning (a run here stops on it): {key}: {path} does not exist here ({hint})")
        config = composition.config
        print(
            f"verl_preflight: {request.folder / request.name}.yaml with {len(request.overrides)} override(s) passes: "
            f"algorithm.adv_estimator={config.algorithm.adv_estimator}, trainer.v1.trainer_mode="
            f"{config.trainer.v1.trainer_mode}, {config.trainer.nnodes} node(s) x {config.trainer.n_gpus_per_node} "
            f"{config.trainer.device} device(s)"
        )

    folder = Path(verl.__file__).resolve().parent / "trainer" / "config"
    run(argv, folder, "ppo_trainer", "verl_preflight", check, accepted)


if __name__ == "__main__":
    main()
