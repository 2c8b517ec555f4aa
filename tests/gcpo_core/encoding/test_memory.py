"""The credit actor's GPU memory, computed from the encoder's files, checked against the model and a real forward
pass."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gcpo_core.encoding.memory import encoder_memory

ROOT = Path(__file__).resolve().parents[3]


def test_the_encoders_parameters_are_counted_from_its_files():
    from sentence_transformers import SentenceTransformer

    from gcpo_core.encoding.encoder import DEFAULT_MODEL, resolve_model_path

    memory = encoder_memory(DEFAULT_MODEL)
    model = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu")
    parameters = sum(p.numel() for p in model.parameters())
    # the file also holds the position ids (a buffer of max_position_embeddings values), which transformers no
    # longer loads as a parameter
    assert memory.parameters - parameters in (0, model[0].auto_model.config.max_position_embeddings)
    assert memory.weights_gib == pytest.approx(memory.parameters * 2 / 1024**3)  # float16 on a GPU
    # one forward pass of 262,144 tokens: (384 + 2 x 1536) values a token in float16 plus the float32 pooling copy
    assert memory.activations_gib == pytest.approx((262144 * 3456 * 2 + 262144 * 384 * 4) / 1024**3)
    smaller = encoder_memory(DEFAULT_MODEL, batch_tokens=65536)
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
    estimate = encoder_memory("sentence-transformers/all-MiniLM-L6-v2", "float32", 65536)
    assert 0.7 * estimate.activations_gib <= rise <= estimate.with_scores_gib, (rise, estimate)
