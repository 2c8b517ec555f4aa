"""COPO's loss blend in verl 0.9.1's actor loss (recipe/gcpo/baselines/copo.py): against the official per-token formula
written out by hand, the batch terms from the reward's verdicts and answers, the estimator and the start-up checks."""

import math
import pickle

import numpy as np
import pytest
import torch
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.losses import ppo_loss

from gcpo_core.baselines.copo import copo_terms
from recipe.gcpo.baselines.copo import (
    CopoSettings,
    compute_copo_outcome_advantage,
    copo_loss_fn,
    provide_copo,
    step_copo,
)
from recipe.gcpo.checks import recipe_rules, validate
from recipe.gcpo.settings import RecipeSettings
from tests.recipe.gcpo.baselines.test_div_r1 import (
    DYNAMIC_BSZ,
    PROMPT_LENS,
    RESPONSE_LENS,
    _micro_batch,
    _nested,
    _rows,
)
from tests.recipe.gcpo.conftest import compose_gcpo

# the launchers' loss settings (scripts/common.sh): clip-higher, dual clip, token-mean
LOSS = [
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.clip_ratio_c=10.0",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
]
COPO = ["algorithm.adv_estimator=copo", "actor_rollout_ref.rollout.n=4"]  # COPO compares a prompt's rollouts
LOCAL = [0.9, -1.2, 0.4, -0.3]  # A_local per row
GLOBAL = [0.7, 0.7, -0.5, -0.5]  # A_global per row (rows 0-1 one prompt, rows 2-3 another)
WEIGHT = [0.6, 0.0, 0.25, 0.0]  # w per row (soft_with_zero: wrong rows 1 and 3 get 0)


def _ppo_clip(advantage, ratio, low=0.2, high=0.28, dual=10.0):
    """PPO-clip with clip-higher and dual clip, one token, as the official compute_policy_loss_with_global."""
    clipped = max(-advantage * ratio, -advantage * min(max(ratio, 1 - low), 1 + high))
    return min(-advantage * dual, clipped) if advantage < 0 else clipped


def _official_blend():
    """sum over tokens of w L(A_local) + (1 - w) L(A_global), divided by the token count (token-mean)."""
    old, new = _rows(0)
    total = 0.0
    for i in range(4):
        for n, o in zip(new[i].tolist(), old[i].tolist()):
            ratio = math.exp(n - o)
            total += WEIGHT[i] * _ppo_clip(LOCAL[i], ratio) + (1 - WEIGHT[i]) * _ppo_clip(GLOBAL[i], ratio)
    return total / sum(RESPONSE_LENS)


def _copo_batch(rows=None, global_info=None):
    rows = list(range(len(RESPONSE_LENS))) if rows is None else rows
    data, output, flat = _micro_batch(rows, global_info=global_info)
    data["advantages"] = _nested(
        [torch.full((RESPONSE_LENS[i],), WEIGHT[i] * LOCAL[i], dtype=torch.float64) for i in rows]
    )
    data["copo_global_advantages"] = _nested(
        [torch.full((RESPONSE_LENS[i],), (1 - WEIGHT[i]) * GLOBAL[i], dtype=torch.float64) for i in rows]
    )
    return data, output, flat


def copo_loss_settings(config):
    """``algorithm.copo`` (parsed under every estimator) when ``copo`` trains with the loss blend, else None."""
    settings = RecipeSettings.parse(config).blocks["copo"]
    return settings if config.algorithm.adv_estimator == "copo" and settings.blend == "loss" else None


@pytest.fixture(scope="module")
def loss_fn():
    config = compose_gcpo(DYNAMIC_BSZ + LOSS + COPO)
    return copo_loss_fn(config, copo_loss_settings(config))


def test_the_loss_is_the_official_per_token_blend_aggregated_once(loss_fn):
    data, output, _ = _copo_batch()
    loss, metrics = loss_fn(model_output=output, data=data)
    assert loss.item() == pytest.approx(_official_blend(), rel=1e-9)
    assert "actor/pg_loss" in metrics and "actor/copo_global_pg_loss" in metrics


