"""Every key the launchers (and the recipe's config) set is one verl 0.9.1 reads.

A key that composes but is never read is a silent no-op: ``actor_rollout_ref.actor.grad_clip=1.0`` composes (it
is a field of verl's FSDPActorConfig) but verl 0.9.1 clips with ``actor.optim.clip_grad``. Two checks per key,
against verl's installed source:

1. where the key's subtree is one of verl's typed configs (a ``_target_`` dataclass), the key is a field of it;
2. its name is read somewhere in verl outside its config definitions (an attribute, a subscript, a ``get`` /
   ``getattr`` / ``OmegaConf.select`` argument): a field nothing reads is dead. A name test can be fooled by the
   same name elsewhere, never the other way round; the keys it cannot judge are in ``READ_ELSEWHERE`` with why.

And a key of a component the run does not build (the reference model without a KL term, the critic without
GAE) is refused too: verl reads it only when the component exists.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import re
import typing
from pathlib import Path

import pytest
import verl
from omegaconf import DictConfig, OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy, need_reward_model

from recipe.gcpo.checks import recipe_blocks
from tests.recipe.gcpo.conftest import CONFIG_DIR, compose_gcpo
from tests.scripts.launch import LAUNCHERS, launcher_overrides

VERL_ROOT = Path(verl.__file__).resolve().parent

# key prefix -> where it is read instead (keys the name test cannot judge)
READ_ELSEWHERE = {
    **{
        f"{block}.": "the recipe's block: parsed whole by recipe.gcpo.settings.RecipeSettings, which refuses unknown keys"
        for block in recipe_blocks()
    },
    "reward.reward_kwargs.": "read from the raw config by verl's DAPO reward manager; the entry point checks the names "
    "against what it reads (verl_preflight.reward.check_reward_kwargs, against its REWARD_KWARGS)",
    "ray_kwargs.ray_init.": "passed whole to ray.init(**ray_kwargs.ray_init) by verl's run_ppo",
}
# the recipe's Hydra config groups: an override of one chooses a file (whose keys are checked by
# test_every_key_a_protocol_sets_is_read_by_verl), it sets no key itself
CONFIG_GROUPS = {"protocol"}
# key prefix -> why the typed config above it does not decide (the name check still applies)
NOT_FIELDS = {
    "actor_rollout_ref.ref.log_prob_": "verl's worker pops these and renames them to FSDPActorConfig fields before "
    "building it (verl/workers/engine_workers.py)",
    "reward.custom_reward_function.": "a key of verl's ppo_trainer outside RewardConfig, read from the raw config by "
    "verl.trainer.ppo.reward.get_custom_reward_fn",
}
# keys whose name verl reads, but not on the path the recipe runs (verl's V1 trainer): key -> (why, the V1 module
# that decides instead and must not read the name, the module that does read it)
DEAD_IN_V1 = {
    "actor_rollout_ref.rollout.val_kwargs.do_sample": (
        "verl's V1 agent loop samples validation with val_kwargs.temperature/top_p/top_k and never reads do_sample "
        "(only the legacy trainer does; verl's validate_config reads it for a temperature check only)",
        "verl/trainer/ppo/v1/agent_loop_tq.py",
        "verl/trainer/ppo/ray_trainer.py",
    ),
}
# key prefix -> whether the run builds the component that reads it
COMPONENTS = {
    "actor_rollout_ref.ref.": need_reference_policy,
    "critic.": need_critic,
    "reward.reward_model.": need_reward_model,
}


def _is_config_definition(path: Path) -> bool:
    relative = path.relative_to(VERL_ROOT)
    return "config" in relative.parts[:-1] or relative.name in ("config.py", "base_config.py")


@functools.lru_cache(maxsize=1)
def names_verl_reads() -> frozenset[str]:
    """Every name verl's code (its config definitions left out) reads from an object or a mapping."""
    names = set()
    for path in VERL_ROOT.rglob("*.py"):
        if _is_config_definition(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                names.add(str(node.slice.value))
            elif isinstance(node, ast.Call):
                function = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if function in ("get", "pop", "getattr", "hasattr", "select", "setdefault"):
                    for arg in node.args:
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                            names.update(arg.value.split("."))
    return frozenset(names)


def _typed_owner(config: DictConfig, key: str) -> tuple[type | None, list[str]]:
    """The dataclass of the deepest typed config above ``key`` and the key's parts below it."""
    parts = key.split(".")
    owner, below = None, parts
    node = config
    for depth, part in enumerate(parts[:-1]):
        node = node._get_node(part) if isinstance(node, DictConfig) else None
        if not isinstance(node, DictConfig):
            break
        target = node._get_node("_target_") if "_target_" in node else None
        if target is not None:
            module, _, name = str(target._value()).rpartition(".")
            owner, below = getattr(importlib.import_module(module), name), parts[depth + 1 :]
    return owner, below


def _field_problem(owner: type, below: list[str]) -> str | None:
    cls = owner
    for part in below:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            return f"not a field of {owner.__module__}.{owner.__qualname__}"
        hint = typing.get_type_hints(cls).get(part)
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
            return None  # a value or a plain mapping below this point
        cls = hint
    return None


def key_problem(key: str, config: DictConfig) -> str | None:
    """Why verl would not read ``key`` in the run ``config`` describes (None: it would)."""
    if key.startswith("hydra.") or key in CONFIG_GROUPS or any(key.startswith(prefix) for prefix in READ_ELSEWHERE):
        return None
    if key in DEAD_IN_V1:
        return DEAD_IN_V1[key][0]
    for prefix, needed in COMPONENTS.items():
        if key.startswith(prefix) and not needed(config):
            return f"read only when the run builds {prefix.rstrip('.')}, which this run does not"
    owner, below = _typed_owner(config, key)
    if owner is not None and not any(key.startswith(prefix) for prefix in NOT_FIELDS):
        if problem := _field_problem(owner, below):
            return problem
    if key.rsplit(".", 1)[-1] not in names_verl_reads():
        return "a name verl's code never reads"
    return None


def key_problems(overrides: list[str], config: DictConfig) -> dict[str, str]:
    """key -> why verl would not read it (empty: every key is read)."""
    keys = [override.split("=", 1)[0].lstrip("+~") for override in overrides]
    return {key: problem for key in keys if (problem := key_problem(key, config)) is not None}


def _config_keys(path: Path) -> list[str]:
    """The leaves a config file of the recipe sets (on top of verl's ppo_trainer), as overrides."""
    raw = OmegaConf.load(path)
    raw.pop("defaults", None), raw.pop("hydra", None)

    def leaves(node, prefix):
        for key in node:
            value = node._get_node(key)  # unresolved: an interpolation is a leaf like any value
            if isinstance(value, DictConfig):
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}=x"

    return list(leaves(raw, ""))


