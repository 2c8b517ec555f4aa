"""What start-up says will run: the estimator, reward, scale and protocol lines, and the credit actor's GPU memory
beside vLLM's share (its computation: tests/gcpo_core/encoding/test_memory.py)."""

import pytest

from recipe.gcpo import run_summary
from tests.recipe.gcpo.conftest import BASE, DAPO_REWARD, compose_gcpo, gcpo_settings


def test_the_reward_line_names_the_recipes_default_and_the_shaping():
    config = compose_gcpo(BASE + DAPO_REWARD)
    line = run_summary.describe_reward(config)
    assert line.startswith(
        "reward: manager dapo (register); function pkg://recipe.gcpo.reward:compute_score (the "
        "recipe's math-verify reward"
    )
    assert "or to null for verl's data_source dispatch" in line
    assert line.endswith("overlong shaping on (max_resp_len 8192, buffer 4096, penalty factor 1.0)")
    dispatch = compose_gcpo(BASE + ["reward.custom_reward_function.path=null"])
    assert (
        "function verl's data_source dispatch (verl.utils.reward_score.default_compute_score)"
        in run_summary.describe_reward(dispatch)
    )


def test_startup_says_what_will_run():
    config = compose_gcpo(BASE + ["algorithm.gcpo.credit.method=mc"])
    estimator, reward, scale, mode = run_summary.startup_lines(config, gcpo_settings(config))
    assert mode.startswith("trainer mode: sync")
    assert estimator.startswith("estimator: algorithm.adv_estimator=gcpo: Shapley credit")
    assert "method mc" in estimator and "encoder sentence-transformers/all-MiniLM-L6-v2" in estimator
    assert reward.startswith("reward: ")
    assert scale.startswith("scale: 1 node(s) x 8") and "4 rollouts a step" in scale
    grpo = compose_gcpo(BASE + ["algorithm.adv_estimator=grpo"])
    assert (
        run_summary.startup_lines(grpo)[0]
        == "estimator: algorithm.adv_estimator=grpo (verl's own estimator, unchanged)"
    )


def test_the_protocol_line_names_the_protocols_file_or_the_choices():
    assert run_summary.protocol_line({"protocol": "verl-grpo", "data": "legacy_data"}) == (
        f"protocol: verl-grpo: the trainer settings of {run_summary.PROTOCOL_DIR}/verl-grpo.yaml (docs/protocol.md), "
        "under the command line's overrides"
    )
    assert (run_summary.PROTOCOL_DIR / "verl-grpo.yaml").is_file()
    # a protocol of the user's own, from their config's search path
    assert run_summary.protocol_line({"protocol": "mine"}).startswith(
        "protocol: mine: the trainer settings of the config group protocol's mine,"
    )
    assert run_summary.protocol_line({"protocol": None}).endswith("(protocol=dapo-recipe|shared|verl-grpo chooses one)")
    # a config whose defaults list has no protocol group (verl's ppo_trainer, a user's own) takes it with a +
    assert run_summary.protocol_line({"data": "legacy_data"}).endswith(
        "(+protocol=dapo-recipe|shared|verl-grpo chooses one)"
    )


# --- the credit actor's GPU memory --------------------------------------------------------------------------


def _gcpo(overrides=()):
    config = compose_gcpo(BASE + list(overrides))
    return config, gcpo_settings(config)


def test_the_memory_line_warns_when_vllm_and_the_encoder_leave_too_little():
    config, settings = _gcpo(["actor_rollout_ref.rollout.gpu_memory_utilization=0.7"])
    (line,) = run_summary.memory_lines(settings, config, gpu_gib=80.0, gpu_name="H100")
    assert line.startswith("credit actor memory, on each GPU with a shard: at most 5.60 GiB")
    assert "7.0 % of this H100 (80 GiB) beside vLLM's 0.7" in line
    line, warning = run_summary.memory_lines(settings, config, gpu_gib=24.0)
    assert warning.startswith("warning: vLLM's gpu_memory_utilization 0.7 plus the credit actor's 23.4 %")
    (line,) = run_summary.memory_lines(settings, config)
    assert line.endswith("this machine has no GPU to compare it with")
    config, settings = _gcpo(["algorithm.gcpo.encoder.batch_tokens=32768"])
    assert len(run_summary.memory_lines(settings, config, gpu_gib=24.0)) == 1  # a smaller pass fits


@pytest.mark.parametrize(
    "script",
    [
        "run_qwen3_4b_gcpo.sh",
        "run_qwen3_4b_dqo.sh",
        "run_qwen3_4b_dra_grpo.sh",
        "run_qwen3_4b_gcpo_dynamic.sh",
        "run_qwen3_1.7b_gcpo.sh",
    ],
)
def test_the_launchers_fit_an_80_and_a_40_gib_gpu(script):
    from tests.scripts.launch import launcher_overrides

    config = compose_gcpo(launcher_overrides(script))
    settings = gcpo_settings(config)
    for gib in (80.0, 40.0):
        lines = run_summary.memory_lines(settings, config, gpu_gib=gib)
        assert not any(line.startswith("warning") for line in lines), lines
