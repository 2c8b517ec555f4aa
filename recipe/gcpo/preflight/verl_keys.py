"""Start-up checks of verl's own keys that verl reads late or not at all: the trainer the entry point runs, the
estimator's name (verl looks it up at the first advantage step), the numbers verl multiplies and divides with
untyped, and the cluster's shape.
"""

from __future__ import annotations

import difflib

from omegaconf import DictConfig, OmegaConf

from recipe.gcpo.config import RECIPE_ESTIMATORS, ConfigError


def check_v1_trainer(config: DictConfig) -> None:
    """The config selects verl's V1 trainer, the one this entry point runs.

    Raises:
        ConfigError: ``trainer.use_v1=false``.
    """
    if not config.trainer.get("use_v1", True):
        raise ConfigError(
            "trainer.use_v1",
            "trainer.use_v1=false selects verl's legacy trainer, which this entry point does not run: "
            "use verl's own `python -m verl.trainer.main_ppo` for it",
        )


def check_estimator(config: DictConfig) -> None:
    """``algorithm.adv_estimator`` names an estimator verl registers (its own, and any a module in
    ``VERL_USE_EXTERNAL_MODULES`` registered as verl was imported) or the recipe does: verl looks it up only at the
    first advantage step, after the models are loaded.

    Raises:
        ConfigError: any other name, with the closest known one.
    """
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    name = str(config.algorithm.adv_estimator)
    known = sorted({*ADV_ESTIMATOR_REGISTRY, *RECIPE_ESTIMATORS})
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f": did you mean {close[0]}?" if close else ""
        raise ConfigError(
            "algorithm.adv_estimator",
            f"algorithm.adv_estimator={name} is not an estimator verl or the recipe registers{hint} (known: "
            f"{', '.join(known)})",
        )


# Numeric keys the launchers set and verl multiplies, divides or counts with, untyped (or loosely typed) in verl's
# config: key -> (the smallest value allowed, whether it must be an integer, whether null is allowed). A value
# like "abc", 0 or 3.5 would otherwise pass the dry run and fail minutes into start-up, or worse, not at all.
NUMERIC_KEYS: dict[str, tuple[float, bool, bool]] = {
    "data.train_batch_size": (1, True, False),
    "data.max_prompt_length": (1, True, False),
    "data.max_response_length": (1, True, False),
    "data.dataloader_num_workers": (0, True, False),
    "actor_rollout_ref.rollout.n": (1, True, False),
    "actor_rollout_ref.rollout.val_kwargs.n": (1, True, False),
    "actor_rollout_ref.actor.ppo_mini_batch_size": (1, True, False),
    "actor_rollout_ref.actor.ppo_epochs": (1, True, False),
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": (1, True, False),
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": (1, True, False),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": (1, True, False),
    "actor_rollout_ref.actor.optim.lr": (0, False, False),
    "trainer.total_epochs": (1, True, False),
    "trainer.total_training_steps": (1, True, True),
}


def check_numeric_keys(config: DictConfig) -> None:
    """Each of :data:`NUMERIC_KEYS` is a number of the right kind and range (booleans are not numbers)."""
    for key, (low, integer, nullable) in NUMERIC_KEYS.items():
        value = OmegaConf.select(config, key, default=None, throw_on_missing=False)
        if value is None and (nullable or OmegaConf.select(config, key, default="absent") == "absent"):
            continue
        kind = "an integer" if integer else "a number"
        is_number = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
        if not is_number or value < low or (isinstance(value, float) and value != value):
            bound = f">= {low}" if low > 0 or integer else "> 0"
            raise ConfigError(key, f"{key} must be {kind} {bound}{' or null' if nullable else ''}, got {value!r}")
        if not integer and low == 0 and value <= 0:
            raise ConfigError(key, f"{key} must be {kind} > 0, got {value!r}")


def check_cluster_shape(config: DictConfig) -> None:
    """``trainer.nnodes`` and ``trainer.n_gpus_per_node`` are integers >= 1: untyped in verl's config, verl
    multiplies them as they come."""
    for key in ("nnodes", "n_gpus_per_node"):
        value = config.trainer[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"trainer.{key}", f"trainer.{key} must be an integer >= 1, got {value!r}")
