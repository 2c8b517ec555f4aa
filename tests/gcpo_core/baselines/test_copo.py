"""COPO's terms as the official code computes them, on hand-computed groups, and its advantage blend."""

import math

import numpy as np
import pytest
import torch

from gcpo_core.baselines.copo import COPO_GATES, answer_entropy, consistency_entropy, copo_advantages, copo_terms
from gcpo_core.credit.advantages import group_normalize

# group A: answers 5, 5, 5, 7 (three right); group B: answers 3, 4, 8, 9 (one right); +-1 rewards
SCORES = torch.tensor([[1.0, 1.0, 1.0, -1.0], [1.0, -1.0, -1.0, -1.0]])
CORRECT = SCORES > 0
ANSWERS = torch.tensor([[5, 5, 5, 7], [3, 4, 8, 9]])
MASK = torch.ones(2, 4, dtype=torch.bool)
H_A = 0.8112781244591328  # -(3/4 log2 3/4 + 1/4 log2 1/4)
W_A = 0.28017184200552453  # sigmoid(5 (H_A - 1))
W_B = 0.9933071490757153  # sigmoid(5 (2 - 1))


def test_answer_entropy_counts_distinct_answers_in_bits():
    entropy = answer_entropy(ANSWERS, MASK)
    assert entropy.tolist() == pytest.approx([H_A, 2.0], abs=1e-12)
    same = answer_entropy(torch.tensor([[4, 4, 4]]), torch.ones(1, 3, dtype=torch.bool))
    assert same.tolist() == [0.0]
    padded = answer_entropy(torch.tensor([[1, 2, 99]]), torch.tensor([[True, True, False]]))
    assert padded.tolist() == pytest.approx([1.0])


def test_the_released_scripts_setting_on_hand_computed_groups():
    terms = copo_terms(SCORES, CORRECT, ANSWERS, MASK, k=5, b=1, gate="soft_with_zero")
    # GRPO within each group: mean 0.5 and unbiased std 1 in A; mean -0.5 and std 1 in B
    assert terms.local_advantage[0].tolist() == pytest.approx([0.5, 0.5, 0.5, -1.5], rel=1e-5)
    assert terms.local_advantage[1].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], rel=1e-5)
    # accuracies 0.75 and 0.25, standardised over the two prompts: +-0.25 / 0.3536 (unbiased std)
    assert terms.global_advantage[0].tolist() == pytest.approx([0.7071068] * 4, rel=1e-5)
    assert terms.global_advantage[1].tolist() == pytest.approx([-0.7071068] * 4, rel=1e-5)
    # the local weight: sigmoid(k (H - b)) on the correct responses, 0 on the wrong ones
    assert terms.local_weight[0].tolist() == pytest.approx([W_A, W_A, W_A, 0.0], abs=1e-12)
    assert terms.local_weight[1].tolist() == pytest.approx([W_B, 0.0, 0.0, 0.0], abs=1e-12)
    assert terms.answer_entropy[:, 0].tolist() == pytest.approx([H_A, 2.0])


@pytest.mark.parametrize(
    "gate, row_a, row_b",
    [
        ("soft", [W_A] * 4, [W_B] * 4),
        ("only_zero", [1, 1, 1, 0], [1, 0, 0, 0]),
        ("global_only", [0] * 4, [0] * 4),
        ("local_only", [1] * 4, [1] * 4),
    ],
)
def test_each_gate_gives_the_official_weight(gate, row_a, row_b):
    terms = copo_terms(SCORES, CORRECT, ANSWERS, MASK, gate=gate)
    assert terms.local_weight.tolist() == [pytest.approx(row_a, abs=1e-12), pytest.approx(row_b, abs=1e-12)]


def test_forced_gates_zero_the_local_weight_where_grpo_has_no_signal():
    scores = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, -1.0, -1.0, -1.0]])  # group A all correct
    answers = torch.tensor([[1, 2, 3, 4], [3, 4, 8, 9]])
    terms = copo_terms(scores, scores > 0, answers, MASK, gate="soft_with_forced")
    assert terms.local_weight[0].tolist() == [0.0] * 4
    assert terms.local_weight[1].tolist() == pytest.approx([W_B] * 4)
    forced = copo_terms(scores, scores > 0, answers, MASK, gate="only_forced")
    assert forced.local_weight.tolist() == [[0.0] * 4, [1.0] * 4]


