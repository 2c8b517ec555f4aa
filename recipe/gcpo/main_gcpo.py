"""Hydra entry point of the GCPO recipe: ``python -m recipe.gcpo.main_gcpo [key=value ...]``.

verl 0.9.1's V1 PPO entry point (``verl.trainer.main_ppo``) with one difference: in verl's ``sync`` trainer mode
its task runner builds the recipe's ``GCPOTrainer`` (verl's ``PPOTrainerSync`` plus the credit actor) where verl
builds ``PPOTrainerSync``. The mode stays ``sync``, so every branch of verl's trainer that reads it (replay buffer,
gen batch size, DAPO refill, checkpoints, resume) is verl's sync one; in verl's other modes verl's own trainer
runs (the GCPO estimators are refused there).

Before Ray or any GPU is touched it composes ``config/gcpo_trainer.yaml`` (verl's ``ppo_trainer`` plus the GCPO
keys), validates it and checks that this machine can start the run (every check is in :mod:`recipe.gcpo.preflight`;
this module keeps the Hydra entry, the task runner and the one-line error wrapper). A bad override or value stops it with one line saying why, exit status 2
(``HYDRA_FULL_ERROR=1`` adds the traceback between two copies of that line). With ``GCPO_DRY_RUN=1`` it stops
after validation and prints the composed config (what the launchers' ``--dry-run`` does), in a temporary Hydra
run directory that is removed on exit; a training run keeps Hydra's run directory beside its checkpoints
(``hydra.run.dir`` in the config), made only once every check has passed: a refused run writes nothing.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
import tempfile
import traceback
from pathlib import Path
from pprint import pprint
from typing import Mapping, NoReturn, Optional

import hydra
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
from omegaconf import DictConfig, OmegaConf, open_dict
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
from verl.utils.device import auto_set_device

from recipe.gcpo.config import SYNC_TRAINER_MODE
from recipe.gcpo.preflight import (
    accelerator_problem,
    migrate_legacy_reward,
    missing_data_files,
    missing_data_hint,
    model_path_problem,
    validate,
)
from recipe.gcpo.run_summary import local_gpu, memory_lines, protocol_line, startup_lines

CONFIG_DIR = str(Path(__file__).resolve().parent / "config")
CONFIG_NAME = "gcpo_trainer"
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


def one_line(error: BaseException) -> str:
    """An exception's message on one line (Hydra's and OmegaConf's span several)."""
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    return text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}"


def fail(reason: str, error: BaseException | None = None) -> NoReturn:
    """Stop with the one-line reason; ``HYDRA_FULL_ERROR=1`` adds ``error``'s traceback, then the reason again
    (first and last, whatever scrolls by)."""
    line = f"error: {reason}"
    print(line, file=sys.stderr, flush=True)
    if error is not None and os.environ.get("HYDRA_FULL_ERROR") == "1":
        traceback.print_exception(error)
        print(line, file=sys.stderr, flush=True)
    raise SystemExit(CONFIG_ERROR_EXIT)


def config_paths(node, prefix: str = "") -> list[str]:
    """Every dotted key of a composed config (without resolving it)."""
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=False)
    paths = []
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}{key}"
            paths += [path, *config_paths(value, f"{path}.")]
    return paths


def describe_override_error(error: BaseException) -> str:
    """One line for an override Hydra could not apply; a key that does not exist gets the closest one that does."""
    from hydra import compose, initialize_config_dir
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = error.__cause__
    key = getattr(cause, "full_key", None)
    message = str(error).split("'")
    if str(error).startswith("Could not override '") and len(message) > 1:
        key = message[1]  # the key as written in the override (full_key may stop at the first missing level)
    if not (isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and key):
        return one_line(error) + (f" ({one_line(cause)})" if cause is not None else "")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        known = config_paths(compose(config_name=CONFIG_NAME, return_hydra_config=True))
    match = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
    if match:
        return f"{key} is not a key of the config: did you mean {match[0]}?"
    return f"{key} is not a key of the config (a new key is added with a leading +: +{key}=...)"


