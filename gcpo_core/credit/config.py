"""Settings of the credit engine, validated on construction.

Every choice the GCPO paper may make differently from this reconstruction is a field here (see
``docs/method.md``); the defaults are the reconstruction's. A wrong value fails naming the field and what it
accepts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

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
        advantage: ``shapley`` (normalise phi) or ``mix`` (normalise ``r + mix_coef * phi``).
        mix_coef: lambda of the ``mix`` mode.
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
    norm_by_std: bool = True
    all_correct_scale: str = "group"
    epsilon: float = 1e-6
    std_floor: float = 0.0
    max_group_size: int = 128

    def __post_init__(self) -> None:
        _one_of("kernel", self.kernel, KERNELS.names())
        _one_of("quality", self.quality, QUALITY_MAPS.names())
        _one_of("method", self.method, list(SHAPLEY_METHODS))
        _one_of("advantage", self.advantage, ADVANTAGE_MODES.names())
        _one_of("all_correct_scale", self.all_correct_scale, list(ALL_CORRECT_SCALES))
        for name in ("antithetic", "stratified", "norm_by_std"):
            if not isinstance(getattr(self, name), bool):
                raise FieldError("credit config", name, f"must be true or false, got {getattr(self, name)!r}")
        _int_in("exact_max_contributors", self.exact_max_contributors, 0, EXACT_LIMIT)
        _int_in("permutations", self.permutations, MIN_PERMUTATIONS, 1_000_000)
        _int_in("seed", self.seed, 0, 2**63 - 1)
        _int_in("max_group_size", self.max_group_size, 1, 4096)
        _finite_at_least("mix_coef", self.mix_coef, 0.0)
        # epsilon = 0 turns a constant group's zero spread into 0 / 0
        _finite_at_least("epsilon", self.epsilon, 0.0, strict=True)
        _finite_at_least("std_floor", self.std_floor, 0.0)
        if self.rbf_bandwidth is not None:
            _finite_at_least("rbf_bandwidth", self.rbf_bandwidth, 0.0, strict=True)


def _one_of(name: str, value: object, allowed: list[str]) -> None:
    if value not in allowed:
        raise FieldError("credit config", name, f"must be one of {allowed}, got {value!r}")


def _int_in(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FieldError("credit config", name, f"must be an integer in [{low}, {high}], got {value!r}")


def _finite_at_least(name: str, value: object, low: float, strict: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if strict else value >= low)
    if not ok:
        raise FieldError(
            "credit config", name, f"must be a finite number {'>' if strict else '>='} {low}, got {value!r}"
        )