def test_wrong_rows_learn_from_the_global_loss_alone(loss_fn):
    """A wrong row (w = 0) gets the gradient of L(A_global) only; its local advantage does not reach it."""
    data, output, flat = _copo_batch()
    data["copo_global_advantages"] = _nested([torch.zeros(r, dtype=torch.float64) for r in RESPONSE_LENS])
    loss, _ = loss_fn(model_output=output, data=data)
    grad = torch.autograd.grad(loss, flat)[0].split([p + r for p, r in zip(PROMPT_LENS, RESPONSE_LENS)])
    assert torch.all(grad[1] == 0) and torch.all(grad[3] == 0)
    assert torch.all(grad[0][1:5] != 0)


def test_the_entropy_bonus_and_kl_loss_are_counted_once():
    config = compose_gcpo(DYNAMIC_BSZ + LOSS + COPO + ["actor_rollout_ref.actor.entropy_coeff=0.01"])
    fn = copo_loss_fn(config, copo_loss_settings(config))
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    entropy = torch.rand(sum(PROMPT_LENS) + sum(RESPONSE_LENS), dtype=torch.float64)
    data, output, _ = _copo_batch()
    output["entropy"] = torch.nested.nested_tensor_from_jagged(entropy, offsets=output["log_probs"].offsets())
    loss, _ = fn(model_output=output, data=data)
    data, output2, _ = _copo_batch()
    output2["entropy"] = output["entropy"]
    with_bonus, _ = ppo_loss(actor, output2, data)
    plain = omega_conf_to_dataclass(compose_gcpo(DYNAMIC_BSZ + LOSS + COPO).actor_rollout_ref.actor)
    data, output3, _ = _copo_batch()
    without, _ = ppo_loss(plain, output3, data)
    bonus = (without - with_bonus).item()
    assert bonus > 0
    assert loss.item() == pytest.approx(_official_blend() - bonus, rel=1e-9)


def test_micro_batches_sum_to_the_mini_batch_loss_with_verls_normalisers(loss_fn):
    info = {"dp_size": 1, "batch_num_tokens": sum(RESPONSE_LENS), "global_batch_size": len(RESPONSE_LENS)}
    parts = []
    for rows in ([0, 1], [2, 3]):
        data, output, _ = _copo_batch(rows, global_info=info)
        parts.append(loss_fn(model_output=output, data=data)[0].item())
    assert sum(parts) == pytest.approx(_official_blend(), rel=1e-9)


def test_a_batch_without_the_global_advantages_is_refused_clearly(loss_fn):
    data, output, _ = _micro_batch()
    with pytest.raises(RuntimeError, match="copo_global_advantages"):
        loss_fn(model_output=output, data=data)


def test_the_loss_function_survives_pickling_and_leaves_the_actor_config_alone(loss_fn):
    clone = pickle.loads(pickle.dumps(loss_fn))
    data, output, _ = _copo_batch()
    assert clone(model_output=output, data=data)[0].item() == pytest.approx(_official_blend(), rel=1e-9)
    assert loss_fn.keywords["global_config"].entropy_coeff == 0 and not loss_fn.keywords["global_config"].use_kl_loss
    assert loss_fn.keywords["config"].clip_ratio_high == 0.28


def _extras(acc, pred):
    return [{"reward_extra_info": {"acc": a, "pred": p, "score": 0.0}} for a, p in zip(acc, pred)]


