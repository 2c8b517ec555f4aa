"""Settings of the credit engine, validated on construction.

Every choice the GCPO paper may make differently from this reconstruction is a field here (see
``docs/method.md``); the defaults are the reconstruction's. A wrong value fails naming the field and what it
accepts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Optional

from gcpo_core.credit.advantages import ADVANTAGE_MODES, ALL_CORRECT_SCALES
from gcpo_core.credit.kernels import KERNELS
from gcpo_core.credit.quality import QUALITY_MAPS
from gcpo_core.credit.shapley.dispatch import SHAPLEY_METHODS
from gcpo_core.credit.shapley.exact import EXACT_LIMIT
from gcpo_core.credit.shapley.monte_carlo import MIN_PERMUTATIONS


class FieldError(ValueError):
    """A setting's bad value: which ``field``, and the ``problem`` (what it accepts, what it got).

    ``str()`` reads ``"<section>: <field> <problem>"``; a caller that knows where the value came from (the recipe's
    config builders: a Hydra key path) names it as ``f"{path}.{field}: {problem}"`` without rewriting the text.
    """

    def __init__(self, section: str, field: str, problem: str):
        super().__init__(f"{section}: {field} {problem}")
        self.section, self.field, self.problem = section, field, problem

    def __reduce__(self):  # crosses process boundaries (Ray) with its three parts
        return type(self), (self.section, self.field, self.problem)


class Rule(NamedTuple):
    """A setting's rule: a value for which ``holds(value)`` is false is refused as ``must be <must_be>, got <value>``."""

    holds: Callable[[Any], bool]
    must_be: str

    def check(self, section: str, field: str, value: Any) -> None:
        if not self.holds(value):
            raise FieldError(section, field, f"must be {self.must_be}, got {value!r}")


def check_fields(settings: Any, section: str, **rules: Rule | tuple[Rule, ...]) -> None:
    """Each field of ``settings`` named in ``rules`` against its rule (or rules), in order; raises the first
    :class:`FieldError`."""
    for name, field_rules in rules.items():
        for rule in (field_rules,) if isinstance(field_rules, Rule) else field_rules:
            rule.check(section, name, getattr(settings, name))


TRUE_FALSE = Rule(lambda v: isinstance(v, bool), "true or false")


def one_of(names: Iterable) -> Rule:
    names = list(names)
    return Rule(lambda v: v in names, f"one of {names}")


def integer(low: int, high: Optional[int] = None, note: str = "") -> Rule:
    """An integer in [``low``, ``high``] (no ``high``: >= ``low``, the ``note`` after it)."""
    return Rule(
        lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v and (high is None or v <= high),
        f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}{note}",
    )


def number(low: Optional[float] = None, high: Optional[float] = None, strict: bool = False, finite=True) -> Rule:
    """A number in [``low``, ``high``] (``strict``: ``low`` excluded), finite unless ``finite=False`` (inf passes a
    lower bound alone); read ``in [low, high]``, ``a finite number >= low`` or, not finite, ``> low``."""
    bound = "" if low is None else f"{'>' if strict else '>='} {low}"
    if high is not None:
        bound = f"in {'(' if strict else '['}{low}, {high}]"
    elif finite:
        bound = f"a finite number {bound}".rstrip()

    def holds(v: Any) -> bool:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or (finite and not math.isfinite(v)):
            return False
        return (low is None or (v > low if strict else v >= low)) and (high is None or v <= high)

    return Rule(holds, bound)


def optional(rule: Rule, note: str = "") -> Rule:
    """``rule``, or null (``note`` after its message)."""
    return Rule(lambda v: v is None or rule.holds(v), rule.must_be + note)


