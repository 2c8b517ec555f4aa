"""Start-up checks of verl's own keys that verl reads late or not at all: the trainer the entry point runs, the
estimator's name (verl looks it up at the first advantage step), the numbers verl multiplies and divides with
untyped, and the cluster's shape.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Callable, Iterable, NamedTuple, Optional, Union

from omegaconf import DictConfig, OmegaConf

from recipe.gcpo.config import Check, ConfigError, Facts
from recipe.gcpo.settings import recipe_estimators


def uses_v1(config: DictConfig) -> bool:
    """Whether the config selects verl's V1 trainer (``trainer.use_v1``, verl's default true)."""
    return bool(config.trainer.get("use_v1", True))


def _known_estimators(facts: Facts) -> list[str]:
    """Every estimator verl registers (its own, and any a module in ``VERL_USE_EXTERNAL_MODULES`` registered as verl
    was imported) or the recipe does: verl looks the name up only at the first advantage step."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    return sorted({*ADV_ESTIMATOR_REGISTRY, *recipe_estimators()})


def did_you_mean(word: Any, known: Iterable[str], prefix: str = ": did you mean ") -> str:
    """``prefix`` + the closest of ``known`` to ``word`` (a typo's hint), or "" when none is close."""
    close = difflib.get_close_matches(str(word), list(known), n=1)
    return f"{prefix}{close[0]}?" if close else ""


class Range(NamedTuple):
    """A number from ``low`` (exclusive where ``low_open``) to ``high`` (None: no bound); ``integer``: an int;
    ``nullable``: null allowed."""

    low: float
    high: Optional[float] = None
    integer: bool = False
    nullable: bool = False
    low_open: bool = False

    def problem(self, value: Any) -> Optional[str]:
        if value is None and self.nullable:
            return None
        is_number = isinstance(value, int if self.integer else (int, float)) and not isinstance(value, bool)
        if (
            is_number
            and math.isfinite(value)
            and (value > self.low if self.low_open else value >= self.low)
            and (self.high is None or value <= self.high)
        ):
            return None
        kind = "an integer" if self.integer else "a number"
        if self.high is not None:
            bound = f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        else:
            bound = f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"must be {kind} {bound}{' or null' if self.nullable else ''}, got {value!r}"


class OneOf(NamedTuple):
    """A name from ``names`` (a tuple, or a function that returns verl's registry of them when called)."""

    names: Union[tuple, Callable[[], Iterable[str]]]

    def problem(self, value: Any) -> Optional[str]:
        known = sorted(self.names() if callable(self.names) else self.names)
        if value in known:
            return None
        return f"must be one of {', '.join(known)}, got {value!r}{did_you_mean(value, known)}"


def _rollout_names() -> list[str]:
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY

    return [name for name, _mode in _ROLLOUT_REGISTRY]


def _reward_managers() -> list[str]:
    import verl.experimental.reward_loop.reward_manager  # noqa: F401  (registers verl's managers)
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

    return list(REWARD_MANAGER)


def _policy_losses() -> list[str]:
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    return list(POLICY_LOSS_REGISTRY)


