import pandas as pd
import pytest

from experiments.miniature.task import (
    CATEGORIES,
    HELDOUT_TEMPLATES,
    TRAIN_TEMPLATES,
    is_correct,
    parse_answer,
    prompts,
    write_task_data,
)
from tests.special_e2e.smoke.policy import build_tokenizer


def test_every_answer_is_one_word_piece_of_the_policys_vocabulary():
    """One token an answer: the policy learns a word in one step and the encoder sees its meaning."""
    tokenizer = build_tokenizer()
    for category, words in CATEGORIES.items():
        assert len(set(words)) == len(words) >= 7, category
        for word in words:
            assert len(tokenizer.encode(word, add_special_tokens=False)) == 1, word
            assert tokenizer.decode(tokenizer.encode(word, add_special_tokens=False)) == word


@pytest.mark.parametrize(
    "response, category, correct",
    [
        ("tiger", "animal", True),
        (" Tiger.", "animal", True),
        ("tiger\n", "animal", True),
        ("tiger tiger", "animal", False),
        ("apple", "animal", False),
        ("orange", "fruit", True),
        ("orange", "color", True),
        ("", "fruit", False),
        ("tig", "animal", False),
        ("tiger!", "animal", True),
        ("the tiger", "animal", False),
        ("tiger, lion", "animal", False),
    ],
)
def test_the_verifier_is_exact_set_membership_of_one_word(response, category, correct):
    assert is_correct(response, category) is correct


def test_a_malformed_answer_parses_to_none_and_an_unknown_category_is_an_error():
    assert parse_answer("two words") is None and parse_answer(None) is None
    with pytest.raises(ValueError, match="unknown category"):
        is_correct("tiger", "mineral")


def test_train_and_heldout_share_categories_not_phrasings(tmp_path):
    train, heldout = prompts("train"), prompts("heldout")
    assert len(train) == len(TRAIN_TEMPLATES) * len(CATEGORIES) and len(heldout) == len(HELDOUT_TEMPLATES) * len(
        CATEGORIES
    )
    assert not {t for t, _ in train} & {t for t, _ in heldout}
    assert {c for _, c in train} == {c for _, c in heldout} == set(CATEGORIES)
    paths = write_task_data(tmp_path)
    frame = pd.read_parquet(paths["heldout"])
    assert list(frame["prompt"].iloc[0][0].keys()) == ["role", "content"]
    assert {row["ground_truth"] for row in frame["reward_model"]} == set(CATEGORIES)
    with pytest.raises(ValueError, match="split must be"):
        prompts("test")
