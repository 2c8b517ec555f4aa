import math

import numpy as np
import pytest
import torch

from gcpo_core.credit.compute import compute_credit, compute_group_credit
from gcpo_core.credit.config import CreditConfig
from gcpo_core.credit.quality import REWARD_LIMIT
from tests.gcpo_core.examples import run_examples
from tests.gcpo_core.helpers import clustered_embeddings


def _batch(seed=0, groups=6, size=8):
    rng = np.random.default_rng(seed)
    emb = clustered_embeddings(rng, groups, size).reshape(groups * size, -1)
    rewards = (rng.random(groups * size) < 0.6).astype(float)
    uids = [f"g{i // size}" for i in range(groups * size)]
    return rewards, torch.from_numpy(emb), uids


def test_the_example_runs():
    run_examples(compute_credit)


def test_credit_is_conserved_per_group_and_wrong_rollouts_get_zero():
    rewards, emb, uids = _batch()
    result = compute_credit(rewards, emb, uids)
    for g, key in enumerate(result.layout.keys):
        rows = [i for i, u in enumerate(uids) if u == key]
        assert float(result.shapley[rows].sum()) == pytest.approx(float(result.groups.team_value[g]), abs=1e-10)
    assert torch.all(result.shapley[torch.tensor(rewards) == 0] == 0)
    assert torch.all(result.quality == torch.tensor(rewards))


@pytest.mark.parametrize("method", ["auto", "exact", "mc", "loo"])
def test_input_order_does_not_change_anyones_credit(method):
    # groups of 20 with copies: auto credits them by Monte Carlo, whose permutations once followed the row order
    rewards, emb, uids = _batch(seed=1, groups=4, size=20)
    emb[3] = emb[5]
    rewards[3] = rewards[5]
    config = CreditConfig(method=method, permutations=16)
    base = compute_credit(rewards, emb, uids, config)
    perm = np.random.default_rng(0).permutation(len(uids))
    shuffled = compute_credit(rewards[perm], emb[perm], [uids[i] for i in perm], config)
    torch.testing.assert_close(shuffled.shapley, base.shapley[perm], rtol=0, atol=1e-12)
    torch.testing.assert_close(shuffled.shapley_stderr, base.shapley_stderr[perm], rtol=0, atol=1e-12)
    torch.testing.assert_close(shuffled.advantage, base.advantage[perm], rtol=0, atol=1e-9)


def test_identical_rollouts_get_identical_credit():
    rng = np.random.default_rng(2)
    emb = torch.from_numpy(rng.normal(size=(6, 16)))
    emb[3] = emb[1]
    emb[5] = emb[1]
    result = compute_credit([1, 1, 0, 1, 1, 1], emb, ["p"] * 6)
    assert float(result.shapley[1]) == pytest.approx(float(result.shapley[3]), abs=1e-12)
    assert float(result.shapley[1]) == pytest.approx(float(result.shapley[5]), abs=1e-12)
    assert float(result.advantage[1]) == pytest.approx(float(result.advantage[5]), abs=1e-9)


def test_contributes_false_makes_a_rollout_a_null_player():
    rewards, emb, uids = _batch(seed=3)
    rewards[:] = 1.0
    keep = np.ones(len(uids), dtype=bool)
    keep[[0, 9]] = False
    result = compute_credit(rewards, emb, uids, contributes=keep.tolist())
    assert result.shapley[0] == 0 and result.shapley[9] == 0
    assert result.quality[0] == 0 and result.advantage[0] < 0


def test_uneven_groups_and_a_group_of_one():
    emb = torch.eye(6, dtype=torch.float64)
    result = compute_credit([1, 0, 1, 1, 1, 1], emb, ["a", "a", "b", "b", "b", "c"])
    assert result.groups.size.tolist() == [2, 3, 1]
    assert float(result.shapley[5]) == pytest.approx(math.log(2))
    assert float(result.advantage[5]) == pytest.approx(math.log(2) / (1 + 1e-6))  # verl: mean 0, std 1
    assert result.groups.summary()["gcpo/singleton_groups"] == 1.0


