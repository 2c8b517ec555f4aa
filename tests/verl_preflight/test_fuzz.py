"""A fuzz of the checks of a composed config: generated configs, each with the outcome it must get, through what the
entry points run on a composed config (``verl_preflight.check_config``, and the recipe's dry run's print), on three
kinds of config: the recipe's, a user's own verl ``ppo_trainer`` under the recipe's entry point, and verl's stock
``ppo_trainer`` as ``python -m verl_preflight`` checks it. No case may end in anything but acceptance or a
``ConfigError`` naming the key at fault; the classes (keys verl would ignore, values of the wrong kind, values out of
range, names verl does not register, list elements, unresolvable interpolations, batch geometry, data files,
estimator-dependent blocks) are generated from verl's own schema and the rule tables, so a new key or rule is fuzzed
without a new line here. What Hydra meets before a config is composed is test_front_door.py's.

Each base config is composed once and resolved (verl's ~450 interpolations would cost a second a case); a case
applies its overrides with Hydra's own override code (what the composition does with them) or merges a user's YAML
block into it. verl's dataclass conversion, a pure function of its block, is memoised for the run.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import io
import random
from pathlib import Path
from typing import Any, NamedTuple, Optional

import pytest
import verl
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from recipe.gcpo.checks import CONFIG_DIR, RECIPE, recipe_blocks
from recipe.gcpo.run_summary import print_dry_run
from tests.recipe.gcpo.test_main_gcpo import OWN_CONFIG, VALID
from verl_preflight import ConfigError, Extension, check_config, schema
from verl_preflight.front_door import compose_config, parse_command_line
from verl_preflight.values import VALUE_RULES, ListOf, OneOf, Range

SEED = 53
PARSER = OverridesParser.create()


class Case(NamedTuple):
    """Overrides (or a YAML block to merge) and the outcome: ``key`` None = accepted, else refused naming it; with
    ``other_key_ok`` the value is valid for ``key`` and a refusal may only name another key (a valid value can
    break a rule between keys, e.g. a batch size that no longer divides)."""

    overrides: tuple[str, ...]
    key: Optional[str]
    merge: Optional[dict] = None
    other_key_ok: bool = False


STOCK = Extension()  # python -m verl_preflight: verl's config alone
EXTENSIONS = {"recipe": RECIPE, "own": RECIPE, "stock": STOCK}


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """The three kinds of config, composed through the entry points' composition and resolved once."""
    folder = tmp_path_factory.mktemp("own")
    (folder / "my_ppo.yaml").write_text(OWN_CONFIG + "trainer:\n  project_name: mine\n")
    data = tmp_path_factory.mktemp("data")
    stock_folder = Path(verl.__file__).resolve().parent / "trainer" / "config"
    result = {}
    for kind, where, name, estimator in (
        ("recipe", CONFIG_DIR, "gcpo_trainer", []),
        ("own", folder, "my_ppo", ["algorithm.adv_estimator=gcpo"]),
        ("stock", stock_folder, "ppo_trainer", ["algorithm.adv_estimator=grpo"]),
    ):
        argv = ["--config-path", str(where), "--config-name", name, *VALID, *estimator]
        request = parse_command_line([*argv, f"trainer.default_local_dir={data}/ckpt"], where, name, "fuzz")
        config = compose_config(request, EXTENSIONS[kind] if kind != "stock" else None).config
        result[kind] = OmegaConf.create(schema.check_resolves(config))
    return result


