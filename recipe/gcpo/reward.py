"""Math reward for verl's reward loop, scored with math-verify.

Use as ``reward.custom_reward_function.path=<this file>`` and ``reward.custom_reward_function.name=compute_score``
(the launchers do). Returns DAPO's +1 / -1 by default (``wrong_score`` sets the wrong value, e.g. 0) plus:

* ``acc``: 1.0 / 0.0, for verl's validation metrics (``val-core/<data_source>/acc/mean@k``);
* ``pred``: the final answer as math-verify read it (for ``maj@k``);
* ``timeout``: 1.0 when the check missed its deadline on both tries (``timeout_s`` per try, then the answer is
  wrong), so a pathological answer costs a bounded time and shows in verl's reward metrics instead of hanging the
  step; ``timeout_retried``: 1.0 when the first try missed it (a busy machine: the second try graded it);
* ``gcpo_signal``: a DAPO group-filter metric for GCPO (``algorithm.filter_groups.metric=gcpo_signal``): 0
  for a wrong response, 1 + a tiny text fingerprint for a correct one, so a group is constant on it, and
  dropped by the filter, exactly when it has no GCPO signal: all wrong, or all correct with identical texts.
  An all-correct group of different solutions is kept (DAPO's ``acc`` filter would drop it).
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional

from gcpo_core.rewards.math_reward import DEFAULT_TIMEOUT_S, score_answer

FINGERPRINT_SCALE = 1e-6


def text_fingerprint(text: str) -> float:
    """A stable number in [0, 1) that differs between different texts (not Python's salted hash)."""
    digest = hashlib.blake2b(text.encode("utf-8", errors="replace"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[dict] = None,
    correct_score: float = 1.0,
    wrong_score: float = -1.0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    reward_router_address: Any = None,
    reward_model_tokenizer: Any = None,
) -> dict[str, Any]:
    """verl custom reward function (``reward.custom_reward_function``); every key is always present (verl
    builds its reward_extra_info arrays from the first response's keys). The last two are what verl 0.9.1's reward
    managers pass besides the named arguments when a reward model serves the run, named so that a misspelt
    ``reward.custom_reward_function.reward_kwargs`` key is refused (at start-up, by its signature), not absorbed."""
    verdict = score_answer(solution_str or "", str(ground_truth), timeout_s=timeout_s)
    correct = verdict.correct
    return {
        "score": float(correct_score if correct else wrong_score),
        "acc": 1.0 if correct else 0.0,
        "pred": verdict.answer,
        "timeout": 1.0 if verdict.timed_out else 0.0,
        "timeout_retried": 1.0 if verdict.retried else 0.0,
        "gcpo_signal": 1.0 + FINGERPRINT_SCALE * text_fingerprint(solution_str or "") if correct else 0.0,
    }
