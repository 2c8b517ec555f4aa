import numpy as np

from recipe.gcpo.reward import compute_score


def test_scores_correctness_with_math_verify_like_dapo():
    right = compute_score("math_dapo", "so x = 3/4.\nAnswer: 0.75", "\\frac{3}{4}")
    wrong = compute_score("math_dapo", "Answer: 0.7", "\\frac{3}{4}")
    assert right["score"] == 1.0 and right["acc"] == 1.0 and wrong["score"] == -1.0 and wrong["acc"] == 0.0
    assert compute_score("gsm8k", "A: 5", "6", wrong_score=0.0)["score"] == 0.0
    assert right["pred"] == "0.75"


def test_gcpo_signal_is_constant_in_a_group_exactly_when_gcpo_has_no_signal():
    def group(texts, answer="7"):
        return [compute_score("x", t, answer)["gcpo_signal"] for t in texts]

    all_wrong = group(["Answer: 1", "Answer: 2", "Answer: 3"])
    same_correct = group(["x + y = 7\nAnswer: 7"] * 3)
    different_correct = group(["3 + 4 = 7\nAnswer: 7", "14 / 2 = 7\nAnswer: 7", "Answer: 7"])
    mixed = group(["Answer: 7", "Answer: 8"])
    assert np.std(all_wrong) == 0 and np.std(same_correct) == 0  # DAPO's filter drops these
    assert np.std(different_correct) > 0 and np.std(mixed) > 0  # and keeps these (acc would drop the first)
    assert all(1.0 <= v < 1.000001 for v in different_correct)


def test_empty_response_is_wrong():
    assert compute_score("x", "", "3")["score"] == -1.0
