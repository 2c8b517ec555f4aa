"""``credit.advantage=blend``: (1 - w) * GRPO's advantage + w * the ``shapley`` mode's, a dose that reaches every
group (issue 72). ``mix`` cannot be turned down to GRPO in an all-correct group (its reward is constant, so its own
std normalises ``r + lambda * phi`` to phi's advantage whatever lambda is); ``blend`` can, and moves linearly."""

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from gcpo_core.credit.advantages import (
    NOISE_FLOOR,
    blend_with_grpo,
    credit_advantages,
    group_normalize,
    normalize_credit,
    score_stderr,
)
from gcpo_core.credit.compute import compute_credit, compute_group_credit
from gcpo_core.credit.config import CreditConfig
from tests.gcpo_core.helpers import clustered_embeddings


def _batch(seed: int = 0):
    """Uneven groups, rows interleaved: all correct with an exact copy (8), mixed (5), all wrong (6), one correct
    among shaped rewards (4), a group of one (1), mixed (3)."""
    rng = np.random.default_rng(seed)
    sizes = [8, 5, 6, 4, 1, 3]
    rewards, rows, uids = [], [], []
    for g, size in enumerate(sizes):
        emb = clustered_embeddings(rng, 1, size)[0]
        if g == 0:
            reward = np.ones(size)
            emb[3] = emb[1]
        elif g == 2:
            reward = -np.ones(size)
        elif g == 3:
            reward = np.array([1.0, 0.535, -1.0, -1.0])
        elif g == 4:
            reward = np.ones(1)
        else:
            reward = np.where(rng.random(size) < 0.5, 1.0, -1.0)
            reward[0], reward[-1] = 1.0, -1.0
        rewards += list(reward)
        rows += list(emb)
        uids += [f"p{g}"] * size
    order = rng.permutation(len(uids))
    return np.asarray(rewards)[order], torch.from_numpy(np.asarray(rows)[order]), [uids[i] for i in order]


def _verl_grpo(rewards: np.ndarray, uids: list, norm_by_std: bool = True) -> np.ndarray:
    """verl 0.9.1's own GRPO advantage of outcome rewards (float32, on the last response token)."""
    token_rewards = torch.zeros(len(rewards), 3)
    token_rewards[:, -1] = torch.tensor(rewards, dtype=torch.float32)
    adv, _ = compute_grpo_outcome_advantage(
        token_rewards, torch.ones(len(rewards), 3), np.array(uids, dtype=object), norm_adv_by_std_in_grpo=norm_by_std
    )
    return adv[:, -1].double().numpy()


def _advantage(rewards, emb, uids, **config) -> np.ndarray:
    return compute_credit(rewards, emb, uids, CreditConfig(**config)).advantage.numpy()


@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("method", ["exact", "mc", "loo"])
def test_weight_zero_is_grpo_and_weight_one_is_the_credit_alone_exactly(method, norm_by_std):
    rewards, emb, uids = _batch()
    common = dict(method=method, permutations=16, norm_by_std=norm_by_std)
    zero = _advantage(rewards, emb, uids, advantage="blend", blend_weight=0.0, **common)
    np.testing.assert_allclose(zero, _verl_grpo(rewards, uids, norm_by_std), rtol=0, atol=2e-6)  # verl: float32
    in_groups = np.array(uids)
    for g in set(uids):  # and GRPO's in float64, per group (a group of one: verl's mean 0, std 1)
        r = rewards[in_groups == g]
        mean, std = (r.mean(), r.std(ddof=1)) if len(r) > 1 else (0.0, 1.0)
        expected = (r - mean) / (std + 1e-6) if norm_by_std else r - mean
        np.testing.assert_allclose(zero[in_groups == g], expected, rtol=0, atol=1e-12)
    all_correct = np.isin(in_groups, ["p0"])
    assert np.all(zero[all_correct] == 0.0)  # GRPO gives an all-correct group exactly nothing
    one = _advantage(rewards, emb, uids, advantage="blend", blend_weight=1.0, **common)
    shapley = _advantage(rewards, emb, uids, advantage="shapley", **common)
    assert np.array_equal(one, shapley)  # bit for bit: GRPO's part is multiplied by exactly 0
    assert np.abs(shapley[all_correct]).max() > 0.01  # so the two ends differ where it matters (nats if centred)


@pytest.mark.parametrize("all_correct_scale", ["group", "batch"])
def test_between_the_ends_every_group_moves_linearly_with_the_weight(all_correct_scale):
    rewards, emb, uids = _batch(1)
    common = dict(all_correct_scale=all_correct_scale)
    grpo = _advantage(rewards, emb, uids, advantage="blend", blend_weight=0.0, **common)
    credit = _advantage(rewards, emb, uids, advantage="shapley", **common)
    all_correct = np.array(uids) == "p0"
    previous = 0.0
    for w in (0.01, 0.1, 0.37, 0.5, 0.8):
        blend = _advantage(rewards, emb, uids, advantage="blend", blend_weight=w, **common)
        np.testing.assert_allclose(blend, (1 - w) * grpo + w * credit, rtol=0, atol=1e-12)
        # the all-correct group: w times the credit's push, so it vanishes as w -> 0 and grows with w
        np.testing.assert_allclose(blend[all_correct], w * credit[all_correct], rtol=0, atol=1e-13)
        distance = float(np.abs(blend - grpo).max())
        assert distance > previous
        previous = distance