ACTOR, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
# verl's values that verl leaves unchecked (or checks only where it uses them, minutes into a run), one rule each. A
# value like "abc", 0, 1.5 or nan would otherwise pass the dry run and fail late, or worse, train wrong. The rule
# applies where the key is set (a null where no null is allowed is refused).
VALUE_RULES: dict[str, Union[Range, OneOf]] = {
    "data.train_batch_size": Range(1, integer=True),
    "data.max_prompt_length": Range(1, integer=True),
    "data.max_response_length": Range(1, integer=True),
    "data.dataloader_num_workers": Range(0, integer=True),
    f"{ROLLOUT}.n": Range(1, integer=True),
    f"{ROLLOUT}.val_kwargs.n": Range(1, integer=True),
    f"{ACTOR}.ppo_mini_batch_size": Range(1, integer=True),
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": Range(1, integer=True, nullable=True),
    f"{ACTOR}.ppo_epochs": Range(1, integer=True),
    f"{ACTOR}.ppo_max_token_len_per_gpu": Range(1, integer=True),
    f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size": Range(1, integer=True),
    f"{ROLLOUT}.log_prob_max_token_len_per_gpu": Range(1, integer=True),
    f"{ROLLOUT}.tensor_model_parallel_size": Range(1, integer=True),
    f"{ACTOR}.optim.lr": Range(0, low_open=True),
    f"{ACTOR}.optim.weight_decay": Range(0),
    f"{ACTOR}.optim.lr_warmup_steps_ratio": Range(0, 1),
    f"{ACTOR}.clip_ratio": Range(0),
    f"{ACTOR}.clip_ratio_low": Range(0),
    f"{ACTOR}.clip_ratio_high": Range(0),
    # dual-clip PPO's lower bound: verl asserts > 1 in the loss, at the first update
    f"{ACTOR}.clip_ratio_c": Range(1, low_open=True),
    f"{ACTOR}.grad_clip": Range(0, low_open=True),
    f"{ACTOR}.policy_loss.loss_mode": OneOf(_policy_losses),
    f"{ROLLOUT}.name": OneOf(_rollout_names),
    f"{ROLLOUT}.temperature": Range(0),
    f"{ROLLOUT}.top_p": Range(0, 1, low_open=True),
    f"{ROLLOUT}.top_k": Range(-1, integer=True),
    f"{ROLLOUT}.val_kwargs.temperature": Range(0),
    f"{ROLLOUT}.val_kwargs.top_p": Range(0, 1, low_open=True),
    f"{ROLLOUT}.val_kwargs.top_k": Range(-1, integer=True),
    f"{ROLLOUT}.gpu_memory_utilization": Range(0, 1, low_open=True),
    "algorithm.gamma": Range(0, 1),
    "algorithm.lam": Range(0, 1),
    "algorithm.kl_ctrl.kl_coef": Range(0),
    "reward.reward_manager.source": OneOf(("register", "importlib")),
    "trainer.total_epochs": Range(1, integer=True),
    "trainer.total_training_steps": Range(1, integer=True, nullable=True),
    "trainer.nnodes": Range(1, integer=True),
    "trainer.n_gpus_per_node": Range(1, integer=True),
    "trainer.test_freq": Range(-1, integer=True),
    "trainer.save_freq": Range(-1, integer=True),
    "trainer.resume_mode": OneOf(("auto", "disable", "resume_path")),
}


def check_values(config: DictConfig) -> None:
    """Each key of :data:`VALUE_RULES` that the config has meets its rule; so does the reward manager's name when
    verl looks it up in its registry (``reward.reward_manager.source=register``).

    Raises:
        ConfigError: the first value that does not, naming its key and what it accepts.
    """
    rules = dict(VALUE_RULES)
    if OmegaConf.select(config, "reward.reward_manager.source") == "register":
        rules["reward.reward_manager.name"] = OneOf(_reward_managers)
    if OmegaConf.select(config, "reward.reward_model.enable"):
        rules["reward.reward_model.rollout.name"] = OneOf(_rollout_names)
    for key, rule in rules.items():
        parent, _, last = key.rpartition(".")
        block = OmegaConf.select(config, parent)
        if not isinstance(block, DictConfig) or last not in block.keys():  # `in` is false for a ??? value
            continue
        if OmegaConf.is_missing(block, last):  # verl's ??? (rollout.name): verl stops on it as a worker starts
            raise ConfigError(key, f"not set (verl's config leaves it ???): it {rule.problem('???')}")
        problem = rule.problem(OmegaConf.select(config, key))
        if problem is not None:
            raise ConfigError(key, problem)


def _geometry(facts: Facts) -> dict[str, Any]:
    """The numbers verl splits a step's batch with (checked by :data:`VALUE_RULES` first)."""
    config = facts.config
    arr = config.actor_rollout_ref
    actor, rollout, ref = arr.actor, arr.rollout, arr.ref
    world = config.trainer.nnodes * config.trainer.n_gpus_per_node
    sp = actor.fsdp_config.get("ulysses_sequence_parallel_size") or 1
    n, mini = rollout.n, actor.ppo_mini_batch_size
    return {
        "world": world,
        "sp": sp,
        "dp": world // sp,
        "tp": rollout.tensor_model_parallel_size,
        "train": config.data.train_batch_size,
        "mini": mini,
        "n": n,
        "samples": mini * n,
        "micro": None if actor.use_dynamic_bsz else actor.get("ppo_micro_batch_size_per_gpu"),
        "seq": config.data.max_prompt_length + config.data.max_response_length,
        "actor_tokens": actor.ppo_max_token_len_per_gpu if actor.use_dynamic_bsz else None,
        "rollout_tokens": rollout.log_prob_max_token_len_per_gpu if rollout.log_prob_use_dynamic_bsz else None,
        "ref_tokens": ref.get("log_prob_max_token_len_per_gpu") if ref.get("log_prob_use_dynamic_bsz") else None,
    }


