"""Whether FlashAttention 4 trains on this GPU as the smoke's actor would use it, in about a minute (most of it the
kernels' first compile): ``python -m tests.special_e2e.smoke.fa4_check``; exit 0 when every check passes.

1. The versions, and which CUTLASS DSL variant is on disk (libs-base and libs-cu13 write the same files).
2. transformers sees ``flash_attention_4``.
3. Packed causal GQA attention (bf16, 8 query heads over 2 KV heads, head size 128), forward and backward, against
   float32 SDPA sequence by sequence.
4. A 2-layer random Qwen3 with ``flash_attention_4`` and verl's padding-removal patch on packed sequences, against
   padded SDPA, with its backward; and no backward kernel compiled again from step to step with
   :func:`tests.special_e2e.smoke.fa4.install` applied (``FA4_WITHOUT_INSTALL=1`` shows the recompiles without it).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import os
import sys
import time

DISTRIBUTIONS = (
    "flash-attn-4",
    "nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-base",
    "nvidia-cutlass-dsl-libs-cu13",
    "quack-kernels",
    "apache-tvm-ffi",
    "cuda-python",
    "transformers",
    "torch",
    "verl",
)
HEADS, KV_HEADS, HEAD_DIM = 8, 2, 128
# bf16 against float32: relative error of the output and the gradients
KERNEL_TOLERANCE, MODEL_TOLERANCE = 2e-2, 3e-2


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def __call__(self, name: str, ok: bool, detail: str = "") -> None:
        print(f"[{'PASS' if ok else 'FAIL'}] {name} {detail}".rstrip(), flush=True)
        if not ok:
            self.failed.append(name)


def describe() -> None:
    for dist in DISTRIBUTIONS:
        try:
            print(f"{dist}=={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            print(f"{dist}: not installed")
    import cutlass  # needs <site>/nvidia_cutlass_dsl/python_packages on the path (the bundle's env.sh puts it there)

    print("cutlass", cutlass.__file__, "DSL CUDA", getattr(cutlass, "CUDA_VERSION", "?"))
    try:
        dist = metadata.distribution("nvidia-cutlass-dsl-libs-cu13")
    except metadata.PackageNotFoundError:
        print("libs-cu13 not installed: the libs-base (CUDA 12.9) DSL is in use")
        return
    differ = sum(1 for f in dist.files or () if f.hash and str(f).startswith("nvidia_cutlass_dsl/") and _differs(f))
    print(f"libs-cu13 files differing from its RECORD (0: the cu13 variant is intact; more: libs-base won): {differ}")


def _differs(file) -> bool:
    digest = hashlib.new(file.hash.mode, file.read_binary()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != file.hash.value


def relative_error(pairs) -> float:
    """``||a - b|| / ||b||`` of one tensor over all its packed sequences (``pairs``: (kernel's, reference) per
    sequence). Taken per sequence it is undefined where the reference is zero: a causal sequence of one token has
    no gradient for its query and key (a softmax over one key is constant), and bf16 leaves a little there."""
    diff = sum(float(((a.float() - b.float()) ** 2).sum()) for a, b in pairs)
    ref = sum(float((b.float() ** 2).sum()) for _, b in pairs)
    return (diff / ref) ** 0.5 if ref > 0 else (0.0 if diff == 0 else float("inf"))


def kernel_checks(check: Checks) -> None:
    import torch
    import torch.nn.functional as F
    from flash_attn.cute import flash_attn_varlen_func

    torch.manual_seed(0)
    for lengths in ([37, 128, 300, 1, 511], [640, 5, 77, 200], [1000, 24]):
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        total = int(cu[-1])
        q, k, v = (
            torch.randn(total, heads, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for heads in (HEADS, KV_HEADS, KV_HEADS)
        )
        grad = torch.randn(total, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        start = time.monotonic()
        out, _ = flash_attn_varlen_func(
            q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lengths), max_seqlen_k=max(lengths), causal=True
        )
        out.backward(grad)
        torch.cuda.synchronize()
        took = time.monotonic() - start
        pairs: dict[str, list] = {"out": [], "dq": [], "dk": [], "dv": []}
        for i in range(len(lengths)):
            part = slice(int(cu[i]), int(cu[i + 1]))
            qr, kr, vr = (x.detach()[part].float().transpose(0, 1).requires_grad_() for x in (q, k, v))
            ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=True, enable_gqa=True)
            ref.backward(grad[part].float().transpose(0, 1))
            pairs["out"].append((out[part], ref.transpose(0, 1)))
            pairs["dq"].append((q.grad[part], qr.grad.transpose(0, 1)))
            pairs["dk"].append((k.grad[part], kr.grad.transpose(0, 1)))
            pairs["dv"].append((v.grad[part], vr.grad.transpose(0, 1)))
        errors = {name: relative_error(kind) for name, kind in pairs.items()}
        worst = max(errors.values())
        detail = ", ".join(f"{name} {err:.2e}" for name, err in errors.items())
        check(f"packed forward+backward {lengths}", worst < KERNEL_TOLERANCE, f"rel err {detail}, {took:.2f} s")


def model_checks(check: Checks) -> None:
    import flash_attn.cute.interface as interface
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config
    from verl.models.transformers.monkey_patch import apply_monkey_patch

    compiled = len(interface._flash_attn_bwd.compile_cache.cache)
    config = Qwen3Config(
        vocab_size=1000,
        hidden_size=HEADS * HEAD_DIM // 2,
        intermediate_size=1024,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=4096,
    )
    fa4 = AutoModelForCausalLM.from_config(config, attn_implementation="flash_attention_4", dtype=torch.bfloat16)
    fa4 = fa4.to("cuda")
    apply_monkey_patch(fa4, use_remove_padding=True)
    sdpa = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).to("cuda")
    sdpa.load_state_dict(fa4.state_dict())
    for step, lengths in enumerate(([50, 300, 7, 129], [400, 33, 90], [12, 256, 256])):
        ids = [torch.randint(0, 1000, (n,), device="cuda") for n in lengths]
        packed = torch.cat(ids)[None]
        positions = torch.cat([torch.arange(n, device="cuda") for n in lengths])[None]
        start = time.monotonic()
        logits = fa4(input_ids=packed, position_ids=positions, attention_mask=None, use_cache=False).logits.float()
        logits.logsumexp(-1).mean().backward()
        torch.cuda.synchronize()
        took = time.monotonic() - start
        padded = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True)
        mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(x) for x in ids], batch_first=True)
        with torch.no_grad():
            ref = sdpa(input_ids=padded, attention_mask=mask, use_cache=False).logits.float()
        ref = torch.cat([ref[i, :n] for i, n in enumerate(lengths)])[None]
        error = ((logits - ref).norm() / ref.norm()).item()
        norm = sum(p.grad.float().norm() ** 2 for p in fa4.parameters() if p.grad is not None) ** 0.5
        fa4.zero_grad()
        check(
            f"model step {step}, packed {lengths}",
            error < MODEL_TOLERANCE and torch.isfinite(norm).item(),
            f"logits rel err against padded SDPA {error:.2e}, grad norm {norm:.3g}, {took:.2f} s",
        )
    grew = len(interface._flash_attn_bwd.compile_cache.cache) - compiled
    check("no backward compiled again from step to step", grew <= 1, f"({grew} new backward kernel(s))")


def main() -> int:
    check = Checks()
    describe()
    from transformers.utils.import_utils import is_flash_attn_4_available

    check("transformers sees flash_attention_4", is_flash_attn_4_available())
    import torch

    if not torch.cuda.is_available():
        print("fa4_check: no CUDA device: only the imports were checked", file=sys.stderr)
        return 1
    print("device", torch.cuda.get_device_name(), torch.cuda.get_device_capability(), flush=True)
    if os.environ.get("FA4_WITHOUT_INSTALL") != "1":
        from tests.special_e2e.smoke.fa4 import install

        install()
    kernel_checks(check)
    model_checks(check)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
