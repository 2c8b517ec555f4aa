"""The smoke reward: deterministic, about half correct, all-wrong / mixed / all-correct by the prompt's rate."""

import random

import pytest

from tests.special_e2e.smoke.reward import compute_score


def _texts(count, seed=0):
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(["so", "x", "=", "3", "the", "answer", "is", "60", "+"]) for _ in range(12)) + f" {i}"
        for i in range(count)
    ]


def test_about_half_of_the_texts_are_correct_and_the_same_text_always_scores_the_same():
    texts = _texts(2000)
    scores = [compute_score("gcpo_smoke", t, "540") for t in texts]
    share = sum(s["acc"] for s in scores) / len(scores)
    assert 0.45 < share < 0.55
    assert all(s["score"] == (1.0 if s["acc"] else -1.0) for s in scores)
    assert [compute_score("x", t, "1")["acc"] for t in texts[:50]] == [s["acc"] for s in scores[:50]]


def test_the_prompts_rate_makes_groups_all_wrong_mixed_or_all_correct():
    texts = _texts(8, seed=1)

    def group(rate):
        return [compute_score("gcpo_smoke", t, "540", extra_info={"smoke_correct_rate": rate})["acc"] for t in texts]

    assert group(0.0) == [0.0] * 8
    assert group(1.0) == [1.0] * 8
    assert 0 < sum(group(0.5)) < 8
    assert compute_score("x", "", "1", extra_info={"smoke_correct_rate": 1.0})["acc"] == 1.0


@pytest.mark.parametrize("rate", [-0.1, 1.5, "half", None, float("nan")])
def test_a_bad_rate_is_a_clear_error(rate):
    with pytest.raises(ValueError, match="smoke_correct_rate must be a number in"):
        compute_score("x", "text", "1", extra_info={"smoke_correct_rate": rate})


def test_the_smoke_reward_gives_gcpo_signal_as_the_math_reward_does():
    """Constant within a group exactly when GCPO has no signal: 0 when wrong, 1 + a text fingerprint when correct."""
    from tests.special_e2e.smoke.reward import compute_score

    texts = [f"response {k}" for k in range(40)]
    results = [compute_score("gcpo_smoke", t, "540", extra_info={"smoke_correct_rate": 0.5}) for t in texts]
    for result in results:
        assert (result["gcpo_signal"] == 0.0) == (result["acc"] == 0.0)
        assert result["acc"] == 0.0 or 1.0 < result["gcpo_signal"] < 1.0 + 1e-6
    correct = {r["gcpo_signal"] for r in results if r["acc"]}
    assert len(correct) == sum(r["acc"] for r in results)  # different texts, different signals
    again = compute_score("gcpo_smoke", texts[0], "540", extra_info={"smoke_correct_rate": 0.5})
    assert again == results[0]


def test_the_prediction_is_the_last_word_so_copos_blend_trains_on_the_smoke_reward():
    import numpy as np

    from recipe.gcpo.baselines.copo import CopoSettings, step_copo

    assert compute_score("x", "so the answer is 60", "1")["pred"] == "60"
    assert compute_score("x", "  ", "1")["pred"] == "" and compute_score("x", None, "1")["pred"] == ""
    texts = _texts(16, seed=2)
    results = [compute_score("gcpo_smoke", t, "540") for t in texts]
    uids = ["a"] * 8 + ["b"] * 8
    step = step_copo(
        uids,
        np.array([r["score"] for r in results]),
        [{"reward_extra_info": r} for r in results],
        np.ones(16, dtype=bool),
        CopoSettings(),
    )
    assert step.metrics["copo/local_adv_abs"] > 0 and step.metrics["copo/global_adv_abs"] > 0
