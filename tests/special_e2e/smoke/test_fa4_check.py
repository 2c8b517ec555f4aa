"""The GPU check of flash-attn-4 (``python -m tests.special_e2e.smoke.fa4_check``): the parts that run without a GPU."""

import pytest
import torch

from tests.special_e2e.smoke.fa4_check import KERNEL_TOLERANCE, relative_error


def test_the_kernel_check_measures_each_tensor_over_all_its_sequences_so_one_token_has_a_defined_error():
    # the H200 run of 2026-11-28: a causal sequence of one token has no query or key gradient (a softmax over one
    # key is constant), so a per-sequence ||a - b|| / ||b|| was inf on the kernel's bf16 dust there
    torch.manual_seed(0)
    pairs = []
    for length in (37, 1, 12):
        q, k, v = (torch.randn(2, length, 16, requires_grad=True) for _ in range(3))
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        # the exact reference of one token is zero (CPU kernels may leave rounding there too: not compared bit for bit)
        reference = q.grad.detach() if length > 1 else torch.zeros_like(q.grad)
        kernel = reference.bfloat16().float() + 1e-4 * torch.randn_like(reference)  # bf16, and the kernel's dust
        pairs.append((kernel, reference))
    assert relative_error([pairs[1]]) == float("inf")  # what a per-sequence error said of the one-token sequence
    assert relative_error(pairs) < KERNEL_TOLERANCE
    assert relative_error([(-b, b) for _, b in pairs]) == pytest.approx(2.0)  # a wrong kernel is still caught
    assert relative_error([(torch.zeros(3), torch.zeros(3))]) == 0.0
