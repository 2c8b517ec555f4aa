"""verl's reward function for the miniature task: +1 / -1 (``score``, what GRPO and GCPO both train on) and
``acc`` 1 / 0, by the task's exact verifier. Use as ``reward.custom_reward_function.path=
pkg://experiments.miniature.reward`` (``scripts/miniature.sh`` does)."""

from __future__ import annotations

from typing import Any, Optional

from experiments.miniature.task import is_correct


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Optional[dict] = None, **kwargs: Any
) -> dict[str, float]:
    correct = is_correct(solution_str, str(ground_truth))
    return {"score": 1.0 if correct else -1.0, "acc": 1.0 if correct else 0.0}