def test_empty_batch_gives_empty_results():
    result = compute_credit([], torch.zeros(0, 8), [])
    assert result.advantage.shape == (0,) and result.metrics() == {"gcpo/groups": 0.0}


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_rewards_and_embeddings_are_rejected(bad):
    rewards, emb, uids = _batch(seed=4)
    rewards[5] = bad
    with pytest.raises(ValueError, match="rewards must be finite"):
        compute_credit(rewards, emb, uids)
    rewards, emb, uids = _batch(seed=4)
    emb[7, 3] = bad
    with pytest.raises(ValueError, match="embeddings contain NaN or inf"):
        compute_credit(rewards, emb, uids)


def test_rewards_given_as_python_floats_stay_float64():
    """torch reads a list of floats as float32: a shaped reward of 0.3 would become 0.30000001192 and 1e100
    infinity."""
    result = compute_credit([0.3, 1e100, 0.0], torch.eye(3), ["g"] * 3)
    assert result.quality.tolist() == [0.3, 1.0, 0.0]


@pytest.mark.parametrize("mode", ["shapley", "mix", "blend", "dra"])
def test_rewards_up_to_the_limit_normalise_and_larger_ones_are_refused(mode):
    config = CreditConfig(advantage=mode)
    result = compute_credit([REWARD_LIMIT, -REWARD_LIMIT, 1.0, 0.0], torch.eye(4), ["g"] * 4, config)
    assert torch.isfinite(result.advantage).all() and result.advantage.abs().max() > 0.5
    with pytest.raises(ValueError, match=r"rewards must be at most 1e\+150 in size .*first at index \[1\]: -1e\+151"):
        compute_credit([1.0, -1e151, 0.0], torch.eye(3), ["g"] * 3, config)