def check_overrides(overrides: list[str]) -> tuple[DictConfig, dict[str, Optional[str]]]:
    """Compose the config once with Hydra's compose API, so that an override Hydra cannot apply fails as one line
    (Hydra's own report spans several lines and names no alternative); returns the composed config (without
    Hydra's own node, as ``hydra.main`` hands it over) and its group choices (``hydra.runtime.choices``)."""
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            config = compose(config_name=CONFIG_NAME, overrides=overrides, return_hydra_config=True)
    except Exception as error:  # every composition failure comes from the overrides given
        fail(describe_override_error(error), error)
    choices = OmegaConf.to_container(config.hydra.runtime.choices)
    with open_dict(config):
        del config["hydra"]
    return config, choices


def adapt(config) -> list[str]:
    """What the entry point changes in a composed config before anything reads it: verl's device auto-detection, and
    verl's own migration of the legacy reward keys, which verl's V1 entry point does not run (so that they are
    honoured, not ignored); returns a line per migrated block."""
    auto_set_device(config)
    try:
        return migrate_legacy_reward(config)
    except ValueError as error:
        fail(one_line(error), error)


def accept_run(config, choices: Mapping[str, Optional[str]]) -> None:
    """Every check a run must pass before anything is started or written: the config's, this machine's, the data
    files'. Stops with one line (exit 2) at the first that fails; then says what will run (``choices``: the config's
    group choices, which name the protocol)."""
    migrated = adapt(config)
    try:
        settings = validate(config).gcpo
    except Exception as error:  # the checks only read the config: whatever they raise is the config's
        fail(one_line(error), error)
    lines = migrated + startup_lines(config, settings) + [protocol_line(choices)]
    if settings is not None:  # the credit actor's GPU memory beside vLLM's share, computed from the config
        lines += memory_lines(settings, config, *local_gpu())
    for line in lines:
        print(f"gcpo: {line}", flush=True)
    model_problem = model_path_problem(config)
    if dry_run_requested():
        if model_problem is not None:  # a dry run loads no model: it says what a run would stop on
            print(f"# warning (a run stops here): {model_problem}", file=sys.stderr, flush=True)
        return
    if model_problem is not None:
        fail(model_problem)
    problem = accelerator_problem(config)
    if problem is not None:
        fail(problem)
    missing = missing_data_files(config)
    if missing:
        fail(
            f"{missing[0]} does not exist (data.train_files / data.val_files): {missing_data_hint(missing[0])}"
            + (f" ({len(missing) - 1} more missing)" if len(missing) > 1 else "")
        )


def dry_run_requested() -> bool:
    return os.environ.get("GCPO_DRY_RUN", "0") == "1"


_accepted = False  # set by cli() once the composed config passed accept_run, before Hydra made its run directory


@hydra.main(config_path="config", config_name=CONFIG_NAME, version_base=None)
def main(config) -> None:
    if _accepted:
        adapt(config)  # Hydra composed it again: the same changes, said once already
    else:
        accept_run(config, HydraConfig.get().runtime.choices)
    if dry_run_requested():
        # which copy of the recipe runs: an installed one and a checkout on the path can differ
        print(f"# entry point: {Path(__file__).resolve()}")
        print(DRY_RUN_MARKER)
        print(OmegaConf.to_yaml(config, resolve=True))
        for path in missing_data_files(config):
            print(f"# warning: {path} does not exist here ({missing_data_hint(path)})")
        print(DRY_RUN_DONE.format(estimator=f"adv_estimator={config.algorithm.adv_estimator}"))
        return
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(GCPOTaskRunner))


def cli() -> None:
    """``python -m recipe.gcpo.main_gcpo``: Hydra's command line, with one-line errors for bad overrides and
    dry runs in a temporary Hydra run directory."""
    try:
        _cli()
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None


