"""Checks of a whole config against verl 0.9.1's own schema, its generated reference config
(``verl/trainer/config/_generated_*.yaml``: every key of ``ppo_trainer`` with its default): verl's blocks are there,
every value resolves, every key is one verl reads (a key verl would ignore, from a user's YAML or a ``+``, is refused
with the closest one, outside the free-form blocks below and an extension's own), numbers and booleans are of the
schema's kind, and the config dataclasses verl's workers build, build here first.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import importlib
import math
import re
from pathlib import Path
from typing import Any, Iterator, Optional

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from verl_preflight.errors import ConfigError, did_you_mean, refuse
from verl_preflight.values import VALUE_RULES

# Blocks whose keys are not verl's to know: verl hands them on as they are (`**kwargs` to vLLM / SGLang / Ray /
# transformers / the reward function, or a model's config overrides). Where verl's reference config says so: an
# empty mapping (``engine_kwargs: {}``, ``override_config: {}``, ``apply_chat_template_kwargs: {}``, ...) or a
# kwargs block (``ray_kwargs.ray_init``); ``reward.reward_kwargs`` and ``reward.custom_reward_function.reward_kwargs``
# verl reads with ``.get`` (verl/trainer/ppo/reward.py), checked against their reader (:mod:`verl_preflight.reward`).
FREE_FORM = (
    "*engine_kwargs",
    "*override_config",
    "*override_optimizer_config",
    "*sampler_kwargs",
    "*kw_args",
    "*reward_kwargs",
    "data.apply_chat_template_kwargs",
    "data.mm_processor_kwargs",
    "ray_kwargs.ray_init",
    "trainer.v1.sync",
)
# ppo_trainer's Hydra group choice (dp, megatron, ...), kept in the composed config but not in the generated one
GROUP_CHOICES = {"model_engine": "dp"}


@functools.lru_cache(maxsize=1)
def verl_schema() -> dict:
    """verl's keys with their defaults: the union of its generated reference configs (ppo_trainer and the other
    engines' variants of it), as plain nested dicts."""
    import verl

    folder = Path(verl.__file__).resolve().parent / "trainer" / "config"
    schema: dict = dict(GROUP_CHOICES)
    for path in sorted(folder.glob("_generated_*.yaml")):
        _merge(schema, OmegaConf.to_container(OmegaConf.load(path), resolve=False))
    if not schema.get("actor_rollout_ref"):
        raise RuntimeError(f"verl's generated reference config was not found in {folder}")
    _add_dataclass_fields(schema)
    return schema


def _add_dataclass_fields(block: dict) -> None:
    """A block verl builds into a dataclass (its ``_target_``) also takes the dataclass's fields the reference config
    does not write out (``fsdp_config.mixed_precision``, for one), with any value."""
    target = block.get("_target_")
    if isinstance(target, str):
        module, _, name = target.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):  # an engine's module that needs its own stack (megatron, ...)
            cls = None
        if dataclasses.is_dataclass(cls):
            for field in dataclasses.fields(cls):
                block.setdefault(field.name, None)
    for value in block.values():
        if isinstance(value, dict):
            _add_dataclass_fields(value)


def _merge(into: dict, other: dict) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif key not in into or into[key] is None:
            into[key] = value


def check_resolves(config: DictConfig) -> dict:
    """Every value resolves (``${oops}`` or ``${oc.env:NO_SUCH_VAR}`` would end the dry run's print in a traceback, or
    a run where verl first reads it); returns the config resolved, as plain Python, for the checks that walk it all
    (verl's ~450 interpolations are parsed again at each resolution).

    Raises:
        ConfigError: the key whose value does not resolve (the one naming what is missing), with OmegaConf's reason.
    """
    try:
        return OmegaConf.to_container(config, resolve=True)
    except OmegaConfBaseException:
        pass
    failures = []
    for key, node in _leaves(config, ""):
        if node._is_interpolation():
            try:
                node._dereference_node()
            except OmegaConfBaseException as error:
                failures.append((key, str(node._value()), str(error).splitlines()[0].strip()))
    if failures:
        named = [f for f in failures if any(f"'{name}'" in f[2] for name in _names(f[1]))]
        key, raw, reason = (named or failures)[0]
        raise ConfigError(key, f"{raw} does not resolve: {reason}")
    raise ConfigError(None, "the config does not resolve")  # an interpolation inside a list: OmegaConf names none


def _names(raw: str) -> list[str]:
    """The words of an interpolation's text (``${oc.env:NO_SUCH_VAR}`` -> oc, env, NO_SUCH_VAR)."""
    return [word for word in re.split(r"[^A-Za-z0-9_.-]+", raw) if word]


def _leaves(node: DictConfig, path: str) -> Iterator[tuple[str, Any]]:
    for key in node.keys():
        full, child = f"{path}.{key}" if path else str(key), node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_interpolation():
            yield from _leaves(child, full)
        else:
            yield full, child


