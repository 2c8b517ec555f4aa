"""The smoke policy's shapes (``--shape``): the architecture of the random-weight Qwen3 model and the sizes a run
with it takes. Kept apart from :mod:`.policy` (which builds the model) so that the driver reads them without
importing torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TinyPolicySpec:
    """Size of the tiny policy (about 4.3M parameters with the 30.5k-token vocabulary, most of it embeddings).

    ``head_dim`` 64 is a size every vLLM attention backend supports; the embeddings are tied as in the small
    Qwen3 models.
    """

    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 64
    max_position_embeddings: int = 4096
    seed: int = 0


# The public Qwen3 architectures (their config.json on the Hub: hidden, MLP, layers, heads, KV heads, head_dim,
# context), with random weights: a real model's shapes for the GPU smoke's timings, nothing downloaded. The
# vocabulary stays the smoke tokenizer's (30.5k tokens, not Qwen's 151,936), so the models are smaller than their
# names by (151,936 - 30,524) x hidden parameters, and the output layer and the log-probabilities are cheaper: a
# GRPO step is shorter than with the real vocabulary, GCPO's overhead share larger, never smaller.
def _qwen3(hidden_size: int, intermediate_size: int) -> TinyPolicySpec:
    """The small Qwen3 models share depth and attention: 28 layers, 16 query and 8 KV heads of 128, 40,960 tokens."""
    return TinyPolicySpec(
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
    )


QWEN3_0_6B = _qwen3(hidden_size=1024, intermediate_size=3072)
QWEN3_1_7B = _qwen3(hidden_size=2048, intermediate_size=6144)


@dataclass(frozen=True)
class PolicyShape:
    """What ``--shape`` picks: the policy's architecture and the sizes a run with it takes (each size an
    environment variable may override, run.py's Settings).

    ``tiny`` is the smoke: three prompts, short responses, a checkpoint and a resumed run. A Qwen3 shape measures
    a step at a real model's size on one GPU: enough prompts x 16 rollouts of long responses to load it (the
    random policy rarely samples its end token, so nearly every response runs to the length limit), three steps
    (the first is each process's warm-up), no resume (the tiny smoke proves it).
    """

    spec: TinyPolicySpec
    max_response_length: int
    prompts_per_step: int
    n_resp: int
    gpu_mem_util: str
    steps: int
    resume: bool
    # tokens per micro-batch of the actor update and of the log-prob passes (verl's dynamic batch size); None:
    # four sequences' worth (prompt + response limits), the tiny smoke's
    update_tokens: int | None = None
    log_prob_tokens: int | None = None


SHAPES: dict[str, PolicyShape] = {
    # three prompts (correct rates 0, 0.5, 1): one batch is all of them
    "tiny": PolicyShape(TinyPolicySpec(), 64, 3, 8, "0.15", 2, True),
    # 128 rollouts x 2,048 tokens: vLLM's KV cache at half the GPU holds them all at once (112 KiB a token)
    "qwen3-0.6b": PolicyShape(QWEN3_0_6B, 2048, 8, 16, "0.5", 3, False, 16384, 24576),
    # 128 rollouts x 3,072 tokens: about two thirds of them at once in half the GPU; the FSDP actor's weights,
    # gradients and Adam state (about 24 GB) stay beside vLLM
    "qwen3-1.7b": PolicyShape(QWEN3_1_7B, 3072, 8, 16, "0.5", 3, False, 16384, 24576),
}


def parameter_count(spec: TinyPolicySpec, vocab_size: int) -> int:
    """Parameters of the Qwen3 model ``build_policy`` writes for ``spec`` (tied embeddings), without building it."""
    h, kv = spec.hidden_size, spec.num_key_value_heads * spec.head_dim
    q = spec.num_attention_heads * spec.head_dim
    attention = h * q + 2 * h * kv + q * h + 2 * spec.head_dim  # q, k, v, o projections; q and k norms
    mlp = 3 * h * spec.intermediate_size
    layer = attention + mlp + 2 * h  # two RMS norms
    return vocab_size * h + spec.num_hidden_layers * layer + h  # embeddings (tied output), layers, final norm
