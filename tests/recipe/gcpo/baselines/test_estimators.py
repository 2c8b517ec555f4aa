"""The baselines' registered estimators through verl's own compute_advantage: those that need only the rewards
(MC-GRPO in recipe/gcpo/baselines/mc_grpo.py, COPO's advantage blend in copo.py) and the embedding presets (DQO,
DRA-GRPO: the gcpo estimator with fixed credit keys, recipe/gcpo/config.py)."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

import recipe.gcpo.baselines.copo  # noqa: F401  (registers copo)
import recipe.gcpo.baselines.mc_grpo  # noqa: F401  (registers mc_grpo)
from gcpo_core.baselines.copo import copo_advantages
from gcpo_core.baselines.mc_grpo import median_centred_advantages
from gcpo_core.credit.grouping import layout_groups
from recipe.gcpo.checks import recipe_rules
from recipe.gcpo.estimator import compute_gcpo_outcome_advantage
from recipe.gcpo.settings import GCPOSettings
from tests.recipe.gcpo.conftest import BASE, compose_gcpo, outcome_batch

# COPO's advantage-level reading (its loss blend needs the trainer: tests/recipe/gcpo/baselines/test_copo.py)
ALGORITHM = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "copo": {"blend": "advantage"}})


@pytest.mark.parametrize("name, reference", [("copo", copo_advantages), ("mc_grpo", median_centred_advantages)])
def test_reward_only_estimators_run_in_verls_advantage_step_and_skip_padding(name, reference):
    uids = ["a"] * 4 + ["b"] * 4 + ["c"] * 4 + ["pad"] * 2
    rewards = [1, 1, 1, 1, -1, -1, -1, -1, 1, -1, -1, 1, 0, 0]
    lengths = [5] * 12 + [0, 0]
    out = compute_advantage(outcome_batch(rewards, uids, lengths, width=6), adv_estimator=name, config=ALGORITHM).batch[
        "advantages"
    ]
    assert torch.all(out[12:] == 0)
    layout = layout_groups(uids[:12])
    expected = layout.scatter(reference(layout.gather(torch.tensor(rewards[:12], dtype=torch.float64)), layout.mask))
    torch.testing.assert_close(out[:12, 0].double(), expected, atol=1e-5, rtol=0)
    assert get_adv_estimator_fn(name) is not None


def test_copo_gives_all_correct_and_all_wrong_groups_a_signal_where_grpo_gives_none():
    uids = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    rewards = [1] * 4 + [-1] * 4 + [1, -1, -1, 1]
    data = outcome_batch(rewards, uids, [5] * 12, width=6)
    copo = compute_advantage(data, adv_estimator="copo", config=ALGORITHM).batch["advantages"][:, 0]
    grpo = compute_advantage(
        outcome_batch(rewards, uids, [5] * 12, width=6), adv_estimator="grpo", config=ALGORITHM
    ).batch["advantages"][:, 0]
    assert torch.all(grpo[:8].abs() < 1e-6)
    assert torch.all(copo[:4] > 0) and torch.all(copo[4:8] < 0)


@pytest.mark.parametrize(
    "estimator, fixed",
    [
        ("dqo", {"quality": "none", "method": "loo", "advantage": "mix", "all_correct_scale": "group"}),
        ("dra_grpo", {"advantage": "dra", "all_correct_scale": "group", "epsilon": 1e-4}),
    ],
)
def test_embedding_baselines_are_gcpo_trainer_estimators_with_fixed_credit_keys(estimator, fixed):
    settings = recipe_rules(
        compose_gcpo(
            [
                f"algorithm.adv_estimator={estimator}",
                "actor_rollout_ref.rollout.n=8",
                "algorithm.gcpo.credit.mix_coef=0.25",
            ]
        )
    ).gcpo
    for key, value in fixed.items():
        assert getattr(settings.credit, key) == value
    assert settings.credit.mix_coef == 0.25
    assert get_adv_estimator_fn(estimator) is compute_gcpo_outcome_advantage
    # the recipe's trainer serves it in every mode; verl's own trainer classes refuse it as they are built
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

    colocate = compose_gcpo(
        [
            f"algorithm.adv_estimator={estimator}",
            "actor_rollout_ref.rollout.n=8",
            "trainer.v1.trainer_mode=colocate_async",
        ]
    )
    assert recipe_rules(colocate).trainer_need() is not None
    with pytest.raises(ValueError, match=f"adv_estimator={estimator} needs the GCPO trainer"):
        PPOTrainerColocateAsync(colocate)


def _estimator_advantage(estimator, rewards, score, uids):
    """The recipe's estimator on one step's credit scores, as verl calls it (the trainer provides the credit)."""
    from recipe.gcpo.estimator import StepCredit, provide_credit

    config = compose_gcpo([f"algorithm.adv_estimator={estimator}", "actor_rollout_ref.rollout.n=4"]).algorithm
    n = len(rewards)
    token_rewards = torch.zeros(n, 3, dtype=torch.float64)
    token_rewards[:, -1] = torch.tensor(rewards, dtype=torch.float64)
    credit = StepCredit(
        uids=np.array(uids, dtype=object),
        reward=np.array(rewards, dtype=np.float64),
        score=np.array(score, dtype=np.float64),
        valid=np.ones(n, dtype=bool),
        config=GCPOSettings.from_algorithm_config(config, estimator).credit,
    )
    with provide_credit(credit):
        advantage, _ = compute_gcpo_outcome_advantage(
            token_rewards, torch.ones(n, 3), np.array(uids, dtype=object), config
        )
    return advantage[:, 0].numpy()


def _by_own_std(values, epsilon):
    values = np.asarray(values, dtype=np.float64)
    return (values - values.mean()) / (values.std(ddof=1) + epsilon)


def test_dqo_normalises_every_group_by_its_own_std_all_correct_and_all_wrong_ones_included():
    """DQO (arXiv 2509.04784): the score r + alpha * d is normalised per group as GRPO normalises rewards; a group of
    equal rewards keeps a unit-scale diversity signal (under the batch scale it was 165-240x smaller)."""
    alpha = 2.0
    diversity = [0.30, 0.10, 0.05, 0.25, 0.20, 0.22, 0.01, 0.40, 0.30, 0.10, 0.05, 0.25]
    rewards = [1, 1, 1, 1, -1, -1, -1, -1, 1, -1, -1, 1]
    uids = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    score = [r + alpha * d for r, d in zip(rewards, diversity)]
    got = _estimator_advantage("dqo", rewards, score, uids)
    for g in range(3):
        rows = slice(4 * g, 4 * g + 4)
        np.testing.assert_allclose(got[rows], _by_own_std(score[rows], 1e-6), atol=1e-9)
    assert abs(got[:4]).mean() > 0.5  # all correct: a signal of GRPO's size, not 1/200 of it


def test_dra_grpo_normalises_every_group_by_its_own_std_with_the_official_epsilon():
    """DRA-GRPO (arXiv 2505.09655, xiwenc1/DRA-GRPO): r / (1 + sum of similarities), then (x - mean) / (std + 1e-4)
    per group."""
    rewards = [1.0, 1.0, 1.0, 1.0]
    similarity_sums = [2.4, 2.6, 1.2, 2.5]  # the third completion is the least like the others
    score = [r / (1 + s) for r, s in zip(rewards, similarity_sums)]
    got = _estimator_advantage("dra_grpo", rewards, score, ["a"] * 4)
    np.testing.assert_allclose(got, _by_own_std(score, 1e-4), atol=1e-9)
    assert got.argmax() == 2


def test_mc_grpo_reads_its_settings_from_the_algorithm_config_and_refuses_bad_ones():
    from recipe.gcpo.checks import validate

    uids = ["a"] * 9
    rewards = [1, -1, 1, 1, -1, 1, 1, -1, 1]  # binary, G + 1 = 9: MAD = 0
    data = outcome_batch(rewards, uids, [5] * 9, width=6)
    guarded = compute_advantage(data, adv_estimator="mc_grpo", config=compose_gcpo().algorithm).batch["advantages"]
    official_config = compose_gcpo(["algorithm.mc_grpo.mad_zero=official"]).algorithm
    official = compute_advantage(
        outcome_batch(rewards, uids, [5] * 9, width=6), adv_estimator="mc_grpo", config=official_config
    ).batch["advantages"]
    assert guarded.abs().max() < 10 and official.abs().max() > 1000
    with pytest.raises(ValueError, match="algorithm.mc_grpo.mad_zero: must be one of"):
        validate(compose_gcpo([*BASE, "algorithm.adv_estimator=mc_grpo", "algorithm.mc_grpo.mad_zero=clip"]))