PROTOCOLS = sorted(p.stem for p in (Path(CONFIG_DIR) / "protocol").glob("*.yaml"))


@pytest.mark.parametrize("script", LAUNCHERS)
def test_every_key_a_launcher_sets_is_read_by_verl(script):
    overrides = launcher_overrides(script, env={"RAY_NUM_CPUS": "16"})  # with every optional key
    assert key_problems(overrides, compose_gcpo(overrides)) == {}


def test_the_launchers_set_no_key_of_the_reference_model_and_verl_batches_it_like_the_actor():
    """The launchers pass no ``actor_rollout_ref.ref.`` key (verl reads them only when there is a reference model,
    and a launcher cannot know whether a command-line override adds a KL term); verl's own config batches the
    reference model's log-probs like the actor's, and the verl-grpo protocol, whose KL loss needs one, like the
    rollout's."""
    for args in ([], ["actor_rollout_ref.actor.use_kl_loss=true"], ["algorithm.use_kl_in_reward=True"]):
        overrides = launcher_overrides("run_qwen3_4b_grpo.sh", *args)
        config = compose_gcpo(overrides)
        assert not any(key.startswith(("actor_rollout_ref.ref.", "+actor_rollout_ref.ref.")) for key in overrides)
        assert key_problems(overrides, config) == {}
        ref = config.actor_rollout_ref.ref
        assert ref.log_prob_use_dynamic_bsz is True
        assert ref.log_prob_max_token_len_per_gpu == config.actor_rollout_ref.actor.ppo_max_token_len_per_gpu
    config = compose_gcpo(launcher_overrides("run_qwen3_4b_grpo.sh", env={"PROTOCOL": "verl-grpo"}))
    assert need_reference_policy(config)
    ref = config.actor_rollout_ref.ref
    assert ref.log_prob_max_token_len_per_gpu == config.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu


