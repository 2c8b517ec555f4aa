"""Div-R1's actor loss (recipe/gcpo/baselines/div_r1.py) on CPU tensors, through verl 0.9.1's own ppo_loss, and its
start-up checks on the composed recipe config."""

import math
import pickle

import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.utils.losses import ppo_loss

from recipe.gcpo.baselines.div_r1 import BASELINE, DivR1Settings, div_r1_loss, div_r1_loss_fn, div_r1_term
from recipe.gcpo.checks import recipe_rules
from tests.recipe.gcpo.conftest import compose_gcpo

DYNAMIC_BSZ = [
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=64",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
]
PROMPT_LENS = [2, 3, 2, 1]
RESPONSE_LENS = [4, 2, 3, 5]
REWARDS = [1.0, -1.0, 0.5, -1.0]  # rows 0 and 2 correct (0.5: correct, shortened by an overlong penalty)
VERDICTS = [True, False, True, False]  # the reward's acc


def _nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _rows(seed):
    g = torch.Generator().manual_seed(seed)
    old = [-(torch.rand(r, generator=g, dtype=torch.float64) + 0.1) for r in RESPONSE_LENS]
    new = [o + 0.2 * torch.randn(r, generator=g, dtype=torch.float64) for o, r in zip(old, RESPONSE_LENS)]
    return old, new


def _micro_batch(rows=None, seed=0, rewards=REWARDS, global_info=None, with_rewards=True, verdicts=VERDICTS):
    """A micro-batch as verl's engines hand it to the loss: no-padding (nested) fields, the model's log-probs over
    whole sequences (prompt + response, shifted by one), verl's normalisers as non-tensor data."""
    rows = list(range(len(RESPONSE_LENS))) if rows is None else rows
    old, new = _rows(seed)
    fields = {
        "prompts": _nested([torch.arange(PROMPT_LENS[i]) for i in rows]),
        "responses": _nested([torch.arange(RESPONSE_LENS[i]) for i in rows]),
        "response_mask": _nested([torch.ones(RESPONSE_LENS[i], dtype=torch.int64) for i in rows]),
        "old_log_probs": _nested([old[i] for i in rows]),
        "advantages": _nested([torch.full((RESPONSE_LENS[i],), 0.3 * (i - 1.5), dtype=torch.float64) for i in rows]),
    }
    if with_rewards:
        fields["rm_scores"] = _nested(
            [torch.cat([torch.zeros(RESPONSE_LENS[i] - 1), torch.tensor([rewards[i]])]) for i in rows]
        )
    data = TensorDict(fields, batch_size=[len(rows)])
    if verdicts is not None:  # as verl's V1 trainer stores each row's reward_extra_info (a TransferQueue field)
        data["extra_fields"] = NonTensorStack(
            *[NonTensorData({"reward_extra_info": {"acc": verdicts[i], "score": 0.0}}) for i in rows]
        )
    tu.assign_non_tensor(data, **(global_info or {"dp_size": 1, "batch_num_tokens": None, "global_batch_size": None}))
    # the model's output at position k predicts token k + 1: a response's log-probs sit one slot before it
    values = []
    for i in rows:
        values += [torch.zeros(PROMPT_LENS[i] - 1, dtype=torch.float64), new[i], torch.zeros(1, dtype=torch.float64)]
    flat = torch.cat(values).requires_grad_()
    lengths = torch.tensor([PROMPT_LENS[i] + RESPONSE_LENS[i] for i in rows])
    log_probs = torch.nested.nested_tensor_from_jagged(
        flat, offsets=torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    )
    return data, {"log_probs": log_probs}, flat


def _expected_term(rows, seed=0, selected=None, mode="seq-mean-token-mean", sequences=None, tokens=None):
    """By hand: per token -(pi/pi_old) log pi, over the selected (correct) responses, normalised over all."""
    old, new = _rows(seed)
    selected = [i for i in rows if VERDICTS[i]] if selected is None else selected
    per_response = {i: [-math.exp(n - o) * n for n, o in zip(new[i].tolist(), old[i].tolist())] for i in rows}
    if mode == "seq-mean-token-mean":
        total = sum(sum(per_response[i]) / len(per_response[i]) for i in selected)
        return total / (len(rows) if sequences is None else sequences)
    total = sum(sum(per_response[i]) for i in selected)
    return total / (sum(RESPONSE_LENS[i] for i in rows) if tokens is None else tokens)


