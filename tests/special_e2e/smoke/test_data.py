"""The smoke data: the package's own problems in verl's format, one prompt per correct rate."""

import pandas as pd
import pytest
from transformers import AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset

from tests.recipe.gcpo.conftest import compose_gcpo
from tests.special_e2e.smoke.data import CORRECT_RATES, DATA_SOURCE, RATE_KEY, shipped_problems, smoke_frame


def test_every_shipped_problem_once_with_the_rates_in_turn(smoke_dir):
    frame = pd.read_parquet(smoke_dir / "data" / "train.parquet")
    problems = list(dict.fromkeys(row["problem"] for row in shipped_problems()))
    assert [info["problem"] for info in frame["extra_info"]] == problems
    # the smoke (run.py) trains on one batch of three prompts: one of each rate
    assert [info[RATE_KEY] for info in frame["extra_info"]] == list(CORRECT_RATES) == [0.0, 0.5, 1.0]
    assert set(frame["data_source"]) == {DATA_SOURCE}
    row = frame.iloc[0]
    assert row["prompt"][0]["role"] == "user" and "Answer:" in row["prompt"][0]["content"]
    assert row["reward_model"]["ground_truth"] == shipped_problems()[0]["answer"]
    assert pd.read_parquet(smoke_dir / "data" / "val.parquet")["prompt"].tolist() == frame["prompt"].tolist()


def test_verl_reads_it_and_the_prompts_fit_the_smoke_prompt_length(smoke_dir):
    tokenizer = AutoTokenizer.from_pretrained(smoke_dir / "model")
    config = compose_gcpo(["data.max_prompt_length=512"]).data
    dataset = RLHFDataset([str(smoke_dir / "data" / "train.parquet")], tokenizer, config)
    assert len(dataset) == 3
    for item in dataset:
        ids = tokenizer.apply_chat_template(
            item["raw_prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert 50 < len(ids) <= 512  # run.py: MAX_PROMPT_LENGTH=512, truncation=error
        assert item["extra_info"][RATE_KEY] in CORRECT_RATES


def test_rates_outside_zero_one_are_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        smoke_frame("train", rates=(0.5, 1.5))
