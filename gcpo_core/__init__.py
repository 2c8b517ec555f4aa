"""gcpo_core: the framework-free GCPO credit engine (torch + numpy only; never verl or ray).

GCPO (Group Cooperative Policy Optimization) treats the G rollouts of a prompt as a team whose value is the
volume ``log det(I + L)`` of their quality-weighted embeddings, and credits each rollout with its Shapley
value of that team value.
"""

from gcpo_core._lazy import lazy_exports

__version__ = "0.1.0"

# what users call, from the packages below (loaded on first use, so that importing gcpo_core imports no torch)
_EXPORTS = {
    "CreditConfig": "credit.config",
    "CreditResult": "credit.compute",
    "GroupCredit": "credit.compute",
    "compute_credit": "credit.compute",
    "compute_group_credit": "credit.compute",
    "ADVANTAGE_MODES": "credit.advantages",
    "credit_advantages": "credit.advantages",
    "group_normalize": "credit.advantages",
    "GroupDiagnostics": "credit.diagnostics",
    "GroupLayout": "credit.grouping",
    "layout_groups": "credit.grouping",
    "KERNELS": "credit.kernels",
    "compute_kernel": "credit.kernels",
    "QUALITY_MAPS": "credit.quality",
    "quality_from_rewards": "credit.quality",
    "ShapleyResult": "credit.shapley.dispatch",
    "shapley_values": "credit.shapley.dispatch",
    "subset_team_values": "credit.shapley.exact",
    "quality_weighted_kernel": "credit.team_value",
    "team_value": "credit.team_value",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "ADVANTAGE_MODES",
    "KERNELS",
    "QUALITY_MAPS",
    "CreditConfig",
    "CreditResult",
    "GroupCredit",
    "GroupDiagnostics",
    "GroupLayout",
    "ShapleyResult",
    "compute_credit",
    "compute_group_credit",
    "compute_kernel",
    "credit_advantages",
    "group_normalize",
    "layout_groups",
    "quality_from_rewards",
    "quality_weighted_kernel",
    "shapley_values",
    "subset_team_values",
    "team_value",
]
