"""The flash-attn-4 fix the smoke installs in every Ray worker: transformers' packed path then hands the kernel its
longest sequence as an int (a tensor would miss 4.0.0b19's compile cache on every backward); the hook the smoke's
override names exists. The kernels themselves need a Hopper GPU: ``python -m tests.special_e2e.smoke.fa4_check``."""

import importlib

import torch
import transformers.modeling_flash_attention_utils as utils

from tests.special_e2e.smoke import fa4
from tests.special_e2e.smoke.run import ATTENTION_OVERRIDES


def test_install_makes_the_longest_sequence_an_int_once(monkeypatch):
    original = utils.prepare_fa_kwargs_from_position_ids
    monkeypatch.setattr(utils, "prepare_fa_kwargs_from_position_ids", original)  # restored after the test
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    (cu_q, cu_k), (max_q, max_k) = original(positions)
    assert torch.is_tensor(max_q)  # what transformers 5.10.4 hands the kernel without the fix
    fa4.install()
    fa4.install()  # a second call (a worker set up twice) leaves one wrapper
    patched = utils.prepare_fa_kwargs_from_position_ids
    assert patched.__wrapped__ is original
    (new_q, new_k), (int_q, int_k) = patched(positions)
    assert (type(int_q), type(int_k)) == (int, int) and (int_q, int_k) == (4, 4)
    assert torch.equal(new_q, cu_q) and torch.equal(new_k, cu_k) and new_q.tolist() == [0, 3, 5, 9]
    # the caller in transformers' packed path looks the function up in its module: it gets the fix
    query = torch.zeros(1, 9, 2, 4)
    *_, (lengths_q, lengths_k) = utils._prepare_from_posids(query, query, query, positions)
    assert (type(lengths_q), lengths_q) == (int, 4)


def test_the_smokes_worker_hook_names_install():
    (hook,) = [o for o in ATTENTION_OVERRIDES["flash_attention_4"] if "worker_process_setup_hook" in o]
    module, _, name = hook.split("=", 1)[1].rpartition(".")
    assert getattr(importlib.import_module(module), name) is fa4.install