# Hydra's flags that choose the primary config (long and short forms)
CONFIG_FLAGS = {
    "--config-path": "path",
    "-cp": "path",
    "--config-name": "name",
    "-cn": "name",
    "--config-dir": "dir",
    "-cd": "dir",
}
RECIPE_KEYS = "+gcpo_keys=recipe"  # config/gcpo_keys/recipe.yaml: algorithm.gcpo and the baselines' blocks


def config_flags(argv: list[str]) -> dict[str, str]:
    """The primary-config flags on a command line: {"path": ..., "name": ..., "dir": ...} for those given."""
    flags = {}
    for index, arg in enumerate(argv):
        flag, _, value = arg.partition("=")
        if flag in CONFIG_FLAGS:
            if not value and index + 1 < len(argv):
                value = argv[index + 1]
            flags[CONFIG_FLAGS[flag]] = value
    return flags


def recipe_keys_for_own_config(argv: list[str]) -> list[str]:
    """The arguments that add the recipe's keys (``algorithm.gcpo`` and the baselines' blocks) to a config of the
    user's own (``--config-name my_ppo``, defaults ``ppo_trainer``) that lacks them, so that
    ``algorithm.gcpo.credit.method=mc`` is an override like any other there; empty when the config is the recipe's,
    already has the keys, cannot be composed here (Hydra then reports), or names a ``--config-dir`` of its own
    (the recipe's folder cannot be added beside it: the message says what to do)."""
    from hydra import compose, initialize_config_dir

    flags = config_flags(argv)
    if flags.get("name", CONFIG_NAME) == CONFIG_NAME and "path" not in flags:
        return []
    path = Path(flags.get("path") or CONFIG_DIR)
    if not path.is_absolute():  # Hydra reads --config-path relative to the file that declares hydra.main
        path = Path(__file__).resolve().parent / path
    try:
        with initialize_config_dir(config_dir=str(path), version_base=None):
            own = compose(config_name=flags.get("name", CONFIG_NAME))
    except Exception:
        return []
    if OmegaConf.select(own, "algorithm.gcpo") is not None:
        return []
    if "dir" in flags:
        print(
            f"gcpo: your config ({flags.get('name')}) has no algorithm.gcpo, and --config-dir is taken: add "
            f"`- gcpo_keys: recipe` to its defaults with {CONFIG_DIR} on its hydra.searchpath, or set GCPO keys "
            "with a leading + (+algorithm.gcpo.credit.method=mc)",
            file=sys.stderr,
            flush=True,
        )
        return []
    print(
        f"gcpo: your config ({flags.get('name')}) has no algorithm.gcpo: the recipe's keys are added "
        f"({RECIPE_KEYS}, from {CONFIG_DIR}/gcpo_keys/recipe.yaml)",
        flush=True,
    )
    return [f"--config-dir={CONFIG_DIR}", RECIPE_KEYS]


def _cli() -> None:
    overrides = sys.argv[1:]
    global _accepted
    if any(arg.partition("=")[0] in CONFIG_FLAGS for arg in overrides):
        added = recipe_keys_for_own_config(overrides)
        if added:  # the flag before every other argument, the override after the others (argparse wants them so)
            flag, override = added
            sys.argv[1:] = [flag, *overrides, override]
    if not any(arg.startswith("-") for arg in overrides):  # Hydra's own flags (--cfg, -m, ...): Hydra reports
        config, choices = check_overrides(overrides)
        if not dry_run_requested():
            # before Hydra makes its run directory beside the checkpoints: a refused run writes nothing
            accept_run(config, choices)
            _accepted = True
    if dry_run_requested() and not any(arg.startswith("hydra.run.dir=") for arg in overrides):
        with tempfile.TemporaryDirectory(prefix="gcpo-dry-run-") as run_dir:
            sys.argv.append(f"hydra.run.dir={run_dir}")
            main()
        return
    main()


if __name__ == "__main__":
    cli()
