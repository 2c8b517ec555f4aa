"""gcpo_core: the framework-free GCPO credit engine (torch + numpy only; never verl or ray).

GCPO (Group Cooperative Policy Optimization) treats the G rollouts of a prompt as a team whose value is the
volume ``log det(I + L)`` of their quality-weighted embeddings, and credits each rollout with its Shapley
value of that team value.
"""

from importlib import import_module

__version__ = "0.1.0"

# Names are loaded on first use (PEP 562), so that a process needing one module does not import them all
# (torch among them).
_EXPORTS = {
    "ADVANTAGE_MODES": "advantages", "credit_advantages": "advantages", "group_normalize": "advantages",
    "CreditConfig": "config",
    "CreditResult": "credit", "GroupCredit": "credit", "compute_credit": "credit", "compute_group_credit": "credit",
    "GroupDiagnostics": "diagnostics",
    "GroupLayout": "grouping", "layout_groups": "grouping",
    "KERNELS": "kernels", "compute_kernel": "kernels",
    "QUALITY_MAPS": "quality", "quality_from_rewards": "quality",
    "SHAPLEY_ESTIMATORS": "shapley", "ShapleyResult": "shapley", "shapley_values": "shapley",
    "subset_team_values": "shapley",
    "quality_weighted_kernel": "team_value", "team_value": "team_value",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gcpo_core' has no attribute {name!r}")
    value = getattr(import_module(f"gcpo_core.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


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
