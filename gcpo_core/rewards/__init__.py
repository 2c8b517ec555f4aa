"""Rewards: math-verify checking of final answers, each in a worker process with a deadline (its wait for a CPU not
counted), and the answer instructions the prompts carry. Depends on encoding (the answer span)."""

from gcpo_core._lazy import lazy_exports

_EXPORTS = {
    "Verdict": "math_reward",
    "score_answer": "math_reward",
    "score_answers": "math_reward",
    "is_correct": "math_reward",
    "DeadlinePool": "deadline_pool",
    "INSTRUCTIONS": "prompts",
    "instruct": "prompts",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
