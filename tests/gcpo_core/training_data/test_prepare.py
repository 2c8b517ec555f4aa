"""Data preparation on the real public sets in ../shared/data, and on the upstream DAPO format."""

import subprocess
import sys

import pandas as pd
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from gcpo_core.training_data.prepare import DATASETS, prepare, problem_and_answer
from recipe.gcpo.reward import compute_score
from tests.recipe.gcpo.conftest import compose_gcpo

DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form Answer: "
    "$Answer (without quotes) where $Answer is the answer to the problem.\n\n{}\n\nRemember to put your answer on "
    'its own line after "Answer:".'
)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from tests.conftest import SHARED_DATA, SHARED_DATA_MISSING

    if not SHARED_DATA.is_dir():
        pytest.skip(SHARED_DATA_MISSING)
    out = tmp_path_factory.mktemp("data")
    proc = subprocess.run(
        [sys.executable, "scripts/prepare_data.py", "--local-dir", str(SHARED_DATA), "--out-dir", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_every_set_is_written_with_a_summary(prepared):
    out, summary = prepared
    assert sorted(p.name for p in out.iterdir()) == [
        "train.parquet",
        "val_aime24.parquet",
        "val_aime25.parquet",
        "val_amc23.parquet",
        "val_gsm8k.parquet",
        "val_math500.parquet",
    ]
    assert "| dapo_math_17k | train | 2000 | 1992 | 8 | 0 | 57 |" in summary  # duplicates and form feeds
    assert "| aime24 | val | 30 | 30 | 0 | 0 | 0 |" in summary
    assert "| gsm8k | val | 1319 | 1319 | 0 | 0 | 0 |" in summary


def test_rows_are_verl_rows_with_one_instruction_and_no_control_characters(prepared):
    out, _ = prepared
    train = pd.read_parquet(out / "train.parquet")
    assert set(train.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    for row in train.itertuples():
        content = row.prompt[0]["content"]
        assert row.prompt[0]["role"] == "user" and content.startswith("Solve the following math problem")
        assert content.count("Remember to put your answer") == 1  # never wrapped twice
        assert "\x0c" not in content and row.extra_info["problem"] in content
    assert train.extra_info.map(lambda e: " ".join(e["problem"].split())).is_unique
    aime = pd.read_parquet(out / "val_aime24.parquet")
    assert "025" in set(aime.reward_model.map(lambda r: r["ground_truth"]))  # kept as given; math-verify equates 25


def test_gold_answers_are_scored_correct_by_the_recipe_reward(prepared):
    out, _ = prepared
    for name in ("val_math500.parquet", "val_gsm8k.parquet", "val_aime25.parquet"):
        frame = pd.read_parquet(out / name).head(40)
        for row in frame.itertuples():
            answer = row.reward_model["ground_truth"]
            assert compute_score(row.data_source, f"Work...\nAnswer: {answer}", answer)["acc"] == 1.0


def test_verls_dataset_class_reads_the_files(prepared):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    out, _ = prepared
    backend = Tokenizer(models.WordLevel(vocab={"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    config = compose_gcpo(["actor_rollout_ref.rollout.n=8"]).data
    dataset = RLHFDataset([str(out / "val_amc23.parquet"), str(out / "val_aime24.parquet")], tokenizer, config)
    assert len(dataset) == 70
    item = dataset[0]
    assert item["data_source"] == "amc23" and "Answer:" in item["raw_prompt"][0]["content"]


def test_the_upstream_dapo_parquet_is_unwrapped_and_deduplicated(tmp_path):
    problems = ["What is $1+1$?", "Compute \x0crac{1}{2} + \x0crac{1}{2}."]
    rows = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": DAPO_TEMPLATE.format(p)}],
            "ability": "MATH",
            "reward_model": {"style": "rule-lighteval/MATH_v2", "ground_truth": a},
            "extra_info": {"index": f"uuid-{i}"},
        }
        for copy in range(3)
        for i, (p, a) in enumerate(zip(problems, ["2", "1"]))
    ]
    frame, report = prepare(DATASETS["dapo_math_17k"], rows)
    assert (report.read, report.kept, report.duplicates) == (6, 2, 4)
    assert frame.extra_info.iloc[0]["problem"] == "What is $1+1$?"
    assert frame.extra_info.iloc[1]["problem"] == "Compute \\frac{1}{2} + \\frac{1}{2}."
    assert frame.prompt.iloc[0][0]["content"].count("Solve the following") == 1


def test_gsm8k_hub_answers_and_empty_rows():
    spec = DATASETS["gsm8k"]
    assert problem_and_answer({"question": "Q?", "answer": "2 + 2 = 4\n#### 4"}, spec) == ("Q?", "4")
    _, report = prepare(spec, [{"question": "", "answer": "1"}, {"question": "Q", "answer": ""}])
    assert report.kept == 0 and report.dropped == {"no problem text": 1, "no answer": 1}


def test_missing_local_files_without_download_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/prepare_data.py",
            "--local-dir",
            str(tmp_path),
            "--out-dir",
            str(tmp_path / "o"),
            "--datasets",
            "aime24",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "aime24: none of ['aime24.jsonl', 'aime-2024.parquet'] found" in proc.stderr and "--download" in proc.stderr


def test_reference_solutions_are_kept_and_math_answers_come_from_the_last_box(shared_data):
    import json

    rows = [json.loads(line) for line in (shared_data / "math500.jsonl").read_text().splitlines()[:20]]
    for row in rows:
        row.pop("answer")  # MATH train rows carry only the solution
    frame, report = prepare(DATASETS["math"], rows)
    assert report.kept == 20
    for source, row in zip(rows, frame.itertuples()):
        assert row.extra_info["solution"] == source["solution"].strip()
        assert (
            compute_score("math", f"Answer: {row.reward_model['ground_truth']}", row.reward_model["ground_truth"])[
                "acc"
            ]
            == 1.0
        )
    assert frame.reward_model.iloc[0]["ground_truth"] == "\\left( 3, \\frac{\\pi}{2} \\right)"


def test_download_with_no_hub_in_reach_fails_in_seconds_with_one_reason(tmp_path):
    """The datasets library would retry for minutes; a hub that is off, or a host nothing answers at, is said at once."""
    import os
    import socket
    import time

    with socket.socket() as sock:  # a local port nothing listens on stands for an unreachable hub
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for env, reason in (
        ({"HF_HUB_OFFLINE": "1"}, "the hub is off"),
        ({"HF_ENDPOINT": f"http://127.0.0.1:{port}"}, "the hub (127.0.0.1) does not answer"),
    ):
        full = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
        start = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "scripts/prepare_data.py",
                "--download",
                "--out-dir",
                str(tmp_path),
                "--datasets",
                "aime24",
            ],
            capture_output=True,
            text=True,
            env={**full, **env},
        )
        assert time.monotonic() - start < 60
        assert proc.returncode == 1 and f"aime24: cannot download Maxwell-Jia/AIME_2024: {reason}" in proc.stderr
        assert "use --local-dir" in proc.stderr and "Traceback" not in proc.stderr
