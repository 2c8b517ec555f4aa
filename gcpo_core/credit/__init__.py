"""The credit engine: team value log det(I + L) of quality-weighted kernels, Shapley credit (exact, Monte Carlo,
leave-one-out) and its group-normalised advantages, with diagnostics. torch only; the bottom of gcpo_core."""

from gcpo_core._lazy import lazy_exports

_EXPORTS = {
    "ADVANTAGE_MODES": "advantages",
    "credit_advantages": "advantages",
    "group_normalize": "advantages",
    "normalize_credit": "advantages",
    "CreditConfig": "config",
    "CreditResult": "compute",
    "GroupCredit": "compute",
    "compute_credit": "compute",
    "compute_group_credit": "compute",
    "GroupDiagnostics": "diagnostics",
    "GroupLayout": "grouping",
    "layout_groups": "grouping",
    "KERNELS": "kernels",
    "compute_kernel": "kernels",
    "QUALITY_MAPS": "quality",
    "quality_from_rewards": "quality",
    "ShapleyResult": "shapley.dispatch",
    "shapley_values": "shapley.dispatch",
    "subset_team_values": "shapley.exact",
    "quality_weighted_kernel": "team_value",
    "team_value": "team_value",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
