"""The Hydra entry point: composition against verl 0.9.1's ppo_trainer, overrides, start-up failures."""

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tests.recipe.gcpo.conftest import compose_gcpo

VALID = [
    "actor_rollout_ref.model.path=/models/Qwen3-0.6B",
    "data.train_files=/data/train.parquet",
    "data.val_files=/data/val.parquet",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
]


def _dry_run(*overrides):
    env = dict(os.environ, GCPO_DRY_RUN="1")
    return subprocess.run([sys.executable, "-m", "recipe.gcpo.main_gcpo", *overrides], capture_output=True, text=True, env=env)


def test_composes_with_verls_ppo_trainer_and_sets_the_gcpo_defaults():
    config = compose_gcpo(VALID)
    assert config.algorithm.adv_estimator == "gcpo"
    assert config.trainer.v1.trainer_mode == "sync" and config.trainer.use_v1  # verl's V1 sync trainer
    assert config.reward.custom_reward_function.path == "pkg://recipe.gcpo.reward"
    assert "actor" in config.actor_rollout_ref and "rollout" in config.actor_rollout_ref  # verl's tree is there
    assert OmegaConf.select(config, "algorithm.gcpo.credit.permutations") == 64


def test_command_line_overrides_reach_the_gcpo_block():
    config = compose_gcpo(VALID + ["algorithm.gcpo.credit.method=mc", "algorithm.gcpo.encoder.text_span=reasoning"])
    assert config.algorithm.gcpo.credit.method == "mc" and config.algorithm.gcpo.encoder.text_span == "reasoning"


def test_dry_run_validates_and_prints_the_config_without_starting_anything():
    proc = _dry_run(*VALID, "algorithm.gcpo.credit.permutations=128")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "permutations: 128" in proc.stdout and "trainer_mode: sync" in proc.stdout
    assert "nothing was started" in proc.stdout
    assert "# warning: /data/train.parquet does not exist here (scripts/prepare_data.py writes it)" in proc.stdout


def test_a_bad_value_fails_at_start_up_naming_the_key():
    proc = _dry_run(*VALID, "algorithm.gcpo.credit.kernel=laplace")
    assert proc.returncode != 0
    assert "algorithm.gcpo.credit.kernel must be one of ['cosine', 'rbf']" in proc.stderr


def test_the_register_module_refuses_gcpo_under_a_stock_trainer():
    import recipe.gcpo.register  # noqa: F401
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    config = compose_gcpo(VALID + ["trainer.v1.trainer_mode=sync"])
    with pytest.raises(ValueError, match="needs the GCPO trainer.*trainer class PPOTrainerSync"):
        PPOTrainerSync(config)