def test_the_reward_coefficient_scales_accuracy_by_one_minus_lambda_h():
    terms = copo_terms(SCORES, CORRECT, ANSWERS, MASK, reward_coef=True)
    # lambda = (1 - 1/4) / log2 4 = 0.375: g_A = 0.75 (1 - 0.375 H_A) = 0.52183, g_B = 0.25 (1 - 0.75) = 0.0625
    assert terms.global_advantage[:, 0].tolist() == pytest.approx([0.7071046, -0.7071046], rel=1e-5)


def test_without_std_normalisation_only_centres_both_advantages():
    terms = copo_terms(SCORES, CORRECT, ANSWERS, MASK, norm_by_std=False)
    assert terms.local_advantage[0].tolist() == pytest.approx([0.5, 0.5, 0.5, -1.5])
    assert terms.global_advantage[:, 0].tolist() == pytest.approx([0.25, -0.25])


def test_uneven_groups_padding_and_a_batch_of_one_prompt():
    scores = torch.tensor([[1.0, -1.0, 0.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    answers = torch.tensor([[1, 2, 0], [7, 7, 7]])
    terms = copo_terms(scores, scores > 0, answers, mask, gate="soft")
    for field in (terms.local_advantage, terms.global_advantage, terms.local_weight):
        assert field[0, 2] == 0  # padding
    assert terms.local_advantage[1].tolist() == [0.0] * 3  # all agree: GRPO has nothing
    assert terms.global_advantage[1, 0] > 0 > terms.global_advantage[0, 0]  # accuracy 1 against 0.5
    single = copo_terms(scores[1:], scores[1:] > 0, answers[1:], mask[1:])
    assert single.global_advantage.tolist() == [[0.0] * 3]  # no other prompt to standardise against


def test_row_order_within_groups_and_group_order_do_not_change_any_rows_terms():
    perm = torch.tensor([3, 1, 0, 2])
    for gate in COPO_GATES:
        a = copo_terms(SCORES, CORRECT, ANSWERS, MASK, gate=gate)
        b = copo_terms(SCORES[:, perm].flip(0), CORRECT[:, perm].flip(0), ANSWERS[:, perm].flip(0), MASK, gate=gate)
        for x, y in (
            (a.local_advantage, b.local_advantage),
            (a.global_advantage, b.global_advantage),
            (a.local_weight, b.local_weight),
        ):
            assert torch.allclose(x[:, perm].flip(0), y, atol=1e-12), gate


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gate": "soft with zero"}, "gate must be one of"),
        ({"k": float("nan")}, "k must be a finite number"),
        ({"b": True}, "b must be a finite number"),
        ({"epsilon": 0.0}, "epsilon must be > 0"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        copo_terms(SCORES, CORRECT, ANSWERS, MASK, **kwargs)


def test_non_finite_rewards_are_refused():
    scores = SCORES.clone()
    scores[0, 1] = float("nan")
    with pytest.raises(ValueError, match="finite rewards"):
        copo_terms(scores, CORRECT, ANSWERS, MASK)


def test_every_gate_is_documented():
    assert set(COPO_GATES) == {
        "soft_with_zero",
        "soft",
        "soft_with_forced",
        "only_zero",
        "only_forced",
        "global_only",
        "local_only",
    }


def _t(rows):
    width = max(len(r) for r in rows)
    scores = torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float64)
    mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows])
    return scores, mask


def test_consistency_entropy_is_zero_when_all_agree_and_one_for_an_even_split():
    scores, mask = _t([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0], [1.0, -1.0, 1.0, -1.0], [1.0, -1.0, -1.0, -1.0]])
    entropy = consistency_entropy(scores, mask)
    p = 0.25
    assert entropy.tolist() == pytest.approx(
        [0.0, 0.0, 1.0, -(p * math.log(p) + (1 - p) * math.log(1 - p)) / math.log(2)]
    )


def test_copo_gives_agreeing_groups_the_global_signal_and_split_groups_the_local_one():
    scores, mask = _t([[1.0] * 4, [-1.0] * 4, [1.0, -1.0, 1.0, -1.0]])
    adv = copo_advantages(scores, mask)
    assert torch.all(adv[0] > 0) and torch.all(adv[1] < 0)  # GRPO would give these groups zero
    torch.testing.assert_close(adv[2], group_normalize(scores, mask)[2])  # H = 1: purely local
    means = np.array([1.0, -1.0, 0.0])
    expected_global = (means - means.mean()) / (means.std(ddof=1) + 1e-6)
    assert adv[0, 0].item() == pytest.approx(expected_global[0])
