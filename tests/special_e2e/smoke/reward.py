"""The smoke run's reward: a deterministic coin flip on the response text, so that a random-weight policy (which
never solves a math problem) still produces correct rollouts and GCPO's credit path runs.

Use as ``reward.custom_reward_function.path=pkg://tests.special_e2e.smoke.reward`` (the smoke does);
every other run keeps the math reward (``recipe/gcpo/reward.py``). A response is correct when the fingerprint
of its text (a stable hash in [0, 1)) is below the prompt's ``extra_info.smoke_correct_rate`` (0.5 when the
prompt has none): the smoke data sets 0, 0.5 and 1, so all-wrong, mixed and all-correct groups all occur, and
about half of all rollouts are correct. The same text always gets the same reward. Its ``pred`` (the final
answer, which COPO's answer entropy reads) is the response's last word.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from recipe.gcpo.reward import FINGERPRINT_SCALE, text_fingerprint
from tests.special_e2e.smoke.data import RATE_KEY

DEFAULT_RATE = 0.5


def correct_rate(extra_info: Optional[dict]) -> float:
    """The prompt's correct rate, checked to be a number in [0, 1]."""
    value = (extra_info or {}).get(RATE_KEY, DEFAULT_RATE)
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"extra_info.{RATE_KEY} must be a number in [0, 1], got {value!r}") from None
    if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
        raise ValueError(f"extra_info.{RATE_KEY} must be a number in [0, 1], got {value!r}")
    return rate


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[dict] = None,
    correct_score: float = 1.0,
    wrong_score: float = -1.0,
    **kwargs: Any,
) -> dict[str, float]:
    """verl custom reward function: DAPO's +1 / -1 (``score``), ``acc`` 1 / 0, decided by the text's hash, the
    math reward's ``gcpo_signal`` (so that GCPO's dynamic-sampling filter runs on the smoke reward too) and
    ``pred``, the last word ("" for an empty response)."""
    fingerprint = text_fingerprint(solution_str or "")
    correct = fingerprint < correct_rate(extra_info)
    words = (solution_str or "").split()
    return {
        "score": float(correct_score if correct else wrong_score),
        "acc": 1.0 if correct else 0.0,
        "gcpo_signal": 1.0 + FINGERPRINT_SCALE * fingerprint if correct else 0.0,
        "pred": words[-1] if words else "",
    }
