"""Start-up checks of the recipe's blocks in a whole config: parsed once (:class:`RecipeSettings`), run by the
trainer they need, and each checked against verl's keys it depends on. GCPO's checks are here; each baseline's are
in its own module (``recipe/gcpo/baselines/<name>.py``), reached through the registry.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any, Callable, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from gcpo_core.credit.shapley.exact import EXACT_LIMIT
from recipe.gcpo.baselines import BASELINE_FACTS
from recipe.gcpo.config import (
    GCPO_FILTER_METRIC,
    ROLLOUT_GROUP_CHECKS,
    SYNC_TRAINER_MODE,
    Check,
    Facts,
    only_if,
    recipe_trainer_problem,
    run_checks,
)
from recipe.gcpo.preflight import verl_keys
from recipe.gcpo.settings import RecipeSettings


def _trainer_need(facts: Facts) -> dict[str, Any]:
    """The first setting only the GCPO trainer serves, split for the message (``key``, ``value``), and what is wrong
    with it here (``problem``); None where verl's trainers serve every setting or the GCPO trainer runs."""
    need = facts["settings"].trainer_need()
    if need is None or facts["in_recipe_trainer"]:
        return None
    found = f"trainer.use_v1={facts['use_v1']}, trainer.v1.trainer_mode={facts['trainer_mode']}"
    key, _, value = need.setting.partition("=")
    return {"key": key, "value": value, "problem": recipe_trainer_problem(need, found)}


# what the recipe's checks read, the baselines' included (each of verl's keys read here, once), then what only a
# baseline's own code computes (its ``facts``, as registered)
FACTS: Mapping[str, Callable[[Facts], Any]] = ChainMap(
    {
        "settings": lambda f: RecipeSettings.parse(f.config),  # what the trainer will parse, by the same code
        "gcpo": lambda f: f["settings"].gcpo,
        "trainer_mode": lambda f: OmegaConf.select(f.config, "trainer.v1.trainer_mode"),
        "in_recipe_trainer": lambda f: f["use_v1"] and f["trainer_mode"] == SYNC_TRAINER_MODE,
        "need": _trainer_need,
        "rollout_n": lambda f: f.config.actor_rollout_ref.rollout.n,
        "multi_turn": lambda f: OmegaConf.select(f.config, "actor_rollout_ref.rollout.multi_turn.enable"),
        "distillation": lambda f: OmegaConf.select(f.config, "distillation.enabled"),
        "actor": lambda f: f.config.actor_rollout_ref.actor,
        "loss_mode": lambda f: OmegaConf.select(f["actor"], "policy_loss.loss_mode", default="vanilla"),
        # verl's actor computes the token entropies only when asked, or for its entropy bonus
        "actor_entropy": lambda f: f["actor"].get("calculate_entropy", False) or f["actor"].get("entropy_coeff", 0),
        "rollout_correction": lambda f: f.config.algorithm.get("rollout_correction") or {},
        "filter_groups": lambda f: f.config.algorithm.get("filter_groups") or {},
        "filter_metric": lambda f: f["filter_groups"].get("metric"),
    },
    BASELINE_FACTS,
)

CHECKS: tuple[Check, ...] = (
    # a setting only the GCPO trainer serves runs in the mode the recipe's entry point builds it for
    Check("{need[key]}", lambda f: f["need"] is None, "{need[value]} {need[problem]}"),
    # where the estimator embeds the responses (gcpo, dqo, dra_grpo)
    *only_if(
        lambda f: f["gcpo"] is not None,
        (
            *ROLLOUT_GROUP_CHECKS,
            Check(
                "algorithm.gcpo.credit.method",
                lambda f: f["gcpo"].credit.method != "exact" or f["rollout_n"] <= EXACT_LIMIT,
                f"exact enumerates 2^n coalitions: with rollout.n={{rollout_n}} > {EXACT_LIMIT} use auto or mc",
            ),
            Check(
                "actor_rollout_ref.rollout.n",
                lambda f: f["rollout_n"] <= f["gcpo"].credit.max_group_size,
                "{rollout_n} exceeds algorithm.gcpo.credit.max_group_size={gcpo.credit.max_group_size}",
            ),
            # DAPO's group filtering on a metric that drops all-correct groups would silently discard GCPO's signal
            Check(
                "algorithm.filter_groups.metric",
                lambda f: (
                    not f["filter_groups"].get("enable", False)
                    or f["filter_metric"] == GCPO_FILTER_METRIC
                    or f["gcpo"].filter_all_correct
                ),
                "{filter_metric!r} with algorithm.filter_groups.enable=true drops every group whose rollouts are all "
                "correct, which is where GCPO gives a signal GRPO does not. Use "
                f"{GCPO_FILTER_METRIC} with the GCPO reward function (recipe/gcpo/reward.py: it drops only groups "
                "without a GCPO signal), or set algorithm.gcpo.filter_all_correct=true to accept DAPO's filtering.",
            ),
        ),
    ),
)


def check_recipe(config: DictConfig, facts: Optional[Facts] = None) -> RecipeSettings:
    """The recipe's own start-up checks of a full trainer config (``facts``: its facts, read here when not given);
    returns its parsed settings.

    Raises:
        ConfigError: a bad recipe value, a setting that needs the GCPO trainer outside it, or one of the checks above.
    """
    facts = facts if facts is not None else Facts(config, {**verl_keys.FACTS, **FACTS})
    run_checks(CHECKS, facts)
    for baseline, _ in facts["settings"].selected:  # in registration order
        run_checks(baseline.checks, facts)
    return facts["settings"]