def test_every_key_the_recipe_config_sets_is_read_by_verl():
    assert key_problems(_config_keys(Path(CONFIG_DIR) / "gcpo_trainer.yaml"), compose_gcpo()) == {}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_key_a_protocol_sets_is_read_by_verl(protocol):
    assert PROTOCOLS == ["dapo-recipe", "shared", "verl-grpo"]
    keys = _config_keys(Path(CONFIG_DIR) / "protocol" / f"{protocol}.yaml")
    assert keys
    assert key_problems(keys, compose_gcpo([f"protocol={protocol}"])) == {}


def test_the_recipes_names_the_reasons_give_exist():
    """A reason that names where the recipe checks a key names something that is there (a rename leaves it stale)."""
    reasons = " ".join([*READ_ELSEWHERE.values(), *NOT_FIELDS.values()])
    names = sorted(set(re.findall(r"\b(?:recipe|gcpo_core|verl_preflight)(?:\.\w+)+", reasons)))
    assert "verl_preflight.reward.check_reward_kwargs" in names
    for name in names:
        module, _, attribute = name.rpartition(".")
        try:
            assert hasattr(importlib.import_module(module), attribute), name
        except ModuleNotFoundError:
            importlib.import_module(name)  # a module itself


@pytest.mark.parametrize("key", DEAD_IN_V1)
def test_the_keys_dead_in_v1_are_read_only_outside_it(key):
    """Keeps DEAD_IN_V1 true for the installed verl: the V1 module does not read the name, the legacy one does."""
    _, v1_module, legacy_module = DEAD_IN_V1[key]
    name = key.rsplit(".", 1)[-1]
    v1, legacy = (VERL_ROOT.parent / path for path in (v1_module, legacy_module))
    v1_text = v1.read_text(encoding="utf-8")
    assert "val_kwargs" in v1_text  # the module that reads the validation sampling settings ...
    assert f".{name}" not in v1_text and f'"{name}"' not in v1_text  # ... reads no attribute or key of this name
    assert f".{name}" in legacy.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "override, problem",
    [
        ("actor_rollout_ref.actor.grad_clip=1.0", "a name verl's code never reads"),  # a field, dead in 0.9.1
        (
            "actor_rollout_ref.actor.optim.clip_gradient=1.0",
            "not a field of verl.workers.config.optimizer.FSDPOptimizerConfig",
        ),
        (
            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
            "read only when the run builds actor_rollout_ref.ref, which this run does not",
        ),
        ("data.no_such_setting=1", "a name verl's code never reads"),
        (
            "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
            DEAD_IN_V1["actor_rollout_ref.rollout.val_kwargs.do_sample"][0],
        ),
    ],
)
def test_the_check_finds_keys_verl_does_not_read(override, problem):
    config = compose_gcpo(["+" + override] if "no_such" in override or "clip_gradient" in override else [override])
    assert key_problems([override], config) == {override.split("=")[0]: problem}
