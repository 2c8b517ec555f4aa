"""Start-up checks of verl's own keys that verl reads late or not at all: the trainer the entry point runs, the
estimator's name (verl looks it up at the first advantage step), the numbers verl multiplies and divides with
untyped, and the cluster's shape.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Callable, Iterable, NamedTuple, Optional, Union

from omegaconf import DictConfig, OmegaConf

from recipe.gcpo.config import ConfigError
from recipe.gcpo.settings import recipe_estimators


def uses_v1(config: DictConfig) -> bool:
    """Whether the config selects verl's V1 trainer (``trainer.use_v1``, verl's default true)."""
    return bool(config.trainer.get("use_v1", True))


def check_v1_trainer(config: DictConfig) -> None:
    """The config selects verl's V1 trainer, the one this entry point runs.

    Raises:
        ConfigError: ``trainer.use_v1=false``.
    """
    if not uses_v1(config):
        raise ConfigError(
            "trainer.use_v1",
            "false selects verl's legacy trainer, which this entry point does not run: "
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
    known = sorted({*ADV_ESTIMATOR_REGISTRY, *recipe_estimators()})
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f": did you mean {close[0]}?" if close else ""
        raise ConfigError(
            "algorithm.adv_estimator",
            f"{name} is not an estimator verl or the recipe registers{hint} (known: {', '.join(known)})",
        )


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
        close = difflib.get_close_matches(str(value), known, n=1)
        hint = f": did you mean {close[0]}?" if close else ""
        return f"must be one of {', '.join(known)}, got {value!r}{hint}"


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


def _geometry(config: DictConfig) -> dict[str, Any]:
    """The numbers verl splits a step's batch with (checked by :data:`VALUE_RULES` first)."""
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


G = "trainer.nnodes x trainer.n_gpus_per_node"
# How verl splits a step (verl/trainer/ppo/v1/trainer_base.py, its workers): what each split needs, one rule each:
# (the key at fault, the test, the message). verl's validate_config passes all of these; the run stops minutes in.
GEOMETRY_RULES: tuple[tuple[str, Callable[[dict], bool], str], ...] = (
    (
        f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size",
        lambda g: g["world"] % g["sp"] == 0,
        "{sp} must divide the {world} GPUs (" + G + ")",
    ),
    (
        f"{ROLLOUT}.tensor_model_parallel_size",
        lambda g: g["world"] % g["tp"] == 0,
        "{tp} must divide the {world} GPUs (" + G + "): vLLM's engines each take {tp}",
    ),
    (
        f"{ACTOR}.ppo_mini_batch_size",
        lambda g: g["train"] % g["mini"] == 0,
        "{mini} must divide data.train_batch_size={train}: each step is split into mini-batches of {mini} prompts",
    ),
    (
        f"{ACTOR}.ppo_mini_batch_size",
        lambda g: g["samples"] % g["dp"] == 0,
        "{mini} prompts x {n} rollouts (actor_rollout_ref.rollout.n) = {samples} samples a mini-batch must split "
        "evenly over the {dp} data-parallel ranks ({world} GPUs / sequence parallel {sp})",
    ),
    (
        f"{ACTOR}.ppo_micro_batch_size_per_gpu",
        lambda g: g["micro"] is None or g["samples"] % g["dp"] or (g["samples"] // g["dp"]) % g["micro"] == 0,
        "{micro} must divide each GPU's share of a mini-batch ({samples} samples / {dp} ranks), or use "
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
    ),
    (
        f"{ACTOR}.ppo_max_token_len_per_gpu",
        lambda g: g["actor_tokens"] is None or g["actor_tokens"] >= g["seq"],
        "{actor_tokens} is shorter than one sequence (data.max_prompt_length + data.max_response_length = "
        "{seq}): dynamic batching cannot fit it",
    ),
    (
        f"{ROLLOUT}.log_prob_max_token_len_per_gpu",
        lambda g: g["rollout_tokens"] is None or g["rollout_tokens"] >= g["seq"],
        "{rollout_tokens} is shorter than one sequence (data.max_prompt_length + data.max_response_length = "
        "{seq}): dynamic batching cannot fit it",
    ),
    (
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
        lambda g: g["ref_tokens"] is None or g["ref_tokens"] >= g["seq"],
        "{ref_tokens} is shorter than one sequence (data.max_prompt_length + data.max_response_length = "
        "{seq}): dynamic batching cannot fit it",
    ),
)


def check_batch_geometry(config: DictConfig) -> None:
    """Each of :data:`GEOMETRY_RULES` holds for the config's batch, lengths and GPUs.

    Raises:
        ConfigError: the first rule that does not, naming its key and the numbers.
    """
    geometry = _geometry(config)
    for key, holds, message in GEOMETRY_RULES:
        if not holds(geometry):
            raise ConfigError(key, message.format(**geometry))
