"""The registered ``gcpo`` estimator through verl's own ``compute_advantage``."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage

from gcpo_core.credit.compute import compute_credit
from gcpo_core.credit.config import CreditConfig
from recipe.gcpo.estimator import StepCredit, compute_gcpo_outcome_advantage, provide_credit
from tests.gcpo_core.helpers import clustered_embeddings
from tests.recipe.gcpo.conftest import outcome_batch

ALGORITHM = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "gcpo": {"credit": {"epsilon": 1e-6, "std_floor": 0.0}}})


def _credit(rewards, uids, embeddings, valid=None, config=CreditConfig()):
    """The step's credit as the trainer hands it over: with the credit config it was computed with."""
    valid = np.ones(len(rewards), dtype=bool) if valid is None else np.asarray(valid)
    rows = np.flatnonzero(valid)
    result = compute_credit(np.asarray(rewards)[rows], embeddings[rows], [uids[i] for i in rows], config)
    score = np.zeros(len(rewards))
    score[rows] = result.score.numpy()
    return StepCredit(np.array(uids, dtype=object), np.asarray(rewards, dtype=float), score, valid, config)


def _verl(data, estimator):
    out = compute_advantage(data, adv_estimator=estimator, norm_adv_by_std_in_grpo=True, config=ALGORITHM)
    return out.batch["advantages"]


def test_registered_in_verls_registry():
    assert get_adv_estimator_fn("gcpo") is compute_gcpo_outcome_advantage


def test_one_correct_rollout_per_group_gives_verls_grpo_advantages():
    rng = np.random.default_rng(0)
    uids = [f"p{g}" for g in range(6) for _ in range(5)]
    rewards = [-1.0] * 30
    for g in range(6):
        rewards[g * 5 + int(rng.integers(0, 5))] = 1.0
    emb = torch.from_numpy(clustered_embeddings(rng, 6, 5).reshape(30, -1))
    with provide_credit(_credit(rewards, uids, emb)):
        gcpo = _verl(outcome_batch(rewards, uids), "gcpo")
    grpo = _verl(outcome_batch(rewards, uids), "grpo")
    torch.testing.assert_close(gcpo, grpo, atol=1e-5, rtol=0)


def test_all_correct_groups_with_redundancy_get_a_signal_grpo_does_not_give():
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    uids = ["g"] * 4
    rewards = [1.0] * 4
    with provide_credit(_credit(rewards, uids, emb)):
        gcpo = _verl(outcome_batch(rewards, uids), "gcpo")[:, 0]
    assert torch.all(_verl(outcome_batch(rewards, uids), "grpo") == 0)
    # copies share log 4 (phi = log(4)/3 each), the distinct solution keeps log 2: the copies go down, normalised
    # by the group's own spread (the default, all_correct_scale=group) as GRPO normalises rewards
    phi = np.array([np.log(4) / 3] * 3 + [np.log(2)])
    np.testing.assert_allclose(gcpo.numpy(), (phi - phi.mean()) / (phi.std(ddof=1) + 1e-6), atol=1e-5)
    # with the batch scale and alone in its batch (no right-vs-wrong spread to measure it against) the group is
    # only centred, in nats; the scale travels with the credit, not in the algorithm config verl passes
    batch = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "gcpo": {"credit": {"all_correct_scale": "batch"}}})
    with provide_credit(_credit(rewards, uids, emb, config=CreditConfig(all_correct_scale="batch"))):
        data = outcome_batch(rewards, uids)
        centred, _ = compute_gcpo_outcome_advantage(
            data.batch["token_level_rewards"],
            data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            config=batch,
        )
    np.testing.assert_allclose(centred[:, 0].numpy(), phi - phi.mean(), atol=1e-6)


def _step_credit(rewards, emb, uids, config):
    """The engine's result and the credit of a step as the trainer hands it to the estimator (every row valid)."""
    engine = compute_credit(rewards, emb, uids, config)
    return engine, StepCredit(
        np.array(uids, dtype=object),
        rewards,
        engine.score.numpy(),
        np.ones(len(uids), dtype=bool),
        config=config,
        stderr=engine.shapley_stderr.numpy(),
    )