@dataclass(frozen=True)
class CreditConfig:
    """How rewards and embeddings become credit and advantages.

    Attributes:
        kernel: similarity of rollouts, ``cosine`` or ``rbf``.
        rbf_bandwidth: sigma of the RBF kernel; None = median heuristic over the batch.
        quality: reward -> quality mapping: ``clip`` (the reward clipped to [0, 1]: +-1 and 0/1 rewards stay
            exactly binary, a shaped reward such as DAPO's overlong penalty scales q), ``binary`` (correct iff
            reward > 0), ``sqrt`` (sqrt of the clipped reward, so that L_ii = r) or ``none`` (ablations).
        method: Shapley estimator: ``auto``, ``exact``, ``mc`` or ``loo`` (leave-one-out ablation).
        exact_max_contributors: ``auto`` solves a group exactly when it has at most this many distinct correct
            rollouts (more with copies: its collapsed game has at most 2^this coalitions), else by Monte Carlo.
        permutations: Monte-Carlo permutations per group (>= 4; split into >= 4 independent units).
        antithetic: allow the reverse of every Monte-Carlo permutation in a unit.
        stratified: allow a cyclic half-turn of every Monte-Carlo permutation in a unit.
        seed: seeds the Monte-Carlo permutations.
        advantage: ``shapley`` (normalise phi), ``mix`` (normalise ``r + mix_coef * phi``), ``blend``
            (``(1 - blend_weight) * GRPO's advantage + blend_weight * shapley's``: a dose that reaches every group)
            or ``dra`` (a baseline's score).
        mix_coef: lambda of the ``mix`` mode.
        blend_weight: w in [0, 1] of the ``blend`` mode: 0 is GRPO's advantage, 1 the ``shapley`` mode's, each
            exactly; between them every group's advantage, all-correct ones included, moves linearly.
        norm_by_std: scale by a std (GRPO) or only centre (Dr.GRPO).
        all_correct_scale: how groups whose rewards are all equal (all correct) are scaled: ``group`` (by their
            own std: GRPO's normalisation applied to the credit, the paper's drop-in reading; the default) or
            ``batch`` (by the root-mean-square score std of the batch's reward-mixed groups: their advantages
            measure how much diversity is at stake against right-vs-wrong, a push far smaller than GRPO's).
        epsilon: keeps the normalisation finite when a group's scores barely differ (> 0).
        std_floor: no group is scaled by less than this (score units); 0 = no floor.
        max_group_size: larger groups are rejected (they signal a grouping bug, and bound memory).
    """

    kernel: str = "cosine"
    rbf_bandwidth: Optional[float] = None
    quality: str = "clip"
    method: str = "auto"
    exact_max_contributors: int = 16
    permutations: int = 64
    antithetic: bool = True
    stratified: bool = True
    seed: int = 0
    advantage: str = "shapley"
    mix_coef: float = 1.0
    blend_weight: float = 0.5
    norm_by_std: bool = True
    all_correct_scale: str = "group"
    epsilon: float = 1e-6
    std_floor: float = 0.0
    max_group_size: int = 128

    def __post_init__(self) -> None:
        check_fields(
            self,
            "credit config",
            kernel=one_of(KERNELS.names()),
            quality=one_of(QUALITY_MAPS.names()),
            method=one_of(SHAPLEY_METHODS),
            advantage=one_of(ADVANTAGE_MODES.names()),
            all_correct_scale=one_of(ALL_CORRECT_SCALES),
            antithetic=TRUE_FALSE,
            stratified=TRUE_FALSE,
            norm_by_std=TRUE_FALSE,
            exact_max_contributors=integer(0, EXACT_LIMIT),
            permutations=integer(MIN_PERMUTATIONS, 1_000_000),
            seed=integer(0, 2**63 - 1),
            max_group_size=integer(1, 4096),
            mix_coef=number(0.0),
            blend_weight=number(0.0, 1.0),
            epsilon=number(0.0, strict=True),  # epsilon = 0 turns a constant group's zero spread into 0 / 0
            std_floor=number(0.0),
            rbf_bandwidth=optional(number(0.0, strict=True)),
        )
