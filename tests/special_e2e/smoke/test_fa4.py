"""The flash-attn-4 fix the smoke installs in every Ray worker: transformers' packed path then hands the kernel its
longest sequence as an int (a tensor would miss 4.0.0b19's compile cache on every backward); the hook the smoke's
override names exists. The kernels themselves need a Hopper GPU: ``python -m tests.special_e2e.smoke.fa4_check``."""

import importlib
import os

import ray
import torch
import transformers.modeling_flash_attention_utils as utils

from tests.special_e2e import ROOT
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


def _hook() -> str:
    (override,) = [o for o in ATTENTION_OVERRIDES["flash_attention_4"] if "worker_process_setup_hook" in o]
    return override.split("=", 1)[1]


def test_the_smokes_worker_hook_names_install():
    module, _, name = _hook().rpartition(".")
    assert getattr(importlib.import_module(module), name) is fa4.install


def test_the_hook_runs_in_a_ray_worker_as_the_smokes_override_sets_it(monkeypatch):
    """verl passes ray_kwargs.ray_init.runtime_env to ray.init (merged over its own): a worker then has the fix
    before it runs anything, as the FSDP actor's worker must. Ray's workers find the hook through the PYTHONPATH the
    smoke gives its trainer (this checkout first: verl's wheel has a `tests` package of its own), as here."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": _hook()},
    )
    try:

        @ray.remote
        def fixed() -> bool:
            import transformers.modeling_flash_attention_utils as worker_utils

            return getattr(worker_utils.prepare_fa_kwargs_from_position_ids, "max_seqlen_as_int", False)

        assert ray.get(fixed.remote(), timeout=300) is True
    finally:
        ray.shutdown()