@pytest.fixture(scope="module")
def actor_config():
    return omega_conf_to_dataclass(compose_gcpo(DYNAMIC_BSZ).actor_rollout_ref.actor)


def test_the_loss_is_verls_ppo_loss_minus_lambda_times_the_correct_responses_entropy(actor_config):
    settings = DivR1Settings(enable=True, coef=0.01)
    data, output, _ = _micro_batch()
    base, _ = ppo_loss(actor_config, output, data)
    data, output, _ = _micro_batch()
    loss, metrics = div_r1_loss(actor_config, output, data, settings=settings)
    expected = _expected_term(range(4))
    assert (loss - base).item() == pytest.approx(-0.01 * expected, rel=1e-9)
    assert metrics["actor/div_r1_entropy"].aggregate() == pytest.approx(expected, rel=1e-9)
    assert metrics["actor/div_r1_share"].aggregate() == 0.5
    assert "actor/pg_loss" in metrics  # verl's own metrics are kept


def test_wrong_responses_get_no_gradient_from_the_term(actor_config):
    settings = DivR1Settings(enable=True, coef=0.5)
    data, output, flat = _micro_batch()
    loss, _ = div_r1_loss(actor_config, output, data, settings=settings)
    with_term = torch.autograd.grad(loss, flat)[0]
    data, output, flat = _micro_batch()
    base, _ = ppo_loss(actor_config, output, data)
    without = torch.autograd.grad(base, flat)[0]
    difference = (with_term - without).split([p + r for p, r in zip(PROMPT_LENS, RESPONSE_LENS)])
    assert torch.all(difference[1] == 0) and torch.all(difference[3] == 0)  # wrong
    assert torch.all(difference[0][1:5] != 0) and torch.all(difference[2][1:4] != 0)  # correct: every token


def test_all_samples_and_token_mean_aggregation(actor_config):
    data, output, _ = _micro_batch()
    term, share = div_r1_term(output, data, DivR1Settings(enable=True, samples="all"), {})
    assert term.item() == pytest.approx(_expected_term(range(4), selected=[0, 1, 2, 3]), rel=1e-9) and share == 1.0
    data, output, _ = _micro_batch()
    term, _ = div_r1_term(output, data, DivR1Settings(enable=True, loss_agg_mode="token-mean"), {})
    assert term.item() == pytest.approx(_expected_term(range(4), mode="token-mean"), rel=1e-9)


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "token-mean"])
def test_micro_batches_sum_to_the_mini_batch_term_with_verls_normalisers(mode):
    info = {"dp_size": 1, "batch_num_tokens": sum(RESPONSE_LENS), "global_batch_size": len(RESPONSE_LENS)}
    settings = DivR1Settings(enable=True, loss_agg_mode=mode)
    parts = []
    for rows in ([0, 1], [2, 3]):
        data, output, _ = _micro_batch(rows, global_info=info)
        parts.append(div_r1_term(output, data, settings, info)[0].item())
    assert sum(parts) == pytest.approx(_expected_term(range(4), mode=mode), rel=1e-9)


def test_exact_entropy_is_read_from_the_actors_output():
    data, output, _ = _micro_batch()
    entropy = torch.rand(sum(PROMPT_LENS) + sum(RESPONSE_LENS), dtype=torch.float64)
    output["entropy"] = torch.nested.nested_tensor_from_jagged(entropy, offsets=output["log_probs"].offsets())
    term, _ = div_r1_term(output, data, DivR1Settings(enable=True, entropy="exact"), {})
    per_response = entropy.split([p + r for p, r in zip(PROMPT_LENS, RESPONSE_LENS)])
    expected = sum(per_response[i][PROMPT_LENS[i] - 1 : -1].mean().item() for i in (0, 2)) / 4
    assert term.item() == pytest.approx(expected, rel=1e-9)
    del output["entropy"]
    with pytest.raises(RuntimeError, match="calculate_entropy=true"):
        div_r1_term(output, data, DivR1Settings(enable=True, entropy="exact"), {})


