"""The table of verl's values that verl reads late or not at all: numbers verl multiplies and divides with untyped,
names it looks up in a registry or compares with strings minutes into a run, and the elements of its lists. One rule
a key; :func:`check_values` applies the table to a composed config.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any, Callable, Iterable, NamedTuple, Optional, Union

from omegaconf import DictConfig, OmegaConf

from verl_preflight.errors import ConfigError, did_you_mean, plain


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
        known = sorted(self.names() if callable(self.names) else self.names, key=str)
        if value in known:
            return None
        names = ", ".join(dict.fromkeys("null" if name is None else str(name) for name in known))  # 16 and "16": once
        return f"must be one of {names}, got {value!r}{did_you_mean(value, [n for n in known if n is not None])}"


class Rule(NamedTuple):
    """A value for which ``holds(value)`` is true; refused as ``must be <must_be>, got <value>``."""

    holds: Callable[[Any], bool]
    must_be: str

    def problem(self, value: Any) -> Optional[str]:
        return None if self.holds(value) else f"must be {self.must_be}, got {value!r}"


class ListOf(NamedTuple):
    """A list (not a string: verl tests membership in it) each of whose elements meets ``element``; ``length``: how
    many; ``nullable``: null allowed (verl's default then)."""

    element: Union[Range, OneOf, Rule]
    length: Optional[int] = None
    nullable: bool = False

    def problem(self, value: Any) -> Optional[str]:
        if value is None and self.nullable:
            return None
        if not isinstance(value, list) or self.length is not None and len(value) != self.length:
            count = f"{self.length} values" if self.length else "a list"
            return f"must be {count} (e.g. [{', '.join(['...'] * (self.length or 1))}]), got {value!r}"
        for index, item in enumerate(value):
            problem = self.element.problem(item)
            if problem is not None:
                return f"element {index} {problem}"
        return None


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


def _rejection_sampling(value: Any) -> bool:
    from verl.trainer.ppo.rollout_corr_helper import SUPPORTED_ROLLOUT_RS_OPTIONS

    return value is None or isinstance(value, str) and set(value.split(",")) <= SUPPORTED_ROLLOUT_RS_OPTIONS


ACTOR, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
# verl's KL estimators (core_algos.kl_penalty), each also with a "+" (straight-through k2 gradient); "full" raises
KL = tuple(f"{name}{plus}" for plus in ("", "+") for name in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"))
# a beta of Adam: torch refuses an integer one (0, not 0.0) when verl builds the optimizer
BETA = Rule(lambda v: isinstance(v, float) and 0 <= v < 1, "a float in [0, 1) (0.0, not 0)")
CONTENTS = ListOf(OneOf(("model", "optimizer", "extra", "hf_model")), nullable=True)
# checkpoint engines verl 0.9.1 registers (verl/checkpoint_engine/*.py; tests/verl_preflight/test_values.py reads them)
CHECKPOINT_ENGINES = ("naive", "nccl", "nixl", "delta_sharded", "kimi_ckpt_engine", "mooncake")
# verl's values that verl leaves unchecked (or checks only where it uses them, minutes into a run), one rule each. A
# value like "abc", 0, 1.5 or nan would otherwise pass the dry run and fail late, or worse, train wrong. The rule
# applies where the key is set (a null where no null is allowed is refused).
VALUE_RULES: dict[str, Union[Range, OneOf, Rule, ListOf]] = {
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
    # verl's GRPO tests it for truth: null would be a silent false (no std normalisation)
    "algorithm.norm_adv_by_std_in_grpo": Rule(lambda v: isinstance(v, bool), "true or false"),
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
    # names verl compares with strings minutes in, or never reads (truncation: its RL dataset ignores it)
    "trainer.device": OneOf(("cuda", "npu", "cpu")),
    # verl's TRAINER_REGISTRY (named here: importing it loads verl's trainer stack; a test holds the two equal)
    "trainer.v1.trainer_mode": OneOf(("sync", "colocate_async", "separate_async")),
    "trainer.v1.sampler.max_off_policy_strategy": OneOf(("drop", "wait")),
    "trainer.v1.sampler.max_off_policy_threshold": Range(1, integer=True, nullable=True),  # verl's replay buffer's
    "trainer.v1.colocate_async.num_warmup_batches": Range(0),
    "trainer.v1.separate_async.num_warmup_batches": Range(0),
    "trainer.v1.separate_async.parameter_sync_step": Range(1, integer=True),
    "data.truncation": OneOf((None, "error", "left", "right", "middle")),
    f"{ACTOR}.optim.betas": ListOf(BETA, length=2),
    # verl's optimizer config asserts these without a message
    f"{ACTOR}.optim.lr_scheduler_type": OneOf(("constant", "cosine")),
    f"{ACTOR}.optim.warmup_style": OneOf((None, "constant", "cosine")),
    f"{ACTOR}.checkpoint.save_contents": CONTENTS,
    f"{ACTOR}.checkpoint.load_contents": CONTENTS,
    # verl's PrecisionType names; null: fp32 to train, bf16 forward-only
    f"{ACTOR}.fsdp_config.model_dtype": OneOf(
        (None, 16, "16", "fp16", "float16", 32, "32", "fp32", "float32", "bf16", "bfloat16")
    ),
    f"{ROLLOUT}.mode": OneOf(("async",)),
    # vLLM's names; null: verl passes no --dtype (vLLM's auto)
    f"{ROLLOUT}.dtype": OneOf((None, "auto", "half", "float16", "bfloat16", "float", "float32")),
    f"{ROLLOUT}.load_format": OneOf(
        ("dummy", "auto", "safetensors", "pt", "npcache", "fastsafetensors", "bitsandbytes", "gguf", "mistral")
        + ("runai_streamer", "runai_streamer_sharded", "sharded_state", "tensorizer")
    ),
    f"{ROLLOUT}.checkpoint_engine.backend": OneOf(CHECKPOINT_ENGINES),
    f"{ROLLOUT}.agent.default_agent_loop": OneOf(("single_turn_agent", "tool_agent")),
    "algorithm.rollout_correction.rollout_is": OneOf((None, "token", "sequence")),
    "algorithm.rollout_correction.rollout_rs": Rule(
        _rejection_sampling,
        "null or a comma-separated list of token_k1, "
        "token_k2, token_k3, seq_sum_k1, seq_sum_k2, seq_sum_k3, seq_mean_k1, seq_mean_k2, seq_mean_k3, seq_max_k2, seq_max_k3",
    ),
    **{f"skip.{step}.action": OneOf(("cache", "repeat")) for step in ("rollout", "rollout_tq", "async_rollout")},
}
# read only where they are in use: the key that turns them on -> its rules
WHEN_USED: dict[str, dict[str, Union[Range, OneOf, Rule, ListOf]]] = {
    f"{ACTOR}.use_kl_loss": {f"{ACTOR}.kl_loss_type": OneOf(KL)},
    "algorithm.use_kl_in_reward": {
        "algorithm.kl_penalty": OneOf(KL),
        "algorithm.kl_ctrl.type": OneOf(("fixed", "adaptive")),
    },
    "critic.enable": {
        "critic.optim.betas": ListOf(BETA, length=2),
        "critic.checkpoint.save_contents": CONTENTS,
        "critic.checkpoint.load_contents": CONTENTS,
    },
    "reward.reward_model.enable": {"reward.reward_model.rollout.name": OneOf(_rollout_names)},
}


# names a module of the user's own may add, with the key that names the module: not checked where it is set
EXTENDED_BY = {
    f"{ROLLOUT}.checkpoint_engine.backend": f"{ROLLOUT}.checkpoint_engine.custom_backend_module",
    f"{ROLLOUT}.agent.default_agent_loop": f"{ROLLOUT}.agent.agent_loop_config_path",
}
ENGINE_PACKAGES = {"megatron": "megatron.core", "torchtitan": "torchtitan", "veomni": "veomni"}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing
        return False


def check_values(config: DictConfig) -> None:
    """Each key of :data:`VALUE_RULES` that the config has meets its rule; so does the reward manager's name when
    verl looks it up in its registry (``reward.reward_manager.source=register``).

    Raises:
        ConfigError: the first value that does not, naming its key and what it accepts.
    """
    rules = dict(VALUE_RULES)
    if OmegaConf.select(config, "reward.reward_manager.source") == "register":
        rules["reward.reward_manager.name"] = OneOf(_reward_managers)
    for switch, when_on in WHEN_USED.items():
        if OmegaConf.select(config, switch):
            rules.update(when_on)
    for key, extended_by in EXTENDED_BY.items():
        if OmegaConf.select(config, extended_by):
            rules.pop(key, None)
    for block in (ACTOR, "critic"):  # verl passes betas to an Adam only (an AdEMAMix takes three)
        if "adam" not in str(OmegaConf.select(config, f"{block}.optim.optimizer") or "").lower():
            rules.pop(f"{block}.optim.betas", None)
    engine = OmegaConf.select(config, "model_engine") or "dp"
    if engine == "dp":  # verl's FSDP engines; megatron & co. have their own strategy names
        rules[f"{ACTOR}.strategy"] = OneOf(("fsdp", "fsdp2"))
    elif not _importable(ENGINE_PACKAGES.get(engine, engine)):  # verl only warns, then each worker stops
        raise ConfigError(
            "model_engine",
            f"{engine} needs {ENGINE_PACKAGES.get(engine, engine)}, which is not installed here: verl would stop with "
            f"'Unknown backend: {engine}' in every worker; use model_engine=dp (FSDP)",
        )
    for key, rule in rules.items():
        parent, _, last = key.rpartition(".")
        block = OmegaConf.select(config, parent)
        if not isinstance(block, DictConfig) or last not in block.keys():  # `in` is false for a ??? value
            continue
        if OmegaConf.is_missing(block, last):  # verl's ??? (rollout.name): verl stops on it as a worker starts
            raise ConfigError(key, f"not set (verl's config leaves it ???): it {rule.problem('???')}")
        problem = rule.problem(plain(OmegaConf.select(config, key)))
        if problem is not None:
            raise ConfigError(key, problem)
