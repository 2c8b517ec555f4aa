"""DIVER's intrinsic reward (gcpo_core/baselines/diver.py) on hand-computed groups."""

import math

import numpy as np
import pytest
import torch

from gcpo_core.baselines.diver import (
    DiverConfig,
    diver_bonus,
    diver_weight,
    equation_diversity,
    extract_equations,
    textual_similarity,
)
from gcpo_core.credit.advantages import group_normalize

# ED of this group, by hand: A {x+1=2, x=1}: x=1 also in B -> 1/2; B {x=1} -> 0; C {y=3, f(x)=y} -> 2/2; D none -> 0
GROUP = [
    "so $x+1=2$ and $x=1$",
    "we get $x = 1$",
    r"\[ y = 3 \] then \( f(x) = y \)",
    "no math here",
]


def test_equations_are_read_from_every_latex_delimiter_with_whitespace_ignored():
    assert extract_equations(GROUP[0]) == {"x+1=2", "x=1"}
    assert extract_equations(GROUP[2]) == {"y=3", "f(x)=y"}  # parentheses inside \( \) are kept
    assert extract_equations("display $$ a^2 + b^2 $$ and inline $c$") == {"a^2+b^2", "c"}
    assert extract_equations(r"it costs \$5 and \$6, so $5+6=11$") == {"5+6=11"}
    assert extract_equations("empty $ $ and \\[ \\] segments") == frozenset()
    assert extract_equations("a line\nthen $x\n= 2$") == {"x=2"}