def test_a_batch_without_rewards_is_refused_clearly():
    data, output, _ = _micro_batch(with_rewards=False)
    with pytest.raises(RuntimeError, match="rm_scores"):
        div_r1_term(output, data, DivR1Settings(enable=True), {})


def test_the_loss_function_is_built_from_the_composed_config_and_survives_pickling():
    off = compose_gcpo(DYNAMIC_BSZ)
    assert div_r1_loss_fn(off, BASELINE.parse(off.algorithm)) is None  # off by default
    config = compose_gcpo(DYNAMIC_BSZ + ["algorithm.div_r1.enable=true", "algorithm.div_r1.coef=0.02"])
    fn = div_r1_loss_fn(config, BASELINE.parse(config.algorithm))
    fn = pickle.loads(pickle.dumps(fn))  # what Ray does to hand it to every actor worker
    data, output, _ = _micro_batch()
    loss, _ = fn(model_output=output, data=data, dp_group=None)  # how verl's engines call it
    data, output, _ = _micro_batch()
    base, _ = ppo_loss(fn.keywords["config"], output, data)
    assert (loss - base).item() == pytest.approx(-0.02 * _expected_term(range(4)), rel=1e-9)


# Div-R1 rides on GRPO in the launcher (scripts/run_qwen3_4b_div_r1.sh)
GRPO = ["algorithm.adv_estimator=grpo"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["algorithm.div_r1.enable=true", "algorithm.div_r1.samples=negative"],
            "algorithm.div_r1.samples: must be one of",
        ),
        (["algorithm.div_r1.enable=true", "algorithm.div_r1.coef=-1"], "algorithm.div_r1.coef: must be"),
        (["algorithm.div_r1.enable=true", "algorithm.div_r1.entropy=exact"], "calculate_entropy=true"),
        (["algorithm.div_r1.enable=true", "+algorithm.div_r1.lambda=0.1"], "unknown key"),
        (
            ["algorithm.div_r1.enable=true", "distillation.enabled=true"],
            "distillation.enabled: true makes the actor run the distillation loss instead",
        ),
    ],
)
def test_bad_settings_fail_at_start_up_naming_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        recipe_rules(compose_gcpo(DYNAMIC_BSZ + GRPO + overrides))


def test_exact_entropy_is_accepted_when_the_actor_computes_it():
    config = compose_gcpo(
        DYNAMIC_BSZ
        + GRPO
        + [
            "algorithm.div_r1.enable=true",
            "algorithm.div_r1.entropy=exact",
            "actor_rollout_ref.actor.calculate_entropy=true",
        ]
    )
    assert recipe_rules(config).blocks["div_r1"].entropy == "exact"


def test_the_verdict_decides_not_the_shaped_score(actor_config):
    """A correct answer pushed to a score <= 0 by the overlong penalty keeps the term (the paper's 1(r = 1) is on
    correctness); samples=positive_score is the other reading."""
    shaped = [-0.2, -1.0, 0.5, -1.0]  # row 0: correct, but its shaped score is below 0
    data, output, _ = _micro_batch(rewards=shaped)
    term, share = div_r1_term(output, data, DivR1Settings(enable=True), {})
    assert term.item() == pytest.approx(_expected_term(range(4), selected=[0, 2]), rel=1e-9) and share == 0.5
    data, output, _ = _micro_batch(rewards=shaped)
    term, share = div_r1_term(output, data, DivR1Settings(enable=True, samples="positive_score"), {})
    assert term.item() == pytest.approx(_expected_term(range(4), selected=[2]), rel=1e-9) and share == 0.25


def test_a_reward_without_a_verdict_is_a_clear_error():
    data, output, _ = _micro_batch(verdicts=None)
    with pytest.raises(RuntimeError, match="reads the verdict from the reward's 'acc'"):
        div_r1_term(output, data, DivR1Settings(enable=True), {})
    data, output, _ = _micro_batch(verdicts=None)
    term, _ = div_r1_term(output, data, DivR1Settings(enable=True, samples="positive_score"), {})
    assert term.item() == pytest.approx(_expected_term(range(4), selected=[0, 2]), rel=1e-9)