def check_blocks(config: DictConfig) -> None:
    """verl's top-level blocks are there and are blocks of keys: verl reads ``trainer.*``, ``data.*``, ... everywhere
    (``~trainer`` on the command line or ``trainer: null`` in a YAML would end in an attribute error minutes in).

    Raises:
        ConfigError: the first block missing or not a mapping.
    """
    for key, default in verl_schema().items():
        if isinstance(default, dict) and default:
            value = config._get_node(key) if key in config else None
            if value is None or not isinstance(value, DictConfig) or value._is_none():
                got = "it is missing (removed with ~" + key + "?)" if value is None else f"got {config.get(key)!r}"
                refuse(key, f"must be verl's block of {key}.* keys: {got}")


def check_schema(resolved: dict, free: tuple[str, ...] = (), reader: str = "verl 0.9.1") -> None:
    """Every key of ``resolved`` (:func:`check_resolves`'s) is in verl's schema (outside :data:`FREE_FORM` and
    ``free``, an extension's blocks, which it checks itself); a value is a boolean where verl's default is one, a number
    (or null) where it is a number; every float is finite. ``reader``: who reads the keys, for the refusal.

    Raises:
        ConfigError: the first key verl would ignore (with the closest key it reads), or a value of the wrong kind.
    """
    _walk(resolved, verl_schema(), "", free, reader)


def _walk(node: dict, schema: Optional[dict], path: str, free: tuple[str, ...], reader: str) -> None:
    for key, value in node.items():
        full = f"{path}.{key}" if path else str(key)
        if full in free or any(fnmatch.fnmatchcase(full, pattern) for pattern in FREE_FORM):
            continue
        if schema is not None and key not in schema:
            raise ConfigError(full, unknown_key_message(full, str(key), schema, reader))
        default = None if schema is None else schema.get(key)
        if full not in VALUE_RULES:  # those have a rule of their own, with its message
            _check_kind(full, value, default)
        if isinstance(value, dict):
            # a block verl leaves null (or does not describe) is not verl's to check below
            _walk(value, default if isinstance(default, dict) else None, full, free, reader)


def unknown_key_message(full: str, key: str, known: dict, reader: str = "verl 0.9.1") -> str:
    hint = did_you_mean(key, known, prefix=f": did you mean {full[: -len(key)]}")
    return (
        f"not a key {reader} reads{hint} (verl would ignore it; a free-form block takes any key: "
        "docs/training.md#keys-verl-does-not-check)"
    )


def _check_kind(key: str, value: Any, default: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value!r}")
    if value is None or default is None or isinstance(default, str) and default.startswith("${"):
        return
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(key, f"must be true or false, got {value!r}")
    elif isinstance(default, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"must be a number, got {value!r}")


# ---- verl's config dataclasses, built as its workers build them -----------------------------------------------


def check_verl_dataclasses(config: DictConfig, resolved: dict, use_critic: bool) -> None:
    """Build the config dataclasses verl's workers build (``omega_conf_to_dataclass``, their ``__post_init__``
    checks): the actor's, the reference policy's (its log-prob keys renamed as verl/workers/engine_workers.py does),
    the rollout's, the critic's when one runs, distillation's when on. The model's (``HFModelConfig``) loads the model:
    left to the model-path check. ``resolved``: :func:`check_resolves`'s.

    Raises:
        ConfigError: the block whose dataclass verl would refuse, with verl's reason on one line.
    """
    from verl.utils.config import omega_conf_to_dataclass

    arr = config.actor_rollout_ref
    ref = OmegaConf.create(resolved["actor_rollout_ref"]["ref"])
    with open_dict(ref):  # what ActorRolloutRefWorker does before building the reference policy's ActorConfig
        ref.ppo_mini_batch_size = arr.actor.ppo_mini_batch_size
        ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
        ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
        ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
        ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
    blocks = {
        "actor_rollout_ref.actor": arr.actor,
        "actor_rollout_ref.ref": ref,
        "actor_rollout_ref.rollout": arr.rollout,
        "actor_rollout_ref.rollout.checkpoint_engine": arr.rollout.checkpoint_engine,
    }
    if use_critic:
        blocks["critic"] = OmegaConf.create({k: v for k, v in resolved["critic"].items() if k != "model"})
    if OmegaConf.select(config, "distillation.enabled"):
        blocks["distillation"] = config.distillation
    for key, block in blocks.items():
        try:
            omega_conf_to_dataclass(block)
        except Exception as error:  # verl's dataclasses raise what their checks raise
            cause = error.__cause__ or error
            reason = " ".join(str(cause).split())
            raise ConfigError(key, f"verl's config refuses it: {type(cause).__name__}: {reason}") from None
