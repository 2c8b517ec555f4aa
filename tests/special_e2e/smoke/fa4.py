"""FlashAttention 4 for the smoke's FSDP actor on Hopper: ``SMOKE_ATTN=flash_attention_4``.

flash-attn 2 has no wheel that installs without compiling, so an offline GPU box trains the actor with SDPA on padded
batches (1.5 % MFU at the qwen3-0.6b shape). flash-attn-4 (the CuTe-DSL kernels, a pure-Python wheel whose kernels
the CUTLASS DSL compiles as they are first used) runs forward and backward on packed sequences on Hopper, and
transformers 5.10.4 calls it as ``attn_implementation=flash_attention_4`` through the same packed path that verl's
padding removal patches for flash-attn 2. 4.0.0b19 is the newest release that resolves beside vLLM 0.24.0's pins of
the CUTLASS DSL (docs/deployment.md, "An offline GPU box").

:func:`install` runs in every Ray worker as the run's ``worker_process_setup_hook``.
"""

from __future__ import annotations

import functools


def install() -> None:
    """transformers hands flash-attn-4 a packed batch's longest sequence as a 0-d tensor; 4.0.0b19's backward keys
    its compile cache on a value computed from it, and a tensor hashes by identity, so every backward compiles its
    kernel again, about 10 s each (Dao-AILab/flash-attention#2507, fixed in later releases that vLLM 0.24.0's pins
    exclude). As an int the key hits; flash-attn 2's path makes the same host read."""
    try:
        import transformers.modeling_flash_attention_utils as utils
    except ImportError:  # a worker without transformers (Ray's own): nothing to patch
        return
    prepare = utils.prepare_fa_kwargs_from_position_ids
    if getattr(prepare, "max_seqlen_as_int", False):
        return

    @functools.wraps(prepare)
    def with_int_max_seqlen(position_ids):
        (cu_seqlens_q, cu_seqlens_k), (max_q, max_k) = prepare(position_ids)
        return (cu_seqlens_q, cu_seqlens_k), (int(max_q), int(max_k))

    with_int_max_seqlen.max_seqlen_as_int = True
    utils.prepare_fa_kwargs_from_position_ids = with_int_max_seqlen