def test_mix_has_a_floor_in_all_correct_groups_and_blend_has_none():
    """The issue's floor: an all-correct group gets phi's advantage under mix whatever lambda is. Exactly: its
    score is a constant plus lambda * phi, so (lambda * (phi - mean)) / (lambda * std + eps) is phi's advantage with
    epsilon eps / lambda, and lambda acts only through epsilon."""
    rewards, emb, uids = _batch(2)
    all_correct = np.array(uids) == "p0"
    credit = _advantage(rewards, emb, uids, advantage="shapley")[all_correct]
    for lam in (0.01, 1.0, 100.0):
        mix = _advantage(rewards, emb, uids, advantage="mix", mix_coef=lam)[all_correct]
        same = _advantage(rewards, emb, uids, advantage="shapley", epsilon=1e-6 / lam)[all_correct]
        np.testing.assert_allclose(mix, same, rtol=1e-9, atol=1e-12)
        assert np.abs(mix).max() > 0.99 * np.abs(credit).max()  # lambda = 0.01 keeps 99 % of the credit's push
    for w in (0.01, 1.0):
        blend = _advantage(rewards, emb, uids, advantage="blend", blend_weight=w)[all_correct]
        np.testing.assert_allclose(blend, w * credit, rtol=0, atol=1e-13)


@pytest.mark.parametrize("method", ["exact", "mc"])
def test_the_blend_does_not_depend_on_the_order_of_rows(method):
    rewards, emb, uids = _batch(3)
    config = CreditConfig(method=method, permutations=16, advantage="blend", blend_weight=0.3)
    first = compute_credit(rewards, emb, uids, config).advantage.numpy()
    order = np.random.default_rng(9).permutation(len(uids))
    again = compute_credit(rewards[order], emb[order], [uids[i] for i in order], config).advantage.numpy()
    np.testing.assert_allclose(again, first[order], rtol=0, atol=1e-12)


def test_padding_slots_stay_zero_and_change_nothing():
    rng = np.random.default_rng(4)
    emb = torch.from_numpy(clustered_embeddings(rng, 2, 6))
    rewards = torch.tensor([[1.0] * 6, [1.0, -1.0, 1.0, -1.0, 1.0, -1.0]], dtype=torch.float64)
    config = CreditConfig(advantage="blend", blend_weight=0.4)
    tight = compute_group_credit(rewards[:, :4], emb[:, :4], torch.ones(2, 4, dtype=torch.bool), config).advantage
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[:, 4:] = False
    padded = compute_group_credit(rewards, emb, mask, config).advantage
    assert torch.all(padded[:, 4:] == 0)
    torch.testing.assert_close(padded[:, :4], tight, rtol=0, atol=1e-12)


def test_the_credit_part_keeps_the_monte_carlo_noise_floor():
    """blend's score is phi, so its standard error is phi's (not scaled like mix's) and the credit part is never
    scaled by less than NOISE_FLOOR of them; GRPO's part of the reward has no noise and no floor."""
    stderr = torch.full((2, 4), 0.002, dtype=torch.float64)
    assert torch.equal(score_stderr(stderr, "blend", mix_coef=7.0), stderr)
    phi = torch.tensor([[0.400, 0.402, 0.398, 0.401], [0.69, 0.0, 0.0, 0.0]], dtype=torch.float64)
    rewards = torch.tensor([[1.0] * 4, [1.0, -1.0, -1.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(2, 4, dtype=torch.bool)
    _, blend = credit_advantages(rewards, phi, mask, mode="blend", blend_weight=0.5, stderr=stderr)
    _, credit = credit_advantages(rewards, phi, mask, mode="shapley", stderr=stderr)
    unfloored = normalize_credit(phi, mask, rewards)
    assert float(unfloored[0].abs().max()) > 0.9 and float(credit[0].abs().max()) < 0.3  # the floor is on
    deviation = float((phi[0] - phi[0].mean()).abs().max())
    assert float(blend[0].abs().max()) <= 0.5 * deviation / (NOISE_FLOOR * 0.002) + 1e-12
    torch.testing.assert_close(blend, 0.5 * group_normalize(rewards, mask) + 0.5 * credit, rtol=0, atol=1e-12)


def test_the_grpo_part_is_the_reward_it_is_given_and_the_weight_is_checked():
    credit = torch.tensor([[0.5, -0.5, 0.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    shaped = torch.tensor([[0.9, -1.1, 1.0]], dtype=torch.float64)  # a reward with verl's KL shaping in it
    got = blend_with_grpo(credit, shaped, mask, 0.25)
    torch.testing.assert_close(got, 0.75 * group_normalize(shaped, mask) + 0.25 * credit, rtol=0, atol=1e-15)
    for bad in (-0.01, 1.01, float("nan")):
        with pytest.raises(ValueError, match="blend weight must be in"):
            blend_with_grpo(credit, shaped, mask, bad)


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan"), float("inf"), "0.5", True])
def test_a_bad_weight_is_refused_in_one_line_naming_the_field(value):
    with pytest.raises(ValueError, match=r"^credit config: blend_weight must be in \[0.0, 1.0\], got "):
        CreditConfig(advantage="blend", blend_weight=value)