def test_equation_diversity_is_the_share_of_a_responses_equations_no_other_response_has():
    np.testing.assert_array_equal(equation_diversity(GROUP), [0.5, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(equation_diversity([GROUP[0], GROUP[0]]), [0.0, 0.0])  # duplicates share all
    np.testing.assert_array_equal(equation_diversity([GROUP[2]]), [1.0])


def test_textual_similarity_is_the_mean_bidirectional_bleu_to_the_others():
    texts = ["a b c d", "a b c e", "a b"]
    # bigram BLEU (weights 1/2, 1/2) by hand:
    # 1 vs 2: unigram matches a b c -> 3/4, bigram a_b b_c -> 2/3, equal lengths -> sqrt(3/4 * 2/3)
    s12 = math.sqrt(3 / 4 * 2 / 3)
    # 3 vs 1 (and 3 vs 2, the same counts): hypothesis "a b" -> precisions 1, 1 and brevity exp(1 - 4/2);
    # hypothesis "a b c d" -> 2/4, 1/3, no brevity penalty
    s13 = (math.exp(1 - 4 / 2) + math.sqrt(2 / 4 * 1 / 3)) / 2
    expected = [(s12 + s13) / 2, (s12 + s13) / 2, s13]
    np.testing.assert_allclose(textual_similarity(texts, weights=(0.5, 0.5)), expected, rtol=1e-12)


def test_textual_similarity_is_one_for_copies_zero_for_disjoint_texts_and_needs_every_order_to_match():
    words = "one two three four five six"
    np.testing.assert_allclose(textual_similarity([words] * 3), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(textual_similarity(["a b c d e", "f g h i j"]), [0.0, 0.0])
    # DIVER's weights reach 5-grams: texts sharing nothing longer than 4 words score 0 (nltk: below 1e-30)
    np.testing.assert_array_equal(textual_similarity(["a b c d x", "a b c d y"]), [0.0, 0.0])
    np.testing.assert_array_equal(textual_similarity(["alone"]), [0.0])


def _bonus(texts, rewards, uids, step=0, **config):
    return diver_bonus(texts, rewards, uids, step=step, config=DiverConfig(**config))


def test_equation_bonus_goes_to_correct_responses_clipped_and_scaled_by_coef():
    texts = GROUP + ["$a=b$", "$a=b$"]
    rewards = [1.0, 1.0, 1.0, -1.0, -1.0, -1.0]
    result = _bonus(texts, rewards, ["p", "p", "p", "p", "q", "q"], step=0, coef=2.0, max_equation=0.68)
    # group p: ED (0.5, 0, 1, 0), C clipped at 0.68, D wrong; group q: all wrong, no bonus
    np.testing.assert_allclose(result.bonus, [1.0, 0.0, 1.36, 0.0, 0.0, 0.0])
    assert result.metrics["diver/shaped_groups"] == 1.0
    assert result.metrics["diver/equation/mean"] == pytest.approx(np.mean([0.5, 0.0, 1.0]))


def test_a_wrong_response_gets_nothing_however_diverse():
    result = _bonus(GROUP, [-1.0, -1.0, -1.0, -1.0], ["p"] * 4)
    assert np.all(result.bonus == 0.0)


def test_all_correct_gate_and_group_accuracy_scaling():
    uids = ["p"] * 4
    mixed = [1.0, 1.0, 1.0, -1.0]
    assert np.all(_bonus(GROUP, mixed, uids, gate="all_correct").bonus == 0.0)
    np.testing.assert_allclose(_bonus(GROUP, [1.0] * 4, uids, gate="all_correct").bonus, [1.0, 0.0, 1.36, 0.0])
    np.testing.assert_allclose(
        _bonus(GROUP, mixed, uids, scale_by_group_accuracy=True).bonus, 0.75 * np.array([1.0, 0.0, 1.36, 0.0])
    )


def test_lambda_decays_by_cosine_over_the_active_steps_then_stops():
    config = DiverConfig(active_steps=100)
    assert diver_weight(0, config) == 1.0
    assert diver_weight(50, config) == pytest.approx(math.cos(math.pi / 4))
    assert diver_weight(99, config) == pytest.approx(math.cos(0.99 * math.pi / 2))
    assert diver_weight(100, config) == 0.0 and diver_weight(5000, config) == 0.0
    constant = DiverConfig(schedule="constant", active_steps=100)
    assert diver_weight(99, constant) == 1.0 and diver_weight(100, constant) == 0.0
    assert diver_weight(10**6, DiverConfig(active_steps=None)) == 1.0
    late = _bonus(GROUP, [1.0] * 4, ["p"] * 4, step=100)
    assert np.all(late.bonus == 0.0) and late.metrics["diver/lambda"] == 0.0
    half = _bonus(GROUP, [1.0] * 4, ["p"] * 4, step=50)
    np.testing.assert_allclose(half.bonus, math.cos(math.pi / 4) * np.array([1.0, 0.0, 1.36, 0.0]))


def test_potential_discount_uses_the_response_length():
    result = diver_bonus(
        GROUP, [1.0] * 4, ["p"] * 4, step=0, config=DiverConfig(gamma=0.5), response_lengths=[1, 2, 3, 4]
    )
    np.testing.assert_allclose(result.bonus, [2.0 * 0.5 * 0.5, 0.0, 2.0 * 0.68 * 0.125, 0.0])
    with pytest.raises(ValueError, match="response length"):
        diver_bonus(GROUP, [1.0] * 4, ["p"] * 4, step=0, config=DiverConfig(gamma=0.5))


def test_padding_rows_take_no_part_in_a_groups_diversity():
    texts = GROUP + ["$x+1=2$"]  # a padding row that would make A's x+1=2 shared
    rewards = [1.0, 1.0, 1.0, -1.0, 1.0]
    result = diver_bonus(texts, rewards, ["p"] * 5, step=0, config=DiverConfig(), valid=[True] * 4 + [False])
    np.testing.assert_allclose(result.bonus, [1.0, 0.0, 1.36, 0.0, 0.0])


def test_textual_and_mix_metrics_add_the_clipped_parts():
    texts = ["a b c d", "a b c e", "a b"]
    uids = ["p"] * 3
    similarity = textual_similarity(texts, weights=(0.5, 0.5))
    textual = _bonus(texts, [1.0] * 3, uids, metric="textual", coef=1.0, bleu_weights=(0.5, 0.5))
    np.testing.assert_allclose(textual.bonus, 1.0 - similarity)
    capped = _bonus(texts, [1.0] * 3, uids, metric="textual", coef=1.0, bleu_weights=(0.5, 0.5), max_textual=0.5)
    np.testing.assert_allclose(capped.bonus, np.minimum(1.0 - similarity, 0.5))
    eq_texts = [t + f" ${i}=i$" for i, t in enumerate(texts)]  # one unique equation each: ED = 1
    mix = _bonus(eq_texts, [1.0] * 3, uids, metric="mix", coef=1.0, max_equation=0.42, max_textual=0.91)
    np.testing.assert_allclose(mix.bonus, 0.42 + np.minimum(1.0 - textual_similarity(eq_texts), 0.91))


def test_horizon_keeps_only_each_responses_beginning():
    texts = ["same start $a=1$", "same start $a=1$ later $b=2$"]
    full = _bonus(texts, [1.0, 1.0], ["p", "p"])
    short = _bonus(texts, [1.0, 1.0], ["p", "p"], horizon_chars=len("same start $a=1$"))
    np.testing.assert_allclose(full.bonus, [0.0, 2.0 * 0.5])
    np.testing.assert_allclose(short.bonus, [0.0, 0.0])


def test_an_all_correct_group_gets_a_signal_where_grpo_gives_none():
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert torch.all(group_normalize(rewards, mask) == 0)
    bonus = _bonus(GROUP, rewards[0].tolist(), ["p"] * 4).bonus
    advantage = group_normalize(rewards + torch.from_numpy(bonus)[None], mask)[0]
    assert advantage[2] > advantage[0] > advantage[1] == advantage[3]  # most unique equations first


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"metric": "bleu"}, "metric must be one of"),
        ({"coef": -1.0}, "coef must be a finite number >= 0"),
        ({"gamma": 0.0}, "gamma must be in"),
        ({"horizon_chars": 0}, "horizon_chars must be an integer"),
        ({"active_steps": 1.5}, "active_steps must be an integer"),
        ({"bleu_weights": ()}, "bleu_weights"),
        ({"bleu_weights": (math.nan, 1.0)}, "bleu_weights must be finite non-negative numbers, not all 0, got"),
        ({"bleu_weights": (0.5, math.inf)}, "bleu_weights must be finite"),
        ({"bleu_weights": (-math.inf, 1.0)}, "bleu_weights must be finite"),
        ({"bleu_weights": 5}, "bleu_weights must be finite"),
        ({"gate": "wrong"}, "gate must be one of"),
    ],
)
def test_bad_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        DiverConfig(**bad)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="one entry per rollout"):
        diver_bonus(["a"], [1.0, 1.0], ["p"], step=0, config=DiverConfig())
    with pytest.raises(ValueError, match="finite"):
        diver_bonus(["a", "b"], [1.0, math.nan], ["p", "p"], step=0, config=DiverConfig())
