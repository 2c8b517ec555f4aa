"""Per-group diagnostics of the credit assignment, and their batch summary (the ``gcpo/*`` metrics)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gcpo_core.credit.team_value import team_value

# Credit spread (nats) above which a group whose rewards are all equal counts as carrying a GCPO signal.
RESCUE_TOLERANCE = 1e-6


@dataclass
class GroupDiagnostics:
    """One entry per group (shape (B,)).

    Attributes:
        size: rollouts in the group.
        contributing: rollouts with quality > 0 (the players of the Shapley game).
        team_value: ``V(all) = log det(I + L)``.
        effective_solutions: ``exp(entropy)`` of the normalised eigenvalues of L: k orthogonal correct
            solutions give k, any number of copies of one solution gives 1, no correct one gives 0.
        share_entropy: entropy (nats) of the Shapley shares ``phi_i / sum(phi)``; 0 with < 2 contributors.
        all_correct: every rollout contributes (GRPO gives such a group no signal when rewards are equal).
        rescued: the group's rewards are all equal (GRPO advantage 0) but its credit is not.
        mc_stderr: largest Monte-Carlo standard error in the group (0 if exact).
        methods: Shapley method used per group.
        advantage_abs: mean |advantage| over the group's rollouts (0 when not given).
    """

    size: torch.Tensor
    contributing: torch.Tensor
    team_value: torch.Tensor
    effective_solutions: torch.Tensor
    share_entropy: torch.Tensor
    all_correct: torch.Tensor
    rescued: torch.Tensor
    mc_stderr: torch.Tensor
    methods: list[str]
    advantage_abs: torch.Tensor | None = None

    def summary(self, prefix: str = "gcpo/") -> dict[str, float]:
        """Batch-level scalars for a tracker (W&B / console / file)."""
        num_groups = int(self.size.numel())
        if num_groups == 0:
            return {f"{prefix}groups": 0.0}
        with_correct = self.contributing > 0
        all_correct = int(self.all_correct.sum())
        metrics = {
            f"{prefix}groups": float(num_groups),
            f"{prefix}team_value/mean": float(self.team_value.mean()),
            f"{prefix}team_value/max": float(self.team_value.max()),
            f"{prefix}contributing/mean": float(self.contributing.double().mean()),
            f"{prefix}effective_solutions/mean": _mean_where(self.effective_solutions, with_correct),
            f"{prefix}share_entropy/mean": _mean_where(self.share_entropy, self.contributing > 1),
            f"{prefix}all_correct_groups": float(all_correct),
            f"{prefix}rescued_groups": float(self.rescued.sum()),
            f"{prefix}rescued_frac_of_all_correct": float(self.rescued.sum()) / all_correct if all_correct else 0.0,
            f"{prefix}mc_stderr/max": float(self.mc_stderr.max()),
            f"{prefix}singleton_groups": float((self.size == 1).sum()),
        }
        for method in ("exact", "mc", "loo"):
            metrics[f"{prefix}{method}_groups"] = float(sum(m == method for m in self.methods))
        if self.advantage_abs is not None:
            # the balance of the two signals: all-correct groups (diversity only) against mixed ones
            several = self.size > 1
            mixed = several & (self.contributing > 0) & (self.contributing < self.size)
            metrics[f"{prefix}all_correct_adv_abs"] = _rollout_mean(
                self.advantage_abs, self.size, several & self.all_correct
            )
            metrics[f"{prefix}mixed_adv_abs"] = _rollout_mean(self.advantage_abs, self.size, mixed)
        return metrics


def group_diagnostics(
    weighted_kernel: torch.Tensor,
    mask: torch.Tensor,
    contributing: torch.Tensor,
    rewards: torch.Tensor,
    shapley: torch.Tensor,
    stderr: torch.Tensor,
    methods: list[str],
    advantage: torch.Tensor | None = None,
) -> GroupDiagnostics:
    """Diagnostics of a padded batch; all tensor arguments are (B, G) except L (B, G, G)."""
    L = weighted_kernel.to(torch.float64)
    eigenvalues = torch.linalg.eigvalsh(L).clamp_min(0.0) if L.shape[-1] else L.new_zeros(L.shape[0], 0)
    effective = _exp_entropy(eigenvalues)
    shares_entropy = _entropy(shapley.clamp_min(0.0) * contributing)
    rewards = rewards.to(torch.float64)
    size = mask.sum(dim=1)
    big = torch.finfo(torch.float64).max
    reward_spread = _spread(rewards, mask, big)
    credit_spread = _spread(shapley, mask, big)
    all_correct = (contributing.sum(dim=1) == size) & (size > 0)
    return GroupDiagnostics(
        size=size,
        contributing=contributing.sum(dim=1),
        team_value=team_value(L) if L.shape[0] else L.new_zeros(0),
        effective_solutions=effective,
        share_entropy=shares_entropy,
        all_correct=all_correct,
        rescued=(size > 1) & (reward_spread == 0) & (credit_spread > RESCUE_TOLERANCE),
        mc_stderr=stderr.amax(dim=1) if stderr.shape[1] else stderr.new_zeros(stderr.shape[0]),
        methods=list(methods),
        advantage_abs=None
        if advantage is None
        else (advantage.to(torch.float64).abs() * mask).sum(dim=1) / size.clamp_min(1).to(torch.float64),
    )


def _entropy(weights: torch.Tensor) -> torch.Tensor:
    total = weights.sum(dim=-1, keepdim=True)
    p = torch.where(total > 0, weights / total.clamp_min(1e-300), torch.zeros_like(weights))
    return -torch.where(p > 0, p * torch.log(p.clamp_min(1e-300)), torch.zeros_like(p)).sum(dim=-1)


def _exp_entropy(weights: torch.Tensor) -> torch.Tensor:
    has_mass = weights.sum(dim=-1) > 0
    return torch.where(has_mass, torch.exp(_entropy(weights)), torch.zeros_like(has_mass, dtype=weights.dtype))


def _spread(values: torch.Tensor, mask: torch.Tensor, big: float) -> torch.Tensor:
    if values.shape[1] == 0:
        return values.new_zeros(values.shape[0])
    high = torch.where(mask, values, torch.full_like(values, -big)).amax(dim=1)
    low = torch.where(mask, values, torch.full_like(values, big)).amin(dim=1)
    return torch.where(mask.any(dim=1), high - low, torch.zeros_like(high))


def _rollout_mean(per_group_mean: torch.Tensor, size: torch.Tensor, where: torch.Tensor) -> float:
    weight = (size * where).to(torch.float64)
    return float((per_group_mean * weight).sum() / weight.sum()) if bool(where.any()) else 0.0


def _mean_where(values: torch.Tensor, where: torch.Tensor) -> float:
    return float(values[where].mean()) if bool(where.any()) else 0.0
