from pathlib import Path

import pytest

from experiments.miniature.reward import compute_score


@pytest.mark.parametrize(
    "text, score, acc",
    [("lion", 1.0, 1.0), ("lion.", 1.0, 1.0), ("apple", -1.0, 0.0), ("", -1.0, 0.0), ("lion lion", -1.0, 0.0)],
)
def test_the_reward_is_dapos_plus_minus_one_by_the_verifier(text, score, acc):
    assert compute_score("gcpo_miniature", text, "animal") == {"score": score, "acc": acc}


def test_the_reward_is_reachable_as_verls_custom_reward_function():
    """verl's own loader finds what the arms' overrides name."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from experiments.miniature.arms import ARMS, RunSpec, run_overrides

    args = dict(a.split("=", 1) for a in run_overrides(next(iter(ARMS)), 1, RunSpec(), *([Path("/x")] * 4)))
    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": args["reward.custom_reward_function.path"],
                    "name": args["reward.custom_reward_function.name"],
                },
                "reward_kwargs": {},
            }
        }
    )
    fn = get_custom_reward_fn(config)
    assert fn("gcpo_miniature", "monday", "weekday")["score"] == 1.0
    assert fn("gcpo_miniature", "june", "weekday")["score"] == -1.0
