"""Group Contrastive PO's start-up checks (recipe/gcpo/baselines/group_contrastive.py: CHECKS), run
by the recipe's checks of a whole config."""

import math

import pytest

from recipe.gcpo.baselines.group_contrastive import GroupContrastiveSettings
from recipe.gcpo.checks import recipe_rules
from tests.recipe.gcpo.conftest import compose_gcpo


def _group_contrastive(config):
    return recipe_rules(config).blocks["group_contrastive"]


def test_group_contrastive_needs_solutions_and_no_rollout_correction(tmp_path):
    import pandas as pd

    base = ["algorithm.adv_estimator=grpo", "algorithm.group_contrastive.enable=true"]
    assert _group_contrastive(compose_gcpo(base)).enable  # remote / absent files are not read
    with pytest.raises(ValueError, match="algorithm.rollout_correction: .* set rollout_is=null"):
        _group_contrastive(compose_gcpo(base + ["algorithm.rollout_correction.rollout_is=token"]))
    no_solution = tmp_path / "train.parquet"
    pd.DataFrame([{"extra_info": {"index": 0, "problem": "p"}}]).to_parquet(no_solution)
    with pytest.raises(ValueError, match=r"data.train_files: .* has no reference solutions \(extra_info.solution\)"):
        _group_contrastive(compose_gcpo(base + [f"data.train_files={no_solution}"]))
    with_solution = tmp_path / "train_math.parquet"
    pd.DataFrame([{"extra_info": {"index": 0, "problem": "p", "solution": "s"}}]).to_parquet(with_solution)
    assert _group_contrastive(compose_gcpo(base + [f"data.train_files={with_solution}"])).enable
    with pytest.raises(ValueError, match="algorithm.group_contrastive.enable: must be true or false"):
        _group_contrastive(compose_gcpo(["algorithm.group_contrastive.enable=maybe"]))


def test_bypass_mode_is_refused_with_reference_injection():
    with pytest.raises(ValueError, match="bypass_mode=false"):
        _group_contrastive(
            compose_gcpo(
                [
                    "algorithm.adv_estimator=grpo",
                    "algorithm.group_contrastive.enable=true",
                    "algorithm.rollout_correction.bypass_mode=true",
                ]
            )
        )


@pytest.mark.parametrize("reward", ["1.0", True, math.nan, math.inf, -math.inf, 0.0, -1.0, None])
def test_the_reference_reward_is_a_correct_answers_finite_reward(reward):
    with pytest.raises(ValueError, match=r"group_contrastive: reward must be a finite number > 0 \(a correct answer's"):
        GroupContrastiveSettings(reward=reward)
    assert GroupContrastiveSettings(reward=2).reward == 2 and GroupContrastiveSettings(reward=0.5).reward == 0.5


def test_a_bad_reference_reward_in_the_config_is_refused_by_its_key():
    with pytest.raises(ValueError, match="algorithm.group_contrastive.reward: must be a finite number > 0"):
        _group_contrastive(compose_gcpo(["algorithm.group_contrastive.reward=nan"]))
    with pytest.raises(ValueError, match="algorithm.group_contrastive.reward: must be a finite number > 0"):
        _group_contrastive(compose_gcpo(["algorithm.group_contrastive.reward=correct"]))