@pytest.mark.parametrize("method", ["exact", "mc"])
@pytest.mark.parametrize("all_correct_scale", ["batch", "group"])
def test_the_estimator_applies_exactly_the_engines_normalisation(method, all_correct_scale):
    # a batch of all-correct, mixed and all-wrong groups; mc's standard errors reach the noise floor too
    rng = np.random.default_rng(5)
    groups, size = 8, 6
    uids = [f"p{g}" for g in range(groups) for _ in range(size)]
    rewards = np.where(rng.random(groups * size) < 0.6, 1.0, -1.0)
    rewards[:size] = 1.0
    rewards[size : 2 * size] = -1.0
    emb = torch.from_numpy(clustered_embeddings(rng, groups, size).reshape(groups * size, -1))
    config = CreditConfig(method=method, permutations=8, all_correct_scale=all_correct_scale)
    engine, credit = _step_credit(rewards, emb, uids, config)
    algorithm = OmegaConf.create(
        {
            "norm_adv_by_std_in_grpo": True,
            "gcpo": {"credit": {"method": method, "permutations": 8, "all_correct_scale": all_correct_scale}},
        }
    )
    data = outcome_batch(rewards.tolist(), uids)
    with provide_credit(credit):
        adv = compute_advantage(data, adv_estimator="gcpo", norm_adv_by_std_in_grpo=True, config=algorithm)
    np.testing.assert_allclose(adv.batch["advantages"][:, 0].numpy(), engine.advantage.numpy(), rtol=0, atol=1e-6)
    if method == "mc":
        assert float(engine.shapley_stderr.max()) > 0


def test_padding_rows_are_left_out_and_stay_zero():
    rng = np.random.default_rng(1)
    uids = ["a"] * 3 + ["b"] * 3 + ["pad0"] * 2
    rewards = [1.0, -1.0, 1.0, -1.0, 1.0, 1.0, 0.0, 0.0]
    valid = [True] * 6 + [False] * 2
    emb = torch.from_numpy(rng.normal(size=(8, 16)))
    data = outcome_batch(rewards, uids, lengths=[6] * 6 + [0, 0])
    with provide_credit(_credit(rewards, uids, emb, valid)):
        adv = _verl(data, "gcpo")
    assert torch.all(adv[6:] == 0)
    with provide_credit(_credit(rewards[:6], uids[:6], emb[:6])):
        clean = _verl(outcome_batch(rewards[:6], uids[:6]), "gcpo")
    torch.testing.assert_close(adv[:6], clean, atol=1e-6, rtol=0)


def test_without_credit_it_names_the_entry_point_to_use():
    with pytest.raises(RuntimeError, match="python -m recipe.gcpo.main_gcpo"):
        _verl(outcome_batch([1.0, 0.0], ["a", "a"]), "gcpo")


def test_credit_for_another_batch_is_refused():
    emb = torch.eye(3, dtype=torch.float64)
    credit = _credit([1.0, 0.0, 1.0], ["a", "a", "b"], emb)
    with provide_credit(credit), pytest.raises(RuntimeError, match="another batch"):
        _verl(outcome_batch([1.0, 0.0, 1.0], ["a", "b", "a"]), "gcpo")
    with provide_credit(credit), pytest.raises(RuntimeError, match="covers 3 rows but the batch has 2"):
        _verl(outcome_batch([1.0, 0.0], ["a", "a"]), "gcpo")


def test_dr_grpo_switch_and_std_floor_travel_with_the_credit_parsed_from_the_algorithm_config():
    """The trainer parses ``algorithm`` once (verl's norm_adv_by_std_in_grpo, algorithm.gcpo.credit) and hands the
    result over with each step's credit; the estimator applies it, whatever config verl passes it."""
    from recipe.gcpo.settings import GCPOSettings

    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    uids, rewards = ["g"] * 3, [1.0] * 3
    data = outcome_batch(rewards, uids)
    centred = OmegaConf.create({"norm_adv_by_std_in_grpo": False})
    credit = _credit(rewards, uids, emb, config=GCPOSettings.from_algorithm_config(centred).credit)
    with provide_credit(credit):
        adv, _ = compute_gcpo_outcome_advantage(
            data.batch["token_level_rewards"],
            data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            config=centred,
        )
    np.testing.assert_allclose(adv[:, 0].numpy(), credit.score - credit.score.mean(), atol=1e-6)
    floored = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "gcpo": {"credit": {"std_floor": 10.0}}})
    credit = _credit(rewards, uids, emb, config=GCPOSettings.from_algorithm_config(floored).credit)
    with provide_credit(credit):
        adv, _ = compute_gcpo_outcome_advantage(
            data.batch["token_level_rewards"],
            data.batch["response_mask"],
            index=data.non_tensor_batch["uid"],
            config=floored,
        )
    assert float(adv.abs().max()) < 0.02