def test_step_terms_come_from_the_rewards_verdicts_and_answers():
    uids = ["a", "b", "a", "pad", "b", "a", "b", "a", "b"]
    scores = np.array([1.0, -1.0, 1.0, 0.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    acc = [True, False, True, None, False, True, True, False, False]
    pred = ["5", "3", "5", None, "4", "5", "2", "7", "8"]
    valid = np.array([u != "pad" for u in uids])
    step = step_copo(uids, scores, _extras(acc, pred), valid, CopoSettings())
    a, b = [0, 2, 5, 7], [1, 4, 6, 8]
    terms = copo_terms(
        torch.tensor(np.stack([scores[a], scores[b]])),
        torch.tensor([[bool(acc[i]) for i in g] for g in (a, b)]),
        torch.tensor([[5, 5, 5, 7], [3, 4, 2, 8]]),
        torch.ones(2, 4, dtype=torch.bool),
    )
    for group, row in ((a, 0), (b, 1)):
        w = terms.local_weight[row].numpy()
        np.testing.assert_allclose(step.local[group], w * terms.local_advantage[row].numpy(), atol=1e-12)
        np.testing.assert_allclose(step.global_[group], (1 - w) * terms.global_advantage[row].numpy(), atol=1e-12)
    assert step.local[3] == step.global_[3] == 0  # verl's padding row
    assert step.metrics["copo/answer_entropy/mean"] == pytest.approx((0.8112781 * 4 + 2.0 * 4) / 8, rel=1e-6)


def test_a_reward_without_verdict_or_answer_is_a_clear_error():
    extras = _extras([True, False], ["1", "2"])
    del extras[1]["reward_extra_info"]["pred"]
    with pytest.raises(RuntimeError, match="'acc' and 'pred'"):
        step_copo(["a", "a"], np.array([1.0, -1.0]), extras, np.array([True, True]), CopoSettings())


def test_the_estimator_returns_the_weighted_local_advantage_it_was_given():
    config = compose_gcpo(COPO).algorithm
    uids = ["a", "a", "b", "b"]
    step = step_copo(
        uids,
        np.array([1.0, -1.0, 1.0, 1.0]),
        _extras([True, False, True, True], ["1", "2", "3", "4"]),
        np.ones(4, dtype=bool),
        CopoSettings(),
    )
    rewards, mask = torch.zeros(4, 3), torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    index = np.array(uids, dtype=object)
    with pytest.raises(RuntimeError, match="recipe.gcpo.main_gcpo"):
        compute_copo_outcome_advantage(rewards, mask, index=index, config=config)
    with provide_copo(step):
        adv, _ = compute_copo_outcome_advantage(rewards, mask, index=index, config=config)
        with pytest.raises(RuntimeError, match="another batch"):
            compute_copo_outcome_advantage(rewards, mask, index=index[::-1].copy(), config=config)
    torch.testing.assert_close(adv, torch.tensor(step.local, dtype=torch.float32).unsqueeze(-1) * mask)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.copo.gate=soft-with-zero"], "algorithm.copo.gate"),
        (["algorithm.copo.k=.nan"], "algorithm.copo.k"),
        (["algorithm.copo.blend=both"], "algorithm.copo.blend"),
        (["+algorithm.copo.gamma=20"], "algorithm.copo.*gamma"),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"], "loss_mode: gspo"),
        (["algorithm.div_r1.enable=true"], "use one or the other"),
        (["distillation.enabled=true"], "distillation.enabled: true makes the actor run the distillation loss instead"),
    ],
)
def test_bad_settings_fail_at_start_up_naming_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        recipe_rules(compose_gcpo(COPO + overrides))


def test_the_advantage_blend_needs_no_loss_and_other_estimators_ignore_the_block():
    assert copo_loss_settings(compose_gcpo(COPO + ["algorithm.copo.blend=advantage"])) is None
    assert copo_loss_settings(compose_gcpo(["algorithm.copo.k=20"])) is None
    with pytest.raises(ValueError, match="algorithm.copo.gate"):  # a typo fails even when COPO is not selected
        copo_loss_settings(compose_gcpo(["algorithm.copo.gate=bogus"]))


def test_the_copo_launcher_config_validates_with_the_loss_blend():
    lengths = ["data.max_prompt_length=16", "data.max_response_length=32"]  # within DYNAMIC_BSZ's 64 tokens
    config = compose_gcpo(DYNAMIC_BSZ + COPO + lengths + ["actor_rollout_ref.rollout.name=vllm"])
    validate(config)
    assert copo_loss_settings(config) == CopoSettings(blend="loss", gate="soft_with_zero", k=5.0, b=1.0)
