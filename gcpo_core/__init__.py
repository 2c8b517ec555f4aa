"""gcpo_core: the framework-free GCPO credit engine (torch + numpy only; never verl or ray).

GCPO (Group Cooperative Policy Optimization) treats the G rollouts of a prompt as a team whose value is the
volume ``log det(I + L)`` of their quality-weighted embeddings, and credits each rollout with its Shapley
value of that team value.
"""

from gcpo_core.advantages import ADVANTAGE_MODES, credit_advantages, group_normalize
from gcpo_core.config import CreditConfig
from gcpo_core.credit import CreditResult, GroupCredit, compute_credit, compute_group_credit
from gcpo_core.diagnostics import GroupDiagnostics
from gcpo_core.grouping import GroupLayout, layout_groups
from gcpo_core.kernels import KERNELS, compute_kernel
from gcpo_core.quality import QUALITY_MAPS, quality_from_rewards
from gcpo_core.shapley import SHAPLEY_ESTIMATORS, ShapleyResult, shapley_values, subset_team_values
from gcpo_core.team_value import quality_weighted_kernel, team_value

__version__ = "0.1.0"

__all__ = [
    "ADVANTAGE_MODES",
    "KERNELS",
    "QUALITY_MAPS",
    "SHAPLEY_ESTIMATORS",
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