def _kl_shaped(rewards, uids, seed=0, beta=0.3):
    """A batch as verl hands it over with ``use_kl_in_reward``: the verifier reward on the last token minus a per-token
    KL penalty on every response token (verl's ``apply_kl_penalty``)."""
    data = outcome_batch(list(rewards), uids)
    kl = torch.from_numpy(np.random.default_rng(seed).random(data.batch["response_mask"].shape)).float()
    data.batch["token_level_rewards"] = data.batch["token_level_rewards"] - beta * kl * data.batch["response_mask"]
    return data


@pytest.mark.parametrize("method", ["exact", "mc"])
@pytest.mark.parametrize("all_correct_scale", ["batch", "group"])
def test_blend_through_verl_is_the_engines_blend_and_its_ends_are_grpo_and_the_credit(method, all_correct_scale):
    rng = np.random.default_rng(6)
    groups, size = 6, 6
    uids = [f"p{g}" for g in range(groups) for _ in range(size)]
    rewards = np.where(rng.random(groups * size) < 0.6, 1.0, -1.0)
    rewards[:size] = 1.0  # an all-correct group, GRPO's advantage 0
    emb = torch.from_numpy(clustered_embeddings(rng, groups, size).reshape(groups * size, -1))
    out = {}
    for w in (0.0, 0.3, 1.0):
        config = CreditConfig(
            method=method, permutations=8, all_correct_scale=all_correct_scale, advantage="blend", blend_weight=w
        )
        engine, credit = _step_credit(rewards, emb, uids, config)
        with provide_credit(credit):
            out[w] = _verl(outcome_batch(rewards.tolist(), uids), "gcpo")[:, 0].double().numpy()
        np.testing.assert_allclose(out[w], engine.advantage.numpy(), rtol=0, atol=1e-6)
    grpo = _verl(outcome_batch(rewards.tolist(), uids), "grpo")[:, 0].double().numpy()
    np.testing.assert_allclose(out[0.0], grpo, rtol=0, atol=1e-6)
    assert np.all(out[0.0][:size] == 0) and np.abs(out[1.0][:size]).max() > 0.1
    np.testing.assert_allclose(out[0.3], 0.7 * out[0.0] + 0.3 * out[1.0], rtol=0, atol=1e-6)


def test_kl_in_reward_shapes_both_parts_of_the_blend_as_it_shapes_grpo():
    """With verl's KL shaping in the token-level reward, blend's GRPO part is verl's GRPO advantage of the shaped
    reward and its credit part the shapley mode's advantage of the shaped credit score: w = 0 is verl's GRPO of the
    same batch, w = 1 the shapley mode's, and between them the weighted sum."""
    rng = np.random.default_rng(8)
    uids = [f"p{g}" for g in range(4) for _ in range(5)]
    rewards = np.where(rng.random(20) < 0.6, 1.0, -1.0)
    rewards[:5] = 1.0
    emb = torch.from_numpy(clustered_embeddings(rng, 4, 5).reshape(20, -1))

    def estimator(config):
        data = _kl_shaped(rewards, uids)
        with provide_credit(_credit(rewards.tolist(), uids, emb, config=config)):
            adv, _ = compute_gcpo_outcome_advantage(
                data.batch["token_level_rewards"], data.batch["response_mask"], index=data.non_tensor_batch["uid"]
            )
        return adv[:, 0].double().numpy()

    shaped_grpo = _verl(_kl_shaped(rewards, uids), "grpo")[:, 0].double().numpy()
    plain_grpo = _verl(outcome_batch(rewards.tolist(), uids), "grpo")[:, 0].double().numpy()
    assert np.abs(shaped_grpo - plain_grpo).max() > 0.05  # the shaping moves GRPO's advantages: the test can fail
    zero = estimator(CreditConfig(advantage="blend", blend_weight=0.0))
    np.testing.assert_allclose(zero, shaped_grpo, rtol=0, atol=1e-5)
    credit = estimator(CreditConfig(advantage="shapley"))
    np.testing.assert_allclose(estimator(CreditConfig(advantage="blend", blend_weight=1.0)), credit, rtol=0, atol=0)
    half = estimator(CreditConfig(advantage="blend", blend_weight=0.4))
    np.testing.assert_allclose(half, 0.6 * zero + 0.4 * credit, rtol=0, atol=1e-6)
