"""The smoke run's credit path on the CPU, with real parts wherever the CPU allows: the tiny policy samples the
rollouts (transformers instead of vLLM), verl's own reward manager scores them with the reward the smoke config
names, the credit engine credits them with MiniLM, the trainer's dump writer writes the dump, and the smoke's
check passes on it."""

import numpy as np
import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.trainer.ppo.reward import get_custom_reward_fn

from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.pipeline import credit_rollouts
from gcpo_core.evaluation.dump import write_credit_dump
from tests.recipe.gcpo.conftest import compose_gcpo
from tests.special_e2e.smoke.checks import check_credit_dumps

N_RESP = 8
RESPONSE_LENGTH = 16


def _rollouts(smoke_dir):
    tokenizer = AutoTokenizer.from_pretrained(smoke_dir / "model")
    model = AutoModelForCausalLM.from_pretrained(smoke_dir / "model", dtype=torch.float32)
    frame = pd.read_parquet(smoke_dir / "data" / "train.parquet")
    torch.manual_seed(0)
    for index, row in frame.iterrows():
        prompt = tokenizer.apply_chat_template(
            list(row["prompt"]), add_generation_prompt=True, tokenize=True, return_dict=False
        )
        out = model.generate(
            torch.tensor([prompt] * N_RESP),
            max_new_tokens=RESPONSE_LENGTH,
            do_sample=True,
            pad_token_id=tokenizer.pad_token_id,
        )
        for response in out[:, len(prompt) :]:
            yield f"uid{index}", row, torch.tensor(prompt), response


def _reward_input(row, prompt, response, pad_id):
    """One rollout as verl's agent loop hands it to the reward manager."""
    valid = int((response != pad_id).nonzero().max()) + 1 if (response != pad_id).any() else 0
    attention = torch.cat([torch.ones_like(prompt), (torch.arange(len(response)) < valid).long()])
    return DataProto.from_dict(
        tensors={"prompts": prompt[None], "responses": response[None], "attention_mask": attention[None]},
        non_tensors={key: np.array([row[key]], dtype=object) for key in ("data_source", "reward_model", "extra_info")},
    )


def test_generated_rollouts_scored_by_verl_and_credited_pass_the_smoke_check(smoke_dir, minilm, tmp_path):
    config = compose_gcpo(["reward.custom_reward_function.path=pkg://tests.special_e2e.smoke.reward"])
    tokenizer = AutoTokenizer.from_pretrained(smoke_dir / "model")
    manager = NaiveRewardManager(config, tokenizer, compute_score=get_custom_reward_fn(config))
    texts, rewards, uids = [], [], []
    for uid, row, prompt, response in _rollouts(smoke_dir):
        result = manager.loop.run_until_complete(
            manager.run_single(_reward_input(row, prompt, response, tokenizer.pad_token_id))
        )
        rewards.append(result["reward_score"])
        texts.append(tokenizer.decode(response, skip_special_tokens=True))
        uids.append(uid)
    assert len(set(texts)) == len(texts) and all(t.strip() for t in texts)  # random, non-empty responses
    assert set(rewards) == {1.0, -1.0}

    result = credit_rollouts(
        texts, rewards, uids, minilm, CreditConfig(), expected_group_size=N_RESP, return_embeddings=True, seed=1
    )
    write_credit_dump(tmp_path, 1, texts, rewards, uids, [True] * len(texts), result, max_groups=64)
    checks = check_credit_dumps(tmp_path, [1])
    assert all(check.ok for check in checks), [check.line() for check in checks]
    assert checks[-1].detail.startswith("1 all_wrong, 1 mixed, 1 all_correct")
