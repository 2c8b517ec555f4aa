"""What start-up says will run: the estimator, reward, scale and protocol lines, and the credit actor's GPU memory
computed from the encoder's files (checked against a real forward pass)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipe.gcpo import run_summary
from tests.recipe.gcpo.conftest import BASE, DAPO_REWARD, compose_gcpo, gcpo_settings

ROOT = Path(__file__).resolve().parents[3]


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
    estimator, reward, scale = run_summary.startup_lines(config, gcpo_settings(config))
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


def test_the_encoders_parameters_are_counted_from_its_files():
    from sentence_transformers import SentenceTransformer

    from gcpo_core.encoding.encoder import DEFAULT_MODEL, resolve_model_path

    memory = run_summary.encoder_memory(DEFAULT_MODEL)
    model = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu")
    parameters = sum(p.numel() for p in model.parameters())
    # the file also holds the position ids (a buffer of max_position_embeddings values), which transformers no
    # longer loads as a parameter
    assert memory.parameters - parameters in (0, model[0].auto_model.config.max_position_embeddings)
    assert memory.weights_gib == pytest.approx(memory.parameters * 2 / 1024**3)  # float16 on a GPU
    # one forward pass of 262,144 tokens: (384 + 2 x 1536) values a token in float16 plus the float32 pooling copy
    assert memory.activations_gib == pytest.approx((262144 * 3456 * 2 + 262144 * 384 * 4) / 1024**3)
    smaller = run_summary.encoder_memory(DEFAULT_MODEL, batch_tokens=65536)
    assert smaller.activations_gib == pytest.approx(memory.activations_gib / 4)


def test_the_computed_activations_bound_a_real_forward_pass(tmp_path):
    """The encoder on the CPU (float32) at 65,536 tokens a pass: the rise of the process's peak resident memory over
    one call lies between 70 % of the feed-forward estimate and the bound with the attention scores."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import resource, psutil, torch\n"
        "from gcpo_core.encoding.encoder import RolloutEncoder, EncoderConfig\n"
        "encoder = RolloutEncoder(EncoderConfig(device='cpu', batch_tokens=65536))\n"
        "texts = [('word ' * 253) + str(i) for i in range(512)]\n"  # 256 tokens each: full passes
        "encoder.encode(texts[:4])\n"
        "now = psutil.Process().memory_info().rss\n"
        "encoder.encode(texts)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - now) / 1024 ** 3)\n"
    )
    proc = subprocess.run(
        [sys.executable, str(probe)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rise = float(proc.stdout.strip().splitlines()[-1])
    estimate = run_summary.encoder_memory("sentence-transformers/all-MiniLM-L6-v2", "float32", 65536)
    assert 0.7 * estimate.activations_gib <= rise <= estimate.with_scores_gib, (rise, estimate)


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