FACTS: dict[str, Callable[[Facts], Any]] = {
    "use_v1": lambda f: uses_v1(f.config),
    "estimator": lambda f: str(f.config.algorithm.adv_estimator),
    "known_estimators": _known_estimators,
    "estimator_hint": lambda f: did_you_mean(f["estimator"], f["known_estimators"]),
    "known_estimator_list": lambda f: ", ".join(f["known_estimators"]),
    "g": _geometry,
}

G = "trainer.nnodes x trainer.n_gpus_per_node"
SHORT = (
    "is shorter than one sequence (data.max_prompt_length + data.max_response_length = {g[seq]}): dynamic "
    "batching cannot fit it"
)
# verl's trainer and estimator (verl reads adv_estimator only at the first advantage step), then how verl splits a
# step (verl/trainer/ppo/v1/trainer_base.py, its workers): verl's validate_config passes all of these, and the run
# would stop minutes in
CHECKS: tuple[Check, ...] = (
    Check(
        "trainer.use_v1",
        lambda f: f["use_v1"],
        "false selects verl's legacy trainer, which this entry point does not run: use verl's own "
        "`python -m verl.trainer.main_ppo` for it",
    ),
    Check(
        "algorithm.adv_estimator",
        lambda f: f["estimator"] in f["known_estimators"],
        "{estimator} is not an estimator verl or the recipe registers{estimator_hint} (known: {known_estimator_list})",
    ),
    Check(
        f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size",
        lambda f: f["g"]["world"] % f["g"]["sp"] == 0,
        "{g[sp]} must divide the {g[world]} GPUs (" + G + ")",
    ),
    Check(
        f"{ROLLOUT}.tensor_model_parallel_size",
        lambda f: f["g"]["world"] % f["g"]["tp"] == 0,
        "{g[tp]} must divide the {g[world]} GPUs (" + G + "): vLLM's engines each take {g[tp]}",
    ),
    Check(
        f"{ACTOR}.ppo_mini_batch_size",
        lambda f: f["g"]["train"] % f["g"]["mini"] == 0,
        "{g[mini]} must divide data.train_batch_size={g[train]}: each step is split into mini-batches of {g[mini]} "
        "prompts",
    ),
    Check(
        f"{ACTOR}.ppo_mini_batch_size",
        lambda f: f["g"]["samples"] % f["g"]["dp"] == 0,
        "{g[mini]} prompts x {g[n]} rollouts (actor_rollout_ref.rollout.n) = {g[samples]} samples a mini-batch must "
        "split evenly over the {g[dp]} data-parallel ranks ({g[world]} GPUs / sequence parallel {g[sp]})",
    ),
    Check(
        f"{ACTOR}.ppo_micro_batch_size_per_gpu",
        lambda f: (
            (g := f["g"])["micro"] is None or g["samples"] % g["dp"] or (g["samples"] // g["dp"]) % g["micro"] == 0
        ),
        "{g[micro]} must divide each GPU's share of a mini-batch ({g[samples]} samples / {g[dp]} ranks), or use "
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
    ),
    Check(
        f"{ACTOR}.ppo_max_token_len_per_gpu",
        lambda f: f["g"]["actor_tokens"] is None or f["g"]["actor_tokens"] >= f["g"]["seq"],
        "{g[actor_tokens]} " + SHORT,
    ),
    Check(
        f"{ROLLOUT}.log_prob_max_token_len_per_gpu",
        lambda f: f["g"]["rollout_tokens"] is None or f["g"]["rollout_tokens"] >= f["g"]["seq"],
        "{g[rollout_tokens]} " + SHORT,
    ),
    Check(
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
        lambda f: f["g"]["ref_tokens"] is None or f["g"]["ref_tokens"] >= f["g"]["seq"],
        "{g[ref_tokens]} " + SHORT,
    ),
)
