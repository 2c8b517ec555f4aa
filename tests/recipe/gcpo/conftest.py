from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from verl.protocol import DataProto

import recipe.gcpo
from recipe.gcpo.settings import RecipeSettings

CONFIG_DIR = Path(recipe.gcpo.__file__).resolve().parent / "config"


def compose_gcpo(overrides=(), config_name: str = "gcpo_trainer"):
    """The recipe's Hydra config, composed exactly as ``python -m recipe.gcpo.main_gcpo`` composes it."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


# a GCPO run's own keys as overrides: the model, data files, groups of 4, dynamic batch sizes
BASE = [
    "actor_rollout_ref.model.path=/models/m",
    "actor_rollout_ref.rollout.name=vllm",
    "data.train_files=/d/train.parquet",
    "data.val_files=/d/val_aime24.parquet",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
]
# the shared protocol's reward block (config/protocol/shared.yaml) as overrides, at an 8k response length
DAPO_REWARD = [
    "data.max_response_length=8192",  # DAPO's max_resp_len is the response length
    "reward.reward_manager.name=dapo",
    "+reward.reward_kwargs.max_resp_len=8192",
    "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
    "+reward.reward_kwargs.overlong_buffer_cfg.len=4096",
    "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
    "+reward.reward_kwargs.overlong_buffer_cfg.log=false",
]


def gcpo_settings(config):
    """The GCPO settings of a full config (None for an estimator that does not embed), as the trainer parses them."""
    return RecipeSettings.parse(config).gcpo


@pytest.fixture
def gcpo_config():
    return compose_gcpo


def outcome_batch(rewards, uids, lengths=None, width: int = 8) -> DataProto:
    """A batch as verl hands it to an estimator: each row's reward on its last response token, its response mask
    (``lengths``, default 6 tokens; 0: a padding row) and its prompt id ``uid``; tensors (N, width)."""
    n = len(rewards)
    lengths = lengths or [6] * n
    mask = torch.zeros(n, width)
    scores = torch.zeros(n, width)
    for i, (r, length) in enumerate(zip(rewards, lengths)):
        mask[i, :length] = 1
        if length:
            scores[i, length - 1] = r
    return DataProto.from_dict(
        tensors={"token_level_rewards": scores, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


# each trainer mode of verl's V1 trainer, at the smallest sizes its asserts accept on one (CPU) device
MODE_OVERRIDES = {
    "sync": [],
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
    "separate_async": [
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
        "data.train_batch_size=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    ],
}
