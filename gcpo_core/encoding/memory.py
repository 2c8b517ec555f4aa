"""What one credit actor holds on its GPU, computed from the encoder's files (nothing is loaded): the start-up line
of the recipe (``recipe.gcpo.run_summary``) prints it beside vLLM's share of the GPU."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Optional

from gcpo_core.encoding.encoder import BATCH_TOKENS_GPU, resolve_model_path

# the CUDA context a process (each credit actor) holds on its GPU before it allocates anything: about 0.5 GiB on
# recent GPUs and drivers (it is not visible to torch's allocator; nvidia-smi shows it)
CUDA_CONTEXT_GIB = 0.5


@dataclass(frozen=True)
class EncoderMemory:
    """What one credit actor holds on its GPU, computed from the encoder's files and ``algorithm.gcpo.encoder``:
    its weights, and the activations of one forward pass of ``batch_tokens`` padded tokens (the pass's peak; the
    encoder hands its cache back to the driver after each call). ``activations_gib``: the feed-forward phase,
    ``T x (hidden + 2 x intermediate)`` values, plus the float32 pooling copy; ``with_scores_gib``: also every
    head's attention scores, ``T x heads x max_seq_length`` values twice (when PyTorch's SDPA falls back to its math
    kernel, which materialises them): the upper bound used for the warning."""

    parameters: int
    weights_gib: float
    activations_gib: float
    with_scores_gib: float
    batch_tokens: int
    dtype: str

    @property
    def total_gib(self) -> float:
        return CUDA_CONTEXT_GIB + self.weights_gib + self.with_scores_gib


def encoder_memory(
    model: str, dtype: str = "auto", batch_tokens: Optional[int] = None, max_seq_length: Optional[int] = None
) -> Optional["EncoderMemory"]:
    """:class:`EncoderMemory` of a credit actor on a GPU; None when the encoder's files are not on this machine
    (a hub id that is not cached), so nothing can be computed here."""
    folder = Path(os.path.expanduser(resolve_model_path(model)))
    if not folder.is_dir():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model if "/" in model else f"sentence-transformers/{model}", "config.json")
        except Exception:
            cached = None
        if not isinstance(cached, str):
            return None
        folder = Path(cached).parent
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        hidden, inner, heads = config["hidden_size"], config["intermediate_size"], config["num_attention_heads"]
    except (OSError, ValueError, KeyError):
        return None
    if max_seq_length is None:
        try:
            max_seq_length = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
        except (OSError, ValueError, KeyError):
            max_seq_length = config.get("max_position_embeddings", 512)
    parameters = _parameters(folder)
    if parameters is None:
        return None
    width = 4 if dtype == "float32" else 2  # auto: float16 on a GPU
    tokens = batch_tokens or BATCH_TOKENS_GPU
    gib = 1024**3
    feed_forward = width * tokens * (hidden + 2 * inner) + 4 * tokens * hidden
    scores = width * tokens * heads * max_seq_length * 2
    return EncoderMemory(
        parameters,
        parameters * width / gib,
        feed_forward / gib,
        (feed_forward + scores) / gib,
        tokens,
        "float16" if dtype == "auto" else dtype,
    )


def _parameters(folder: Path) -> Optional[int]:
    """Parameters in the model's safetensors files, from their headers (nothing is loaded)."""
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*/*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            total += sum(prod(handle.get_slice(key).get_shape()) for key in handle.keys())
    return total
