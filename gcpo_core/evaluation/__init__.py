"""Evaluation and inspection: avg@k, pass@k and diversity of sampled solutions, credit dumps and their HTML
report, figures. Depends on credit, encoding and rewards."""

from gcpo_core._lazy import lazy_exports

_EXPORTS = {
    "load_generations": "evaluate",
    "score_generations": "evaluate",
    "pass_at_k": "evaluate",
    "benchmark_metrics": "evaluate",
    "diversity_metrics": "diversity",
    "vendi_score": "diversity",
    "write_credit_dump": "dump",
    "read_credit_dump": "dump",
    "build_report": "credit_report",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
