"""The compared credits as the engine computes them: an arm is a credit *shape* and a *dose*.

* ``grpo``: verl's GRPO advantage of the rewards (``gcpo_core.credit.advantages.group_normalize``);
* ``shapley``: GCPO's Shapley credit through ``compute_group_credit`` (exact, ``all_correct_scale=group``, the
  project's default), mixed with the reward by the recipe's own ``credit.advantage=mix``: score ``r + λ·φ``, then
  the one normalisation; ``dose=None`` is ``credit.advantage=shapley`` (φ alone, the default GCPO arm ``gcpo_group``);
* ``loo``: the same with ``credit.method=loo`` (``gcpo_loo`` at ``dose=None``);
* ``dqo``: the additive bonus, ``adv_estimator=dqo``'s settings read from the recipe's config layer
  (``recipe.gcpo.settings.EMBEDDING_ESTIMATORS``: ``quality=none``, ``method=loo``, ``advantage=mix``,
  ``all_correct_scale=group``) with ``α = dose`` (the miniature's ``dqo`` arm
  is α = 2 on ±1 rewards);
* ``blend``: ``credit.advantage=blend`` with ``blend_weight = dose`` in (0, 1] (issue 72): ``(1 − w)·A_GRPO +
  w·A_Shapley``, each normalised on its own, so the dose reaches all-correct groups too (``mix``'s does not:
  their reward is constant, so ``r + λφ`` normalises to φ's advantage whatever λ is); ``blend-1`` is
  ``shapley-pure`` bit for bit.

Nothing here re-implements a credit: every number comes from ``gcpo_core``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch

from gcpo_core.credit.advantages import group_normalize
from gcpo_core.credit.compute import compute_group_credit
from gcpo_core.credit.config import CreditConfig
from recipe.gcpo.settings import EMBEDDING_ESTIMATORS  # the config layer: no verl, no Ray

SHAPES = ("grpo", "shapley", "loo", "dqo", "blend")


@dataclass(frozen=True)
class Arm:
    """A credit ``shape`` at a ``dose``: λ of ``r + λ·credit`` (``None``: the credit alone; ``dqo``: α; ``blend``:
    the weight w in (0, 1])."""

    shape: str
    dose: Optional[float] = None

    def __post_init__(self):
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, got {self.shape!r}")
        if self.shape == "grpo" and self.dose is not None:
            raise ValueError("grpo takes no dose")
        if self.shape == "dqo" and self.dose is None:
            raise ValueError("dqo needs its alpha as the dose")
        if self.shape == "blend" and (self.dose is None or self.dose > 1):
            raise ValueError(f"blend needs its weight in (0, 1] as the dose, got {self.dose!r}")
        if self.dose is not None and not self.dose > 0:
            raise ValueError(f"a dose must be positive, got {self.dose!r}")

    @property
    def name(self) -> str:
        if self.shape == "grpo":
            return "grpo"
        return f"{self.shape}-{'pure' if self.dose is None else f'{self.dose:g}'}"

    @classmethod
    def parse(cls, name: str) -> "Arm":
        """``grpo``, ``shapley-0.5``, ``loo-pure``, ``dqo-2`` (the inverse of :attr:`name`)."""
        if name == "grpo":
            return cls("grpo")
        shape, _, dose = name.partition("-")
        if not dose:
            raise ValueError(f"an arm is grpo or SHAPE-DOSE (DOSE a number or 'pure'), got {name!r}")
        return cls(shape, None if dose == "pure" else float(dose))

    def config(self, seed: int = 0) -> Optional[CreditConfig]:
        """The engine's settings of this arm (None for GRPO, which does not call the credit engine)."""
        if self.shape == "grpo":
            return None
        common = dict(all_correct_scale="group", seed=seed)
        if self.shape == "dqo":  # the recipe's own adv_estimator=dqo keys, alpha as credit.mix_coef
            return CreditConfig(**{**EMBEDDING_ESTIMATORS["dqo"], "seed": seed, "mix_coef": self.dose})
        if self.shape == "blend":
            return CreditConfig(method="exact", advantage="blend", blend_weight=self.dose, **common)
        method = "exact" if self.shape == "shapley" else "loo"
        if self.dose is None:
            return CreditConfig(method=method, advantage="shapley", **common)
        return CreditConfig(method=method, advantage="mix", mix_coef=self.dose, **common)


def scores_and_advantages(
    arm: Arm,
    rewards: torch.Tensor,
    embeddings: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    norm_by_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(credit φ, score, advantage) of a padded batch of groups, each (B, G) float64, from the engine.

    ``φ`` is the credit before any mixing (the rewards for GRPO), ``score`` what is normalised (``r``, ``φ`` or
    ``r + λ·φ``; ``blend``: φ), ``advantage`` the group-normalised score (``norm_by_std=False``: only centred,
    Dr.GRPO; ``blend``: the weighted sum of GRPO's and φ's advantages).

    Args:
        rewards: (B, G) verifier rewards (±1 in the miniature).
        embeddings: (B, G, d) the answers' embeddings.
        mask: (B, G) bool; None: every slot is a rollout.
    """
    if mask is None:
        mask = torch.ones(rewards.shape, dtype=torch.bool)
    if arm.shape == "grpo":
        r = rewards.to(torch.float64) * mask
        return r, r, group_normalize(r, mask, norm_by_std=norm_by_std)
    config = arm.config()
    if not norm_by_std:
        config = dataclasses.replace(config, norm_by_std=False)
    credit = compute_group_credit(rewards.to(torch.float64), embeddings, mask, config)
    return credit.shapley, credit.score, credit.advantage