@pytest.fixture(autouse=True)
def quiet_environment(monkeypatch):
    monkeypatch.setenv("GCPO_DRY_RUN", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    for var in ("RAY_ADDRESS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    from verl.utils import config as verl_config

    real = verl_config.omega_conf_to_dataclass

    @functools.lru_cache(maxsize=None)
    def cached(text: str):
        return real(OmegaConf.create(text))

    def memoised(block, dataclass_type=None):
        assert dataclass_type is None
        return cached(OmegaConf.to_yaml(block, resolve=True))  # a block's text: the key of verl's pure function

    monkeypatch.setattr(verl_config, "omega_conf_to_dataclass", memoised)


def outcome(base: DictConfig, case: Case, extension: Extension = RECIPE) -> Optional[ConfigError]:
    """What the entry point does with ``base`` and the case: None (accepted, dry run printed) or its refusal. Any
    other exception is what the fuzz looks for, and fails the test. ``base`` is changed in place and restored (a
    copy of the whole config costs more than the checks)."""
    paths = [o.split("=")[0].lstrip("+~") for o in case.overrides] + _paths(case.merge or {})
    saved = _snapshot(base, [*paths, *MIGRATED])
    try:
        ConfigLoaderImpl._apply_overrides_to_config(PARSER.parse_overrides(list(case.overrides)), base)
        if case.merge is not None:
            with open_dict(base):
                base.merge_with(case.merge)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            try:
                check_config(base, extension, dry_run=True)
                if extension is RECIPE:
                    print_dry_run(base, CONFIG_DIR)
            except ConfigError as refusal:
                assert "\n" not in str(refusal), str(refusal)
                return refusal
        return None
    finally:
        _restore(base, saved)


# what the entry point's adaptation may move (verl's legacy reward keys into reward.*)
MIGRATED = ("reward", "custom_reward_function", "reward_model", "sandbox_fusion")
ABSENT = object()


def _paths(block: dict, path: str = "") -> list[str]:
    return [
        sub
        for key, value in block.items()
        for sub in (_paths(value, f"{path}{key}.") if isinstance(value, dict) else [f"{path}{key}"])
    ]


def _snapshot(base: DictConfig, paths: list[str]) -> dict[str, Any]:
    """The blocks ``paths`` can change: the top-level block where it is new, else the block two levels down."""
    saved = {}
    for path in paths:
        parts = path.split(".")
        block = parts[0] if parts[0] not in base or len(parts) == 1 else ".".join(parts[:2])
        value = OmegaConf.select(base, block, default=ABSENT)
        saved[block] = OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value
    return saved


def _restore(base: DictConfig, saved: dict[str, Any]) -> None:
    with open_dict(base):
        for block, value in sorted(saved.items(), key=lambda item: item[0].count(".")):  # outer blocks first
            parent, _, last = block.rpartition(".")
            node = OmegaConf.select(base, parent) if parent else base
            assert isinstance(node, DictConfig), (block, node)
            if value is ABSENT:
                if isinstance(node, DictConfig) and last in node.keys():
                    del node[last]
            else:
                node[last] = value


# ---- the generators --------------------------------------------------------------------------------------------


def _leaves(tree: dict, path: str = ""):
    for key, value in tree.items():
        full = f"{path}.{key}" if path else str(key)
        if _free(full) or str(key) == "_target_":
            continue
        if isinstance(value, dict):
            yield from _leaves(value, full)
        else:
            yield full, value


def _free(path: str) -> bool:
    return path in recipe_blocks() or any(fnmatch.fnmatchcase(path, pattern) for pattern in schema.FREE_FORM)


def _typo(word: str, rng: random.Random) -> str:
    i = rng.randrange(len(word))
    kind = rng.choice(("drop", "double", "swap", "insert"))
    if kind == "drop" and len(word) > 3:
        return word[:i] + word[i + 1 :]
    if kind == "swap" and i < len(word) - 1 and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == "insert":
        return word[:i] + rng.choice("aeioux") + word[i:]
    return word[:i] + word[i] + word[i:]


def _in_schema(path: str) -> bool:
    node: Any = schema.verl_schema()
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def unknown_keys(rng: random.Random, count: int) -> list[Case]:
    """A key verl would ignore: a typo of one level of a real key, added with + / ++ or in a user's YAML."""
    leaves = [path for path, _ in _leaves(schema.verl_schema()) if path not in schema.GROUP_CHOICES]
    cases = []
    while len(cases) < count:
        parts = rng.choice(leaves).split(".")
        level = rng.randrange(len(parts))
        parts[level] = _typo(parts[level], rng)
        typo = ".".join(parts[: level + 1])
        if _in_schema(typo) or _free(typo) or any(typo.startswith(f"{b}.") for b in recipe_blocks()):
            continue
        full = ".".join(parts)
        how = rng.choice(("+", "++", "yaml"))
        if how == "yaml":
            block: Any = 1
            for part in reversed(parts):
                block = {part: block}
            cases.append(Case((), typo, merge=block))
        else:
            cases.append(Case((f"{how}{full}=1",), typo))
    return cases


BAD_NUMBERS = ("abc", "nan", "inf", "-inf", "true", "[1,2]", "'3'")
BAD_BOOLEANS = ("'false'", "'true'", "abc", "''", "[1,2]", "0", "1", "nan")


def wrong_kinds(rng: random.Random, count: int) -> list[Case]:
    """A value of the wrong kind where verl's default is a number or a boolean; and true / false where it is a
    boolean (accepted)."""
    table = set(VALUE_RULES)
    numbers = [p for p, v in _leaves(schema.verl_schema()) if _number(v) and p not in table]
    booleans = [p for p, v in _leaves(schema.verl_schema()) if isinstance(v, bool)]
    cases = []
    for _ in range(count):
        if rng.random() < 0.5:
            key = rng.choice(numbers)
            cases.append(Case((f"{key}={rng.choice(BAD_NUMBERS)}",), key))
        else:
            key = rng.choice(booleans)
            if rng.random() < 0.25:
                cases.append(Case((f"{key}={rng.choice(('true', 'false'))}",), key, other_key_ok=True))
            else:
                cases.append(Case((f"{key}={rng.choice(BAD_BOOLEANS)}",), key))
    return cases


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _outside(rule: Range, rng: random.Random) -> list[str]:
    values = ["abc", "nan", "inf", "true", "[1]"]
    values.append(repr(rule.low - 1) if rule.low_open is False else repr(rule.low))
    if rule.high is not None:
        values.append(repr(rule.high + 0.5))
    if rule.integer:
        values.append(repr(max(rule.low, 1) + 0.5))
    if not rule.nullable:
        values.append("null")
    return values


def _inside(rule: Range) -> list[str]:
    low = rule.low + (1 if rule.integer else 0.25) if rule.low_open else rule.low
    values = [repr(int(low) if rule.integer else float(low))]
    if rule.high is not None:
        values.append(repr(float(rule.high)))
    if rule.nullable:
        values.append("null")
    return values


def rule_values(rng: random.Random) -> list[Case]:
    """Every rule of the value table, with values outside it (refused, naming the key) and inside it (never
    refused for that key): numbers out of range, names with a typo, lists of the wrong length or with a bad element;
    and the rules that apply only where their key is in use (verl's KL estimators)."""
    cases = []
    for key, rule in VALUE_RULES.items():
        if isinstance(rule, Range):
            outside = _outside(rule, rng)
            cases += [Case((f"{key}={value}",), key) for value in rng.sample(outside, min(4, len(outside)))]
            cases += [Case((f"{key}={value}",), key, other_key_ok=True) for value in _inside(rule)]
        elif isinstance(rule, OneOf):
            names = sorted(rule.names() if callable(rule.names) else rule.names, key=str)
            cases += [Case((f"{key}={_yaml(name)}",), key, other_key_ok=True) for name in names]
            typos = [name for name in names if isinstance(name, str)]
            cases += [Case((f"{key}={_typo(name, rng)}x",), key) for name in rng.sample(typos, min(3, len(typos)))]
        elif isinstance(rule, ListOf):
            cases += list_elements(key, rule, rng)
    cases += [Case(("reward.reward_manager.name=bogus",), "reward.reward_manager.name")]
    kl = "actor_rollout_ref.actor.kl_loss_type"
    cases += [  # checked only where verl reads it
        Case(("actor_rollout_ref.actor.use_kl_loss=true", f"{kl}=k4"), kl),
        Case(("actor_rollout_ref.actor.use_kl_loss=false", f"{kl}=k4"), None),
        Case(("actor_rollout_ref.actor.use_kl_loss=true", f"{kl}=k3+"), None),
    ]
    return cases


def list_elements(key: str, rule: ListOf, rng: random.Random) -> list[Case]:
    """A list of the rule's length with good elements (accepted for the key), one too short or long, one with a bad
    element, a plain string in its place."""
    element = rule.element
    if isinstance(element, OneOf):
        good, bad = sorted(element.names, key=str)[:2], f"{_typo(sorted(element.names)[0], rng)}x"
    else:  # Adam's betas
        good, bad = [0.9, 0.95], 0
    good = good[: rule.length or len(good)]
    wrong = [*good, *good] if rule.length else None
    cases = [
        Case((f"{key}=[{','.join(map(str, good))}]",), key, other_key_ok=True),
        Case((f"{key}=[{','.join(map(str, [*good[:-1], bad]))}]",), key),
        Case((f"{key}={good[0]}",), key),
    ]
    if wrong is not None:
        cases.append(Case((f"{key}=[{','.join(map(str, wrong))}]",), key))
    return cases


def _yaml(value: Any) -> str:
    return "null" if value is None else str(value)


def interpolations(rng: random.Random, count: int) -> list[Case]:
    """A value that does not resolve, in any string-valued key."""
    strings = [p for p, v in _leaves(schema.verl_schema()) if isinstance(v, str) and not v.startswith("${")]
    cases = []
    for i in range(count):
        key = rng.choice(strings)
        value = rng.choice((f"${{no_such_key_{i}}}", f"${{oc.env:GCPO_FUZZ_NO_SUCH_VAR_{i}}}", "${trainer.nope}"))
        cases.append(Case((f"{key}='{value}'",), key))
    return cases


def geometry(rng: random.Random, count: int) -> list[Case]:
    """Batch geometry: random prompts, mini-batches, rollouts, GPUs, tensor parallelism and micro-batches, refused
    exactly where verl's split of a step would fail (the rules below, written from verl's trainer), else accepted."""
    cases = []
    for _ in range(count):
        train, mini = rng.choice((4, 6, 8, 12, 16)), rng.choice((2, 3, 4, 6, 8))
        n, nodes, gpus = rng.choice((2, 3, 4, 8)), rng.choice((1, 2)), rng.choice((1, 2, 4, 8))
        tp, micro = rng.choice((1, 2, 3, 4)), rng.choice((None, 1, 2, 3))
        world = nodes * gpus
        if world % tp:
            key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
        elif train % mini:
            key = "actor_rollout_ref.actor.ppo_mini_batch_size"
        elif (mini * n) % world:
            key = "actor_rollout_ref.actor.ppo_mini_batch_size"
        elif micro is not None and (mini * n // world) % micro:
            key = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
        else:
            key = None
        overrides = [
            f"data.train_batch_size={train}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
            f"actor_rollout_ref.rollout.n={n}",
            f"trainer.nnodes={nodes}",
            f"trainer.n_gpus_per_node={gpus}",
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
        ]
        if micro is not None:
            overrides += [
                "actor_rollout_ref.actor.use_dynamic_bsz=false",
                f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
                # verl's validate_config: without the actor's dynamic batching, the log-prob passes need theirs
                f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
                f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
            ]
        cases.append(Case(tuple(overrides), key))
    return cases


def data_files(tmp: Path) -> list[Case]:
    folder = tmp / "a_folder"
    folder.mkdir(exist_ok=True)
    script = tmp / "prepare.py"
    script.write_text("print('not data')\n")
    cases = []
    for key in ("data.train_files", "data.val_files"):
        for value in ("null", "[]", "123", "[1,2]", "''", f"{folder}", f"{script}", f"[{folder}]"):
            cases.append(Case((f"{key}={value}",), key))
        cases.append(Case((f"{key}=/nowhere/missing.parquet",), None))  # a dry run warns
        cases.append(Case((f"{key}=[/nowhere/a.parquet,/nowhere/b.jsonl]",), None))
    return cases


ESTIMATORS = ("gcpo", "dqo", "dra_grpo", "grpo", "rloo", "copo", "mc_grpo", "diver")
BAD_RECIPE_VALUES = {
    "algorithm.gcpo.credit.method": "bogus",
    "algorithm.gcpo.credit.permutations": "-1",
    "algorithm.gcpo.credit.kernel": "nan",
    "algorithm.gcpo.encoder.max_chunks": "0",
    "algorithm.gcpo.actor.num_gpus": "-1",
}


def estimator_dependent(rng: random.Random) -> list[Case]:
    """Under every estimator: a bad value in the recipe's blocks, one rollout a prompt, verl's switch as a string."""
    cases = []
    for estimator in ESTIMATORS:
        pick = [f"algorithm.adv_estimator={estimator}"]
        if estimator == "copo":
            pick.append("algorithm.copo.blend=advantage")
        for key, value in BAD_RECIPE_VALUES.items():
            cases.append(Case((*pick, f"{key}={value}"), key))
        if estimator not in ("grpo", "rloo"):  # verl's own estimators: verl's behaviour with one rollout
            cases.append(Case((*pick, "actor_rollout_ref.rollout.n=1"), "actor_rollout_ref.rollout.n"))
        for value in ("'false'", "abc", "''", "[1,2]", "null"):
            cases.append(
                Case((*pick, f"algorithm.norm_adv_by_std_in_grpo={value}"), "algorithm.norm_adv_by_std_in_grpo")
            )
        cases.append(Case((*pick, f"algorithm.norm_adv_by_std_in_grpo={rng.choice(('true', 'false'))}"), None))
    return cases


def reward_cases(tmp: Path) -> list[Case]:
    """The reward: a file that exits at import, a function that is not there, a filter metric nobody reports."""
    exits, good = tmp / "exits.py", tmp / "good.py"
    exits.write_text("import sys\n\nsys.exit(0)\n")
    good.write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': 1.0, 'my_acc': 1}\n"
    )
    fg = ["algorithm.filter_groups.enable=true"]
    return [
        Case((f"reward.custom_reward_function.path={exits}",), "reward.custom_reward_function.path"),
        Case(
            (f"reward.custom_reward_function.path={good}", "reward.custom_reward_function.name=nope"),
            "reward.custom_reward_function.name",
        ),
        Case((f"reward.custom_reward_function.path={good}", "reward.custom_reward_function.name=my_score"), None),
        Case(
            (*fg, "algorithm.filter_groups.metric=bogus_metric", "algorithm.gcpo.filter_all_correct=true"),
            "algorithm.filter_groups.metric",
        ),
        Case((*fg, "algorithm.filter_groups.metric=reward", "algorithm.gcpo.filter_all_correct=true"), None),
        Case(
            (
                *fg,
                f"reward.custom_reward_function.path={good}",
                "reward.custom_reward_function.name=my_score",
                "algorithm.filter_groups.metric=my_acc",
                "algorithm.gcpo.filter_all_correct=true",
            ),
            None,
        ),
        Case(
            ("custom_reward_function.name=my_score", "reward.custom_reward_function.path=null"),
            "custom_reward_function.name",
        ),
    ]


def free_form(rng: random.Random) -> list[Case]:
    """Keys inside the blocks verl passes on as they are: accepted whatever their names."""
    blocks = (
        "actor_rollout_ref.rollout.engine_kwargs.vllm",
        "actor_rollout_ref.model.override_config",
        "data.apply_chat_template_kwargs",
        "ray_kwargs.ray_init",
    )
    return [Case((f"+{block}.fuzz_key_{i}={rng.randint(0, 9)}",), None) for i, block in enumerate(blocks * 3)]


def all_cases(tmp: Path) -> list[Case]:
    rng = random.Random(SEED)
    return [
        *unknown_keys(rng, 60),
        *wrong_kinds(rng, 60),
        *rule_values(rng),
        *interpolations(rng, 20),
        *geometry(rng, 45),
        *data_files(tmp),
        *estimator_dependent(rng),
        *reward_cases(tmp),
        *free_form(rng),
    ]


def _recipes(case: Case) -> bool:
    """Whether a case is about the recipe (its blocks or estimators), which verl's stock config does not have."""
    text = " ".join(case.overrides) + str(case.merge or "")
    return any(block in text for block in recipe_blocks()) or any(
        f"adv_estimator={name}" in text for name in ("gcpo", "dqo", "dra_grpo", "copo", "mc_grpo", "diver")
    )


def test_every_generated_mistake_gets_its_one_line_and_every_valid_config_passes(bases, tmp_path):
    cases = all_cases(tmp_path)
    assert len(cases) >= 500  # per config kind: >= 1,500 in all
    unmet, total = [], 0
    for kind, base in bases.items():
        for case in cases:
            if kind == "stock" and _recipes(case):
                continue
            total += 1
            refusal = outcome(base, case, EXTENSIONS[kind])
            named = None if refusal is None else (refusal.key or str(refusal))
            if case.key is None:
                ok = refusal is None
            elif case.other_key_ok:  # not refused by a rule of the key's own value ("<key>: must be ...")
                ok = refusal is None or not str(refusal).startswith(f"{case.key}: must be")
            else:
                ok = refusal is not None and (named == case.key or case.key in str(refusal))
            if not ok:
                unmet.append(f"{kind}: {' '.join(case.overrides)} {case.merge or ''} -> {refusal or 'accepted'}")
    assert total >= 1400 and not unmet, f"{len(unmet)} of {total} cases:\n" + "\n".join(unmet[:40])


def test_the_generators_cover_each_class_with_both_outcomes(tmp_path):
    """The fuzz checks something: each class has refusals, and the accepted cases are there too."""
    rng = random.Random(SEED)
    for cases in (unknown_keys(rng, 20), wrong_kinds(rng, 40), rule_values(rng), interpolations(rng, 5)):
        assert any(case.key and not case.other_key_ok for case in cases)
    assert {case.key is None for case in geometry(rng, 80)} == {True, False}
    assert any(case.key is None for case in data_files(tmp_path))
