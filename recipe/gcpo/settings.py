"""Everything the recipe adds to verl's config, typed, and parsed once per process: the GCPO block
(:class:`GCPOSettings`), each baseline's block (:class:`Baseline`, registered in :data:`BASELINES` by its module in
``recipe/gcpo/baselines/``; docs/training.md#adding-a-baseline), and all of them at once (:meth:`RecipeSettings.parse`).

The driver's start-up checks (:mod:`recipe.gcpo.checks`), the GCPO trainer and, under verl's stock trainers,
:mod:`recipe.gcpo.register` parse the settings with it, so a value the trainer would refuse after Ray is up is refused
at start-up under every estimator; the parsed objects then travel as they are (to the credit actors through Ray, to
the estimator with each step's credit). A wrong value fails in one line naming its full key path
(``algorithm.gcpo.credit.method: must be one of [...]``); an unknown key names the closest known one. No Ray or verl
import: this module is the bottom of the recipe's layers (``tests/gcpo_core/test_layering.py``). The GRPO-style
normalisation switch is verl's own ``algorithm.norm_adv_by_std_in_grpo``, shared with GRPO.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Optional, TypeVar

from omegaconf import DictConfig

from gcpo_core.credit.config import TRUE_FALSE, CreditConfig, FieldError, Rule, check_fields, integer, number
from gcpo_core.encoding.encoder import EncoderConfig
from recipe.gcpo.credit_shards import SHARDS
from verl_preflight.errors import ConfigError, check_known, plain

GCPO_ESTIMATOR = "gcpo"
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
    ``max_groups`` groups, in ``directory``; the first ``table_groups`` of them also in the run's dashboard (W&B's
    table and figures, TensorBoard's images, where those loggers are on)."""

    every_n_steps: int = 0
    max_groups: int = 16
    directory: str = "gcpo_dumps"
    table_groups: int = 4

    def __post_init__(self) -> None:
        check_fields(
            self,
            "dump",
            every_n_steps=integer(0, note=" (0: off)"),
            max_groups=integer(1),
            table_groups=integer(0, note=" (0: none)"),
        )


