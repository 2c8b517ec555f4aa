"""The recipe's own start-up rules, and the recipe as an extension of :mod:`verl_preflight`'s checks of a verl config
(:data:`RECIPE`: its blocks, estimators, reward, data files and config groups). :func:`recipe_rules` runs where
``verl_preflight.check_config`` runs an extension's rules, after verl's keys and before the reward and the machine:
the trainer a setting needs, GCPO's group and encoder, its group filter and reward, then each selected baseline's own
checks (in its module, ``recipe/gcpo/baselines/``).
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import try_to_load_from_cache
from omegaconf import DictConfig, OmegaConf

import recipe.gcpo.baselines  # noqa: F401  (registers every baseline)
from gcpo_core.credit.shapley.exact import EXACT_LIMIT
from gcpo_core.encoding.encoder import resolve_model_path
from gcpo_core.training_data.prepare import prepared_file_names
from recipe.gcpo.settings import (
    GCPO_FILTER_METRIC,
    RecipeSettings,
    check_rollout_groups,
    recipe_blocks,
    recipe_estimators,
)
from verl_preflight import ConfigError, Extension, check_config
from verl_preflight.reward import function_source, reward_function

CONFIG_DIR = Path(__file__).resolve().parent / "config"
# the recipe's own reward (config/gcpo_trainer.yaml): what runs when a config names no other
RECIPE_REWARD = ("pkg://recipe.gcpo.reward", "compute_score")
RECIPE_REWARD_WHAT = "the recipe's math-verify reward: +1 / -1, acc, pred, timeout, gcpo_signal"
ENCODER = "algorithm.gcpo.encoder.model"
FIX = (
    "return it from the reward function (0 for a wrong response, 1 + a tiny fingerprint of the text for a correct "
    "one: recipe/gcpo/reward.py does), use the recipe's reward (reward.custom_reward_function.path="
    "pkg://recipe.gcpo.reward), or filter on acc (algorithm.filter_groups.metric=acc)"
)


def recipe_rules(config: DictConfig) -> RecipeSettings:
    """The recipe's checks of a whole config; returns its settings, parsed once.

    Raises:
        ConfigError: a bad recipe value, a setting that needs the GCPO trainer outside it, or one of the rules below.
    """
    use_v1 = config.trainer.get("use_v1", True)
    if not use_v1:
        raise ConfigError(
            "trainer.use_v1",
            "false selects verl's legacy trainer, which this entry point does not run: use verl's own "
            "`python -m verl.trainer.main_ppo` for it",
        )
    settings = RecipeSettings.parse(config)  # what the trainer will parse, by the same code
    if settings.gcpo is not None:  # an estimator that embeds the responses (gcpo, dqo, dra_grpo)
        check_gcpo(config, settings)
    check_gcpo_signal(config)
    for baseline, block in settings.selected:  # in registration order
        if baseline.check is not None:
            baseline.check(config, block, settings)
    return settings


def check_gcpo(config: DictConfig, settings: RecipeSettings) -> None:
    gcpo, n = settings.gcpo, config.actor_rollout_ref.rollout.n
    check_rollout_groups(config, settings.estimator)
    if gcpo.credit.method == "exact" and n > EXACT_LIMIT:
        raise ConfigError(
            "algorithm.gcpo.credit.method",
            f"exact enumerates 2^n coalitions: with rollout.n={n} > {EXACT_LIMIT} use auto or mc",
        )
    if n > gcpo.credit.max_group_size:
        raise ConfigError(
            "actor_rollout_ref.rollout.n",
            f"{n} exceeds algorithm.gcpo.credit.max_group_size={gcpo.credit.max_group_size}",
        )
    check_encoder(gcpo.encoder.model)
    # verl's colocated worker groups each take a third of a bundle's GPU (RayResourcePool's max_colocate_count 3):
    # the fused actor/rollout/ref worker, and a reward model colocated with it
    groups = 1 + bool(OmegaConf.select(config, "reward.reward_model.enable"))
    if gcpo.actor.num_gpus > 1 - groups / 3:
        raise ConfigError(
            "algorithm.gcpo.actor.num_gpus",
            f"{gcpo.actor.num_gpus} of a GPU does not fit beside verl's workers, which take {groups}/3 of each GPU: "
            f"at most {1 - groups / 3:.2f} (the default is 0.1; 0 runs the encoder on the CPU)",
        )
    # DAPO's group filtering on a metric that drops all-correct groups would silently discard GCPO's signal
    groups = config.algorithm.get("filter_groups") or {}
    metric = groups.get("metric")
    if not groups.get("enable", False):
        return
    if metric != GCPO_FILTER_METRIC and not gcpo.filter_all_correct:
        raise ConfigError(
            "algorithm.filter_groups.metric",
            f"{metric!r} with algorithm.filter_groups.enable=true drops every group whose rollouts are all correct, "
            f"which is where GCPO gives a signal GRPO does not. Use {GCPO_FILTER_METRIC} with the GCPO reward function "
            "(recipe/gcpo/reward.py: it drops only groups without a GCPO signal), or set "
            "algorithm.gcpo.filter_all_correct=true to accept DAPO's filtering.",
        )


def check_gcpo_signal(config: DictConfig) -> None:
    """DAPO's group filter on gcpo_signal reads it from the reward: a reward function that never reports it would
    stop the run at its first step."""
    groups = config.algorithm.get("filter_groups") or {}
    if not groups.get("enable", False) or groups.get("metric") != GCPO_FILTER_METRIC:
        return
    path, name = reward_function(config)
    if not path:
        raise ConfigError(
            "algorithm.filter_groups.metric",
            f"{GCPO_FILTER_METRIC} is read from the reward, but verl's built-in reward does not report it: {FIX}",
        )
    source = function_source(path)
    if source is not None and GCPO_FILTER_METRIC not in source:
        raise ConfigError(
            "algorithm.filter_groups.metric",
            f"{GCPO_FILTER_METRIC} is read from the reward, but the reward function {path}:{name} never reports "
            f"{GCPO_FILTER_METRIC!r}: {FIX}",
        )


def check_encoder(name: str) -> None:
    """The encoder the credit actors load: the bundled copy of the default, a folder with a model, or a hub id that
    can be downloaded (the hub on) or is in the cache."""
    if resolve_model_path(name) != name:
        return  # bundled
    folder = os.path.expanduser(name)
    if name.startswith(("/", "./", "../", "~")) or os.path.exists(folder):
        if not os.path.isdir(folder):
            raise ConfigError(ENCODER, f"{name} is not a folder")
        if not any(os.path.isfile(os.path.join(folder, f)) for f in ("modules.json", "config.json")):
            raise ConfigError(ENCODER, f"{name} holds no model (no modules.json or config.json)")
        return
    repo = name if "/" in name else f"sentence-transformers/{name}"
    hub_off = any(
        os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )
    if hub_off and not isinstance(try_to_load_from_cache(repo, "config.json"), str):
        raise ConfigError(
            ENCODER,
            f"{name} is not in the Hugging Face cache and the hub is off (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE): "
            f"download it once (huggingface-cli download {repo}) or set it to a local folder every node can read",
        )


PREPARED = "scripts/prepare_data.py writes it (--out-dir: the launchers' DATA_DIR)"
RECIPE = Extension(
    name="the recipe",
    blocks=recipe_blocks,
    estimators=recipe_estimators,
    rules=recipe_rules,
    reward=RECIPE_REWARD,
    prepared=(tuple(prepared_file_names()), PREPARED),
    config_folder=CONFIG_DIR,
    keys_group=("gcpo_keys", "recipe"),
)


def validate(config: DictConfig) -> RecipeSettings:
    """Every check of the config (``verl_preflight.check_config`` with the recipe's rules), not of this machine;
    returns the recipe's settings.

    Raises:
        ConfigError: the first check that fails, in one line naming the key.
    """
    return check_config(config, RECIPE, machine_checks=False).settings