def test_the_largest_group_at_the_reward_limit_has_a_finite_std():
    """The limit's reason: the std of 4096 rewards (CreditConfig's largest max_group_size) of +-REWARD_LIMIT (squares of differences up to 4e300, summed)
    stays within float64."""
    from gcpo_core.credit.advantages import group_statistics

    rewards = torch.tensor([[REWARD_LIMIT, -REWARD_LIMIT] * (4096 // 2)], dtype=torch.float64)
    _, std = group_statistics(rewards, torch.ones_like(rewards, dtype=torch.bool))
    assert torch.isfinite(std).all() and std.item() == pytest.approx(REWARD_LIMIT, rel=1e-3)


def test_groups_above_the_cap_are_rejected_with_a_hint():
    emb = torch.eye(10, dtype=torch.float64)
    with pytest.raises(ValueError, match="more than max_group_size=8; check that rollouts are grouped"):
        compute_credit([1.0] * 10, emb, ["same"] * 10, CreditConfig(max_group_size=8))


def test_mismatched_lengths_are_rejected():
    with pytest.raises(ValueError, match="need rewards"):
        compute_credit([1.0, 0.0], torch.eye(3), ["a", "a", "a"])
    with pytest.raises(ValueError, match="disagree"):
        compute_group_credit(torch.zeros(2, 3), torch.zeros(2, 4, 5), torch.ones(2, 3, dtype=torch.bool))


def test_rbf_kernel_and_soft_quality_run_end_to_end():
    rewards, emb, uids = _batch(seed=5)
    soft = rewards * np.random.default_rng(0).uniform(0.3, 1.0, len(rewards))
    result = compute_credit(soft, emb, uids, CreditConfig(kernel="rbf", quality="clip"))
    assert torch.isfinite(result.advantage).all()
    assert torch.all((result.quality > 0) == torch.tensor(soft > 0))


def test_mc_and_exact_agree_within_a_percent_on_realistic_groups():
    rewards, emb, uids = _batch(seed=6, groups=32, size=12)
    rewards[:] = 1.0
    exact = compute_credit(rewards, emb, uids, CreditConfig(method="exact")).shapley
    mc = compute_credit(rewards, emb, uids, CreditConfig(method="mc", permutations=96)).shapley
    assert float(((mc - exact).abs() / exact).mean()) < 0.01


def test_results_follow_the_embedding_device_and_dtype_is_float64():
    rewards, emb, uids = _batch(seed=7)
    result = compute_credit(rewards, emb.float(), uids)
    assert result.advantage.dtype == torch.float64 and result.advantage.device == emb.device


def test_a_contributes_mask_of_the_wrong_length_is_rejected():
    rewards, emb, uids = _batch(seed=8)
    with pytest.raises(ValueError, match="contributes"):
        compute_credit(rewards, emb, uids, contributes=[True] * (len(uids) + 1))
    with pytest.raises(ValueError, match="contributes"):
        compute_credit(rewards, emb, uids, contributes=[True] * (len(uids) - 1))


@pytest.mark.parametrize("bad_id", [None, float("nan")])
def test_missing_group_ids_are_rejected_not_merged(bad_id):
    emb = torch.eye(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="group id of row 2"):
        compute_credit([1.0, 0.0, 1.0, 1.0], emb, ["a", "a", bad_id, bad_id])


def test_inputs_that_require_grad_are_detached():
    rewards, emb, uids = _batch(seed=9)
    emb = emb.clone().requires_grad_(True)
    r = torch.tensor(rewards, requires_grad=True)
    result = compute_credit(r, emb, uids)
    assert not result.advantage.requires_grad and torch.isfinite(result.advantage).all()


@pytest.mark.parametrize(
    "rewards, embeddings, message",
    [
        (["1", "0"], torch.eye(2), "rewards must be real numbers"),
        ([1.0, 0.0], torch.eye(2, dtype=torch.complex64), "embeddings must be real numbers"),
        ([1.0, 0.0], torch.eye(2, dtype=torch.bool), "embeddings must be real numbers"),
        (torch.tensor([1 + 0j, 0j]), torch.eye(2), "rewards must be real numbers"),
    ],
)
def test_bad_dtypes_fail_up_front_with_one_message(rewards, embeddings, message):
    with pytest.raises(ValueError, match=message):
        compute_credit(rewards, embeddings, ["g", "g"])


@pytest.mark.parametrize("method", ["exact", "mc", "loo", "auto"])
@pytest.mark.parametrize("mode", ["shapley", "mix", "blend", "dra"])
def test_a_length_penalised_correct_answer_gets_less_advantage_than_the_same_short_one(mode, method):
    # DAPO's overlong penalty (verl's DAPO reward manager, as every baseline trains with it): a correct answer of
    # ~6,000 tokens out of 8,192 with the penalty from 4,096 scores 0.535. The two answers embed identically;
    # the binary quality map gave them identical credit, so GCPO alone ignored the shaping
    rng = np.random.default_rng(10)
    emb = torch.from_numpy(clustered_embeddings(rng, 1, 8)[0])
    emb[1] = emb[0]  # the long answer says the same as the short one
    rewards = np.array([1.0, 0.535, 1.0, 1.0, 1.0, 1.0, -1.0, -1.0])
    config = CreditConfig(method=method, advantage=mode, permutations=64)
    result = compute_credit(rewards, emb, ["p"] * 8, config)
    assert float(result.advantage[1]) < float(result.advantage[0])
    assert float(result.quality[1]) == pytest.approx(0.535) and float(result.quality[0]) == 1.0
    # the identical unpenalised copy would share the short answer's credit exactly
    same = compute_credit(np.where(np.arange(8) == 1, 1.0, rewards), emb, ["p"] * 8, config)
    assert same.advantage[1] == same.advantage[0]


def test_engine_presets_for_dqo_dra_and_the_ablations_run_end_to_end():
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.7, 0.7]], dtype=torch.float64)
    rewards = [1.0, 1.0, 1.0, -1.0]
    dqo = compute_credit(
        rewards, emb, ["g"] * 4, CreditConfig(quality="none", method="loo", advantage="mix", mix_coef=0.5)
    )
    assert dqo.shapley[3] > 0  # the wrong answer adds diversity too: DQO does not look at correctness
    dra = compute_credit(rewards, emb, ["g"] * 4, CreditConfig(advantage="dra"))
    assert dra.score[2] > dra.score[0]  # the unique correct one is divided by less
    bonus = compute_credit(rewards, emb, ["g"] * 4, CreditConfig(advantage="mix", mix_coef=0.1))
    assert bonus.advantage[3] < 0 < bonus.advantage[2]
