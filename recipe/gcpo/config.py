"""The recipe's config layer: what GCPO adds to verl's config, typed, and the builders that parse it.

Every recipe module reads its settings through here, once per process: the driver's pre-flight
(:mod:`recipe.gcpo.preflight`) and the trainer each parse ``algorithm.*`` once; the parsed objects then travel as
they are (to the credit actors through Ray, to the estimator with each step's credit). A wrong value fails in one
line naming its full key path (``algorithm.gcpo.credit.method: must be one of [...]``) and what it accepts; an
unknown key fails naming the closest known one. No Ray or verl import: this module is the bottom of the recipe's
layers (config -> estimator, credit actor, baselines -> trainer, pre-flight -> entry point; see
``tests/gcpo_core/test_layering.py``).

The GRPO-style normalisation switch is verl's own ``algorithm.norm_adv_by_std_in_grpo``, shared with GRPO so that
the two estimators are configured alike.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, TypeVar

from omegaconf import DictConfig, OmegaConf

from gcpo_core.credit.config import TRUE_FALSE, CreditConfig, FieldError, Rule, check_fields, integer, number
from gcpo_core.encoding.encoder import EncoderConfig
from recipe.gcpo.credit_shards import SHARDS

GCPO_ESTIMATOR = "gcpo"
# verl's trainer mode the GCPO trainer runs in: the recipe's entry point builds GCPOTrainer (verl's
# PPOTrainerSync plus the credit actor) for it, so every mode-dependent branch of verl's trainer is the sync one
SYNC_TRAINER_MODE = "sync"
# Estimators that need the responses' embeddings, hence the GCPO trainer and its credit actor; each fixes some
# algorithm.gcpo.credit keys (the rest stay configurable, e.g. DQO's alpha is credit.mix_coef).
EMBEDDING_ESTIMATORS: dict[str, dict] = {
    GCPO_ESTIMATOR: {},
    # DQO-style additive DPP bonus (arXiv 2509.04784): reward + alpha * leave-one-out log-det diversity of the
    # unweighted embeddings (correctness plays no part in the diversity term), normalised as GRPO normalises a
    # reward: every group by its own std, so a group of equal rewards keeps its diversity term at GRPO's scale
    "dqo": {"quality": "none", "method": "loo", "advantage": "mix", "all_correct_scale": "group"},
    # DRA-GRPO (arXiv 2505.09655): reward / (1 + summed similarity to the other completions), then each group
    # by its own std with epsilon 1e-4, as the official code (xiwenc1/DRA-GRPO, grpo_trainer.py) does
    "dra_grpo": {"advantage": "dra", "all_correct_scale": "group", "epsilon": 1e-4},
}
# reward_extra_info key written by recipe.gcpo.reward: constant within a group exactly when GCPO has no signal
GCPO_FILTER_METRIC = "gcpo_signal"
GCPO_KEYS = {"encoder", "credit", "actor", "filter_all_correct", "dump"}

Section = TypeVar("Section")


class ConfigError(ValueError):
    """A config (or command line) the recipe refuses at start-up, on one line: ``<key>: <problem>``, the key path at
    fault named once, here, and the problem saying why and what to do (the problem alone when no single key is at
    fault: ``key`` None). The entry point turns it into ``error: <message>``, exit status 2; a ValueError, which it
    is, reads the same everywhere else."""

    def __init__(self, key: Optional[str], problem: str):
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem


# ---- the start-up checks as data: a Check is one table entry (the key at fault, what must hold, the problem); the
# facts it tests are read from the config (or this machine) once each, by name, on first use, so a key is read in
# one place however many checks test it, and a message fills its fields from the same facts


class Facts(dict):
    """The facts of one config: ``facts[name]`` is ``readers[name](facts)``, computed on first use and kept
    (``facts.config``: the config). A reader may read other facts; one that raises :class:`ConfigError` refuses
    the config where it is first read."""

    def __init__(self, config: DictConfig, readers: Mapping[str, Callable[["Facts"], Any]]):
        super().__init__()
        self.config, self.readers = config, readers

    def __missing__(self, name: str) -> Any:
        value = self[name] = self.readers[name](self)
        return value


class Check(NamedTuple):
    """One start-up check: where ``holds(facts)`` is false, the config is refused as ``<key>: <problem>``, both
    templates filled from the facts (``str.format_map``). ``key`` None: no single key is at fault."""

    key: str | None
    holds: Callable[[Facts], bool]
    problem: str


def run_checks(checks: Iterable[Check], facts: Facts) -> None:
    """Each check of ``checks`` in order.

    Raises:
        ConfigError: the first that does not hold.
    """
    for check in checks:
        if not check.holds(facts):
            key = None if check.key is None else check.key.format_map(facts)
            raise ConfigError(key, check.problem.format_map(facts))


def plain(value: Any) -> Any:
    """A config node as plain Python (resolved), anything else as it is."""
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def check_known(key_path: str, block: Mapping, allowed: set[str]) -> None:
    """Refuse keys of ``block`` outside ``allowed``, naming the closest known one.

    Raises:
        ConfigError: ``<key_path>: unknown key(s) [...] (did you mean ...?); known: [...]``.
    """
    unknown = sorted(set(block) - allowed)
    if unknown:
        close = [match for key in unknown for match in difflib.get_close_matches(key, sorted(allowed), n=1)]
        hint = f" (did you mean {', '.join(repr(m) for m in close)}?)" if close else ""
        raise ConfigError(key_path, f"unknown key(s) {unknown}{hint}; known: {sorted(allowed)}")


def build_section(cls: type[Section], values: Optional[Mapping[str, Any]], key_path: str) -> Section:
    """The dataclass ``cls`` from the config block at ``key_path`` (None: the defaults).

    Raises:
        ConfigError: a field the dataclass refused (its :class:`FieldError` as ``<key_path>.<field>: <problem>``), an
            unknown key, or a block that is not a mapping.
    """
    values = plain(values)
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise ConfigError(key_path, f"must be a mapping, got {values!r}")
    check_known(key_path, values, {f.name for f in dataclasses.fields(cls)})
    try:
        return cls(**values)
    except FieldError as err:
        raise ConfigError(f"{key_path}.{err.field}", err.problem) from None


def algorithm_block(algorithm: Any, name: str) -> Optional[Mapping[str, Any]]:
    """``algorithm.<name>`` as plain Python (None when absent); ``algorithm`` may be None (verl calls without)."""
    return None if algorithm is None else plain(algorithm.get(name))


@dataclass(frozen=True)
class DumpSettings:
    """Credit dumps for ``gcpo report`` (``algorithm.gcpo.dump``): every ``every_n_steps`` steps, up to
    ``max_groups`` groups, in ``directory``."""

    every_n_steps: int = 0
    max_groups: int = 16
    directory: str = "gcpo_dumps"

    def __post_init__(self) -> None:
        check_fields(self, "dump", every_n_steps=integer(0, note=" (0: off)"), max_groups=integer(1))


@dataclass(frozen=True)
class CreditActorOptions:
    """Resources and failure handling of the credit actors (``algorithm.gcpo.actor``).

    Attributes:
        num_gpus: GPU fraction each actor takes from its placement-group bundle (0 = CPU only).
        num_cpus: CPUs each actor reserves from its bundle; its tokenizer and torch threads are sized from them.
        shards: how many actors embed a batch side by side: ``auto`` (one per GPU bundle of verl's global pool;
            one actor on a CPU-only run), ``per_gpu``, ``per_node`` (bundle 0 of each node), or a count
            (1: a single actor embeds the whole batch).
        max_restarts: restarts of a dead actor before the run fails.
        max_task_retries: re-runs of an interrupted call.
        timeout_s: longest wait for one batch.
        startup_timeout_s: longest wait for the actors to be scheduled and load the encoder.
        prefetch: embed each batch as soon as it is generated, while verl computes log-probabilities (the
            trainer calls ``CreditActor.start_prefetch``); the advantage step then only computes credit.
    """

    num_gpus: float = 0.1
    num_cpus: float = 1.0
    shards: int | str = "auto"
    max_restarts: int = 3
    max_task_retries: int = 3
    timeout_s: float = 600.0
    startup_timeout_s: float = 600.0
    prefetch: bool = True

    def __post_init__(self) -> None:
        retries, wait = integer(-1, note=" (-1: unlimited)"), number(0, strict=True, finite=False)
        check_fields(
            self,
            "credit actor",
            prefetch=TRUE_FALSE,
            num_gpus=number(0, 64),
            num_cpus=(number(0, 64), Rule(lambda n: n == 0 or n >= 1, "0 or >= 1 (the tokenizer needs a CPU)")),
            shards=SHARDS,
            max_restarts=retries,
            max_task_retries=retries,
            timeout_s=wait,
            startup_timeout_s=wait,
        )


@dataclass(frozen=True)
class GCPOSettings:
    """Everything GCPO adds to verl's config.

    Attributes:
        encoder: the sentence encoder (``algorithm.gcpo.encoder.*``).
        credit: the credit engine (``algorithm.gcpo.credit.*``); ``norm_by_std`` comes from
            ``algorithm.norm_adv_by_std_in_grpo``, and the keys the estimator fixes are applied.
        actor: the Ray credit actor's resources and failure handling (``algorithm.gcpo.actor.*``).
        filter_all_correct: accept DAPO group filtering on a metric that drops all-correct groups (the groups
            where GCPO's extra signal lives). Off: such a filter is refused at start-up.
        dump: credit dumps for reports (``algorithm.gcpo.dump.*``).
    """

    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    credit: CreditConfig = field(default_factory=CreditConfig)
    actor: CreditActorOptions = field(default_factory=CreditActorOptions)
    filter_all_correct: bool = False
    dump: DumpSettings = field(default_factory=DumpSettings)

    @classmethod
    def from_algorithm_config(
        cls, algorithm: DictConfig | Mapping[str, Any], estimator: str = GCPO_ESTIMATOR
    ) -> "GCPOSettings":
        """Parse ``algorithm.gcpo`` (absent: defaults), with the keys ``estimator`` fixes applied."""
        block = algorithm_block(algorithm, "gcpo") or {}
        if not isinstance(block, Mapping):
            raise ConfigError("algorithm.gcpo", f"must be a mapping, got {block!r}")
        check_known("algorithm.gcpo", block, GCPO_KEYS)
        filter_all_correct = block.get("filter_all_correct", False)
        if not isinstance(filter_all_correct, bool):
            raise ConfigError("algorithm.gcpo.filter_all_correct", f"must be true or false, got {filter_all_correct!r}")
        return cls(
            encoder=build_section(EncoderConfig, block.get("encoder"), "algorithm.gcpo.encoder"),
            credit=credit_config(algorithm, block.get("credit"), EMBEDDING_ESTIMATORS.get(estimator, {})),
            actor=build_section(CreditActorOptions, block.get("actor"), "algorithm.gcpo.actor"),
            filter_all_correct=filter_all_correct,
            dump=build_section(DumpSettings, block.get("dump"), "algorithm.gcpo.dump"),
        )


def credit_config(algorithm: Any, block: Optional[Mapping[str, Any]], fixed: Mapping[str, Any]) -> CreditConfig:
    """``algorithm.gcpo.credit`` with ``norm_by_std`` from verl's ``algorithm.norm_adv_by_std_in_grpo`` and the
    keys an estimator fixes (``fixed``) applied over the user's."""
    credit = plain(block) or {}
    if not isinstance(credit, Mapping):
        raise ConfigError("algorithm.gcpo.credit", f"must be a mapping, got {credit!r}")
    if "norm_by_std" in credit:
        raise ConfigError(
            "algorithm.gcpo.credit.norm_by_std", "not a key: use verl's algorithm.norm_adv_by_std_in_grpo"
        )
    # the user's keys: every field but norm_by_std, which is verl's switch
    check_known("algorithm.gcpo.credit", credit, {f.name for f in dataclasses.fields(CreditConfig)} - {"norm_by_std"})
    norm_by_std = algorithm.get("norm_adv_by_std_in_grpo", True)
    if not isinstance(norm_by_std, bool):  # bool("false") is True
        raise ConfigError("algorithm.norm_adv_by_std_in_grpo", f"must be true or false, got {norm_by_std!r}")
    defaults = {f.name: f.default for f in dataclasses.fields(CreditConfig)}
    for key, value in fixed.items():  # a value of the user's the estimator would replace: refused, not dropped
        if credit.get(key, value) not in (value, defaults.get(key)):
            estimator = algorithm.get("adv_estimator")
            raise ConfigError(
                f"algorithm.gcpo.credit.{key}",
                f"{credit[key]!r}: algorithm.adv_estimator={estimator} fixes it to {value!r}; leave it out",
            )
    credit = {**credit, "norm_by_std": norm_by_std}
    credit.update(fixed)
    return build_section(CreditConfig, credit, "algorithm.gcpo.credit")


class TrainerNeed(NamedTuple):
    """A setting only the GCPO trainer serves: the ``setting`` as written, what the trainer ``does`` for it, and
    ``instead``: advice for running without it ("" when there is none)."""

    setting: str
    does: str
    instead: str = ""


def estimator_need(estimator: str) -> TrainerNeed:
    """Why an estimator whose inputs only the GCPO trainer computes (an embedding one, or ``diver``, whose shaped
    reward needs the response texts) needs that trainer."""
    inputs = (
        "decodes the responses for DIVER's diversity bonus"
        if estimator == "diver"
        else "embeds the responses and computes their credit"
    )
    return TrainerNeed(
        f"algorithm.adv_estimator={estimator}",
        f"{inputs} before the advantages (verl's stock trainers give an estimator neither)",
    )


def recipe_trainer_problem(need: TrainerNeed, found: str) -> str:
    """What is wrong with a setting run without the GCPO trainer (``found``: what runs instead), the setting itself
    not named: the start-up check names its key (:class:`ConfigError`), :func:`recipe_trainer_message` the whole
    setting."""
    return (
        f"needs the GCPO trainer, which {need.does}: launch with `python -m recipe.gcpo.main_gcpo` (or a launcher "
        f"in scripts/), which runs the recipe's trainer as verl's V1 sync trainer (trainer.use_v1=true, "
        f"trainer.v1.trainer_mode={SYNC_TRAINER_MODE}: verl's defaults){need.instead} (found: {found})."
    )


def recipe_trainer_message(need: TrainerNeed, found: str) -> str:
    """The one message for a setting run without the GCPO trainer, found after start-up (by the estimator or the
    trainer)."""
    return f"{need.setting} {recipe_trainer_problem(need, found)}"


# ---- start-up checks every estimator or loss of its kind shares (listed by the baselines' modules and
# recipe.gcpo.preflight.recipe_blocks, whose FACTS read what they test)


def only_if(applies: Callable[[Facts], bool], checks: Iterable[Check]) -> tuple[Check, ...]:
    """``checks``, each holding wherever ``applies(facts)`` is false."""
    return tuple(check._replace(holds=lambda f, holds=check.holds: not applies(f) or holds(f)) for check in checks)


# an estimator that compares the rollouts of a prompt needs two, one output each (``{estimator}``: the run's)
ROLLOUT_GROUP_CHECKS: tuple[Check, ...] = (
    Check(
        "actor_rollout_ref.rollout.n",
        lambda f: f["rollout_n"] >= 2,
        "{estimator} credits rollouts within a group, so it needs at least 2, got {rollout_n}",
    ),
    Check(
        "actor_rollout_ref.rollout.multi_turn.enable",
        lambda f: not f["multi_turn"],
        "true is not supported: algorithm.adv_estimator={estimator} credits one output per rollout, and "
        "multi-turn agent loops put several outputs under one rollout",
    ),
)


def actor_loss_check(selected: str, what: str) -> Check:
    """``selected`` gives the actor workers ``what``, their loss (``set_loss_fn``): distillation would replace it."""
    return Check(
        "distillation.enabled",
        lambda f: not f["distillation"],
        f"true makes the actor run the distillation loss instead of {what}, which {selected} gives it: use one or the "
        "other",
    )
