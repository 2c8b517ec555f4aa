import numpy as np
import pytest
import torch

from gcpo_core.credit.compute import compute_credit
from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.encoder import Encoded, EncoderStats
from gcpo_core.encoding.pipeline import credit_encoded, credit_rollouts

TEXTS = [
    "Add 2 and 3 to get 5.\nAnswer: 5",
    "Two plus three equals five.\nAnswer: 5",
    "Start from 3 and count up twice: 4, 5.\nAnswer: 5",
    "2 times 3 is 6.\nAnswer: 6",
]


def test_matches_the_engine_on_the_encoders_embeddings(minilm):
    rewards = [1.0, 1.0, 1.0, 0.0]
    result = credit_rollouts(TEXTS, rewards, ["p"] * 4, minilm, return_embeddings=True)
    direct = compute_credit(rewards, torch.from_numpy(result.embeddings), ["p"] * 4)
    np.testing.assert_allclose(result.advantage, direct.advantage.numpy(), atol=1e-9)
    assert set(result.timings) == {"embed", "shapley", "total"}
    assert result.metrics["gcpo/encoder/texts"] == 4.0


def test_padding_rows_are_excluded_and_get_zeros(minilm):
    texts = TEXTS + ["", "garbage padding"]
    rewards = [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    groups = ["p"] * 4 + ["pad0", "pad1"]
    valid = [True] * 4 + [False, False]
    padded = credit_rollouts(texts, rewards, groups, minilm, valid=valid)
    clean = credit_rollouts(TEXTS, rewards[:4], ["p"] * 4, minilm)
    np.testing.assert_allclose(padded.advantage[:4], clean.advantage, atol=1e-9)
    assert np.all(padded.advantage[4:] == 0) and np.all(padded.shapley[4:] == 0)
    assert padded.metrics["gcpo/excluded_rows"] == 2.0 and padded.metrics["gcpo/groups"] == 1.0


def test_missing_members_are_counted_and_oversized_groups_rejected(minilm):
    result = credit_rollouts(TEXTS[:3], [1.0, 0.0, 1.0], ["a", "a", "b"], minilm, expected_group_size=2)
    assert result.metrics["gcpo/incomplete_groups"] == 1.0
    with pytest.raises(ValueError, match="more than 2 rollouts .* grouped by their prompt's uid"):
        credit_rollouts(TEXTS[:3], [1.0, 0.0, 1.0], ["a", "a", "a"], minilm, expected_group_size=2)


def test_empty_responses_contribute_nothing(minilm):
    result = credit_rollouts(["", TEXTS[0], "   "], [1.0, 1.0, 1.0], ["p"] * 3, minilm)
    assert result.shapley[0] == 0 and result.shapley[2] == 0 and result.quality[0] == 0
    assert result.shapley[1] == pytest.approx(np.log(2))
    assert result.metrics["gcpo/encoder/empty_frac"] == pytest.approx(2 / 3)


def test_length_mismatch_is_an_error(minilm):
    with pytest.raises(ValueError, match="one entry per rollout"):
        credit_rollouts(TEXTS, [1.0], ["p"] * 4, minilm)


def test_mc_credit_is_deterministic_given_the_seed(minilm):
    texts = [f"Solution number {i}: add {i} and {20 - i}.\nAnswer: 20" for i in range(20)]
    config = CreditConfig(method="mc", seed=3)
    a = credit_rollouts(texts, [1.0] * 20, ["p"] * 20, minilm, config)
    b = credit_rollouts(texts, [1.0] * 20, ["p"] * 20, minilm, config)
    assert np.array_equal(a.advantage, b.advantage) and a.metrics["gcpo/mc_groups"] == 1.0


def test_embeddings_made_in_parts_are_credited_as_one_call_credits_the_batch(minilm):
    texts = TEXTS + ["pad", "Four is two plus two.\nAnswer: 4", "2 + 2 = 4\nAnswer: 4"]
    rewards = [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    groups = ["p"] * 4 + ["pad-uid", "q", "q"]
    valid = [True] * 4 + [False, True, True]
    whole = credit_rollouts(texts, rewards, groups, minilm, valid=valid, expected_group_size=4, return_embeddings=True)
    rows = [0, 1, 2, 3, 5, 6]
    # two "shards" embed rows [3, 5] and [0, 1, 2, 6]; the parts are put back in row order
    first, second = minilm.encode([texts[3], texts[5]]), minilm.encode([texts[i] for i in (0, 1, 2, 6)])
    order = {
        3: first.embeddings[0],
        5: first.embeddings[1],
        0: second.embeddings[0],
        1: second.embeddings[1],
        2: second.embeddings[2],
        6: second.embeddings[3],
    }
    encoded = Encoded(
        embeddings=torch.stack([order[i] for i in rows]),
        empty=torch.zeros(6, dtype=torch.bool),
        stats=EncoderStats.combine([first.stats, second.stats]),
    )
    parted = credit_encoded(encoded, rewards, groups, valid=valid, expected_group_size=4)
    np.testing.assert_allclose(parted.advantage, whole.advantage, atol=1e-6)
    assert parted.metrics["gcpo/incomplete_groups"] == 1.0 and parted.metrics["gcpo/excluded_rows"] == 1.0
    assert parted.metrics["gcpo/encoder/texts"] == 6.0
    with pytest.raises(ValueError, match="5 embeddings for 6 rows"):
        credit_encoded(Encoded(encoded.embeddings[:5], encoded.empty[:5]), rewards, groups, valid=valid)