@dataclass(frozen=True)
class CreditActorOptions:
    """Resources and failure handling of the credit actors (``algorithm.gcpo.actor``).

    Attributes:
        num_gpus: GPU fraction each actor takes from its placement-group bundle (0 = CPU only): a bundle holds one
            GPU, a third of which each of verl's colocated worker groups takes.
        num_cpus: CPUs each actor reserves from its bundle; its tokenizer and torch threads are sized from them.
        shards: how many actors embed a batch side by side: ``auto`` (one per GPU bundle of verl's global pool;
            one actor on a CPU-only run), ``per_gpu``, ``per_node`` (bundle 0 of each node), or a count
            (1: a single actor embeds the whole batch).
        max_restarts: restarts of a dead actor before the run fails.
        max_task_retries: re-runs of an interrupted call.
        timeout_s: longest wait for one batch (seconds, finite: an actor that hangs must stop the run).
        startup_timeout_s: longest wait for the actors to be scheduled and load the encoder (seconds, finite).
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
        retries, wait = integer(-1, note=" (-1: unlimited)"), number(0, strict=True)
        check_fields(
            self,
            "credit actor",
            prefetch=TRUE_FALSE,
            num_gpus=number(0, 1),  # a fraction of one GPU of a placement-group bundle
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


def recipe_trainer_message(need: TrainerNeed, found: str) -> str:
    """The one message for a setting run without the GCPO trainer (``found``: what runs instead), found where verl's
    own entry point builds its trainer (recipe/gcpo/register.py) or by the estimator."""
    return (
        f"{need.setting} needs the GCPO trainer, which {need.does}: launch with `python -m recipe.gcpo.main_gcpo` (or "
        "a launcher in scripts/), which runs the recipe's trainer in each of verl's V1 trainer modes "
        f"(trainer.use_v1=true, trainer.v1.trainer_mode: sync, colocate_async, separate_async){need.instead} (found: "
        f"{found})."
    )


# ---- start-up rules every estimator or loss of its kind shares (recipe.gcpo.checks, the baselines' checks)


def check_rollout_groups(config: DictConfig, estimator: str) -> None:
    """An estimator that compares the rollouts of a prompt needs two, one output each."""
    rollout = config.actor_rollout_ref.rollout
    if rollout.n < 2:
        raise ConfigError(
            "actor_rollout_ref.rollout.n",
            f"{estimator} credits rollouts within a group, so it needs at least 2, got {rollout.n}",
        )
    if (rollout.get("multi_turn") or {}).get("enable"):
        raise ConfigError(
            "actor_rollout_ref.rollout.multi_turn.enable",
            f"true is not supported: algorithm.adv_estimator={estimator} credits one output per rollout, and "
            "multi-turn agent loops put several outputs under one rollout",
        )


def check_actor_loss(config: DictConfig, selected: str, what: str) -> None:
    """``selected`` gives the actor workers ``what``, their loss (``set_loss_fn``): distillation would replace it."""
    if (config.get("distillation") or {}).get("enabled"):
        raise ConfigError(
            "distillation.enabled",
            f"true makes the actor run the distillation loss instead of {what}, which {selected} gives it: use one or "
            "the other",
        )


# ---- the baselines' blocks: one Baseline each, registered by its module (recipe/gcpo/baselines/<name>.py)


@dataclass(frozen=True)
class Baseline:
    """A baseline: its block ``algorithm.<name>`` and what it adds to the driver and the trainer.

    Attributes:
        name: the block's name; the block is parsed into ``settings``, a frozen dataclass that validates itself
            (:func:`build_section`), under every estimator, so a typo fails in any run.
        settings: that dataclass (its defaults are the only ones in code; the YAML writes them out for readers).
        estimator: the ``algorithm.adv_estimator`` that selects it (its module registers that estimator with
            verl's ``register_adv_est``); None: selected by the block's ``enable``.
        needs_trainer: ``(settings) -> TrainerNeed | None``: the setting only the GCPO trainer serves.
        check: ``(config, settings, recipe) -> None``: its start-up checks when selected (``recipe``: the run's
            :class:`RecipeSettings`); raises :class:`~verl_preflight.ConfigError`.
        loss_fn: ``(config, settings) -> loss | None``: the actor workers' loss (verl's ``set_loss_fn``).
        before_balance: ``(trainer, settings, batch, metrics) -> batch``: before verl balances the batch and
            computes the old log-probabilities.
        advantage: ``(trainer, settings, batch, metrics, verl_step) -> batch``: the advantage step, around
            ``verl_step()``, verl's own; only a baseline selected by its estimator has one (one per run).
    """

    name: str
    settings: type
    estimator: Optional[str] = None
    needs_trainer: Callable[[Any], Optional[TrainerNeed]] = lambda settings: None
    check: Optional[Callable[[DictConfig, Any, "RecipeSettings"], None]] = None
    loss_fn: Optional[Callable[[Any, Any], Optional[Callable]]] = None
    before_balance: Optional[Callable[..., Any]] = None
    advantage: Optional[Callable[..., Any]] = None

    @property
    def block(self) -> str:
        return f"algorithm.{self.name}"

    def parse(self, algorithm: Any) -> Any:
        """Parse ``algorithm.<name>`` (absent, or no ``algorithm`` at all: the defaults)."""
        settings = build_section(self.settings, algorithm_block(algorithm, self.name), self.block)
        if algorithm is not None:
            try:  # remembered for the estimator's per-step look-up (block_settings), for as long as the node lives
                ref = weakref.ref(algorithm, lambda _, key=(id(algorithm), self.name): _parsed.pop(key, None))
            except TypeError:  # a plain dict: nothing to remember it by
                return settings
            _parsed[(id(algorithm), self.name)] = (ref, settings)
        return settings

    def selected(self, estimator: str, settings: Any) -> bool:
        """Whether a run with ``algorithm.adv_estimator=estimator`` and these settings uses the baseline."""
        return estimator == self.estimator if self.estimator is not None else bool(settings.enable)


# the baselines, by name, in registration order: filled as recipe.gcpo.baselines imports their modules
BASELINES: dict[str, Baseline] = {}
_parsed: dict[tuple[int, str], tuple[weakref.ref, Any]] = {}


def register(baseline: Baseline) -> Baseline:
    """Add ``baseline`` to :data:`BASELINES` (its name once)."""
    if baseline.name in BASELINES:
        raise ValueError(f"a baseline named {baseline.name!r} is registered already")
    if baseline.advantage is not None and baseline.estimator is None:
        raise ValueError(f"baseline {baseline.name!r}: an advantage step needs the estimator that selects it")
    BASELINES[baseline.name] = baseline
    return baseline


def block_settings(baseline: Baseline, algorithm: Any) -> Any:
    """``baseline``'s settings for this ``algorithm`` config, as :meth:`Baseline.parse` parsed them for it (in a
    run, once, as the trainer was built); parsed here for a config nothing parsed yet. verl hands a registered
    estimator the same ``algorithm`` node every step, and nothing changes it after start-up."""
    hit = _parsed.get((id(algorithm), baseline.name))
    if hit is not None and hit[0]() is algorithm:
        return hit[1]
    return baseline.parse(algorithm)


def _registered() -> dict[str, Baseline]:
    if not BASELINES:  # parsed without them, a run would ignore every baseline's block
        raise RuntimeError("no baseline is registered: import recipe.gcpo.baselines before parsing the settings")
    return BASELINES


def recipe_estimators() -> tuple[str, ...]:
    """Every estimator the recipe registers in verl's registry (the driver checks a name against these and verl's
    own without importing the trainer)."""
    return (*EMBEDDING_ESTIMATORS, *(b.estimator for b in _registered().values() if b.estimator))


def recipe_blocks() -> tuple[str, ...]:
    """The recipe's blocks of verl's config, each parsed key by key by :meth:`RecipeSettings.parse`."""
    return ("algorithm.gcpo", *(b.block for b in _registered().values()))


@dataclass(frozen=True)
class RecipeSettings:
    """Every block the recipe adds to verl's config, parsed once per process.

    Attributes:
        estimator: ``algorithm.adv_estimator``.
        gcpo: ``algorithm.gcpo`` when the estimator embeds the responses (gcpo, dqo, dra_grpo), else None (the
            block is parsed regardless).
        credit: ``algorithm.gcpo.credit`` as this estimator reads it (GCPO's credit; DIVER's normalisation).
        blocks: every registered baseline's block, parsed, by name.
    """

    estimator: str
    gcpo: Optional[GCPOSettings]
    credit: CreditConfig
    blocks: Mapping[str, Any]

    @classmethod
    def parse(cls, config: DictConfig) -> "RecipeSettings":
        """Parse every recipe block (a typo fails even in a block the run does not use).

        Raises:
            ConfigError: a bad value or an unknown key, naming its key path.
        """
        algorithm = config.algorithm
        estimator = algorithm.adv_estimator
        gcpo = GCPOSettings.from_algorithm_config(algorithm, estimator)
        return cls(
            estimator=estimator,
            gcpo=gcpo if estimator in EMBEDDING_ESTIMATORS else None,
            credit=gcpo.credit,
            blocks={name: baseline.parse(algorithm) for name, baseline in _registered().items()},
        )

    @property
    def selected(self) -> list[tuple[Baseline, Any]]:
        """The baselines this run uses, with their settings, in registration order."""
        return [
            (BASELINES[name], settings)
            for name, settings in self.blocks.items()
            if BASELINES[name].selected(self.estimator, settings)
        ]

    def trainer_need(self) -> Optional[TrainerNeed]:
        """The first setting that only the GCPO trainer serves (None: verl's own trainers serve it all)."""
        if self.gcpo is not None:
            return estimator_need(self.estimator)
        for baseline, settings in self.selected:
            need = baseline.needs_trainer(settings)
            if need is not None:
                return need
        return None
