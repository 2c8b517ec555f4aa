"""A verl platform that trains on the CPU, for the CPU smoke (``scripts/smoke_cpu.sh``) only.

verl 0.9.1 has no CPU platform: on a machine without GPUs it falls back to CUDA. This module registers one,
``cpu``, through verl's plugin mechanism: the smoke sets ``VERL_USE_EXTERNAL_MODULES=tests.special_e2e.cpu_platform``
(verl imports the module in every process that imports verl, Ray workers and vLLM's worker processes included)
and ``VERL_PLATFORM=cpu`` (verl's platform override). It is inert otherwise:

* the platform never wins verl's auto-detection (``is_platform_available`` is False), so only
  ``VERL_PLATFORM=cpu`` selects it, and importing the module changes nothing else;
* with ``VERL_PLATFORM=cpu`` on a machine with a CUDA GPU it refuses to start (:func:`gpu_present`): a GPU
  machine trains on its GPU (``scripts/smoke_1gpu.sh``).

When selected it also makes the few changes the CPU path needs, each in the process that needs it
(docs/benchmarks.md, "CPU smoke"):

* Ray's logical ``GPU`` resource stands for one CPU "device" per worker (the smoke starts Ray with ``num_gpus``);
* FSDP's engine is looked up as CUDA's (``VERL_ENGINE_DEVICE``/``VERL_ENGINE_VENDOR``, verl's own override):
  with ``strategy=fsdp2`` the model stays on the CPU;
* ``torch.distributed.init_process_group``: verl asks for ``cpu:gloo,<device>:<backend>``, which is
  ``cpu:gloo,cpu:gloo`` here and refused by torch; the duplicate is dropped (``gloo``);
* vLLM's CPU linear layers prepack their weights (oneDNN) and drop ``weight``, so verl's weight sync has nowhere
  to write; in vLLM's worker processes they compute ``F.linear`` on the live weight instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import types
from typing import Any, Optional

import torch

PLATFORM_NAME = "cpu"
PLATFORM_ENV = "VERL_PLATFORM"


def cpu_overrides(ray_dir: Optional[str | os.PathLike] = None, ray_cpus: int | str = 24) -> list[str]:
    """The Hydra overrides of a training run on this platform (the CPU smoke's, the cluster smoke's and the
    miniature's): FSDP2 (FSDP1 moves the model to CUDA), float32 throughout (a CPU without bf16 instructions
    emulates bfloat16 about ten times slower), no torch.compile, no sleep mode (vLLM's CPU build has none); and, for
    a run that starts its own Ray in ``ray_dir``, more logical CPUs than cores (verl's actors each ask for one) and
    one logical GPU for the one "device". ``ray_dir`` None: a driver joining a running Ray cluster (the cluster's
    nodes declare their resources themselves), without ``ray_kwargs.ray_init.*``."""
    args = [
        "trainer.device=cpu",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.rollout.dtype=float32",
        "+actor_rollout_ref.rollout.enable_sleep_mode=false",
    ]
    if ray_dir is not None:
        args += [
            f"ray_kwargs.ray_init.num_cpus={ray_cpus}",
            "+ray_kwargs.ray_init.num_gpus=1",
            f"+ray_kwargs.ray_init._temp_dir={ray_dir}",
        ]
    return args


def requested() -> bool:
    """Whether this process runs with verl's platform override set to the CPU platform."""
    return os.environ.get(PLATFORM_ENV, "").strip().lower() == PLATFORM_NAME


def gpu_present() -> bool:
    """Whether this machine has a CUDA GPU (the driver's ``nvidia-smi`` answers, or torch sees a device)."""
    from verl.plugin.platform.platform_base import PlatformBase

    return PlatformBase.check_smi_command("nvidia-smi") or torch.cuda.is_available()


class GPUPresentError(RuntimeError):
    """``VERL_PLATFORM=cpu`` on a machine with a GPU."""


def _cpu_device_module() -> types.ModuleType:
    """``torch.cpu`` with the ``torch.cuda`` functions verl calls on its device module, as CPU no-ops or answers."""
    module = types.ModuleType("gcpo_cpu_device")
    module.__dict__.update({name: getattr(torch.cpu, name) for name in dir(torch.cpu) if not name.startswith("__")})
    rng = torch.random
    module.__dict__.update(
        is_available=lambda: True,
        device_count=lambda: 1,
        current_device=lambda: torch.device("cpu"),
        set_device=lambda device=None: None,
        synchronize=lambda device=None: None,
        get_device_name=lambda device=None: "cpu",
        manual_seed=torch.manual_seed,
        manual_seed_all=torch.manual_seed,
        get_rng_state=lambda device=None: rng.get_rng_state(),
        set_rng_state=lambda state, device=None: rng.set_rng_state(state),
        empty_cache=lambda: None,
        memory_allocated=lambda device=None: 0,
        max_memory_allocated=lambda device=None: 0,
        memory_reserved=lambda device=None: 0,
        max_memory_reserved=lambda device=None: 0,
        reset_peak_memory_stats=lambda device=None: None,
        mem_get_info=lambda device=None: _host_memory(),
        is_initialized=lambda: True,
    )
    return module


def _host_memory() -> tuple[int, int]:
    """(free, total) bytes of host memory, as ``torch.cuda.mem_get_info`` gives them for a GPU."""
    import psutil

    memory = psutil.virtual_memory()
    return memory.available, memory.total


def _platform_class():
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """The CPU as verl's accelerator: one logical Ray ``GPU`` per worker, gloo collectives, no IPC."""

        def __init__(self) -> None:
            if gpu_present():
                raise GPUPresentError(
                    f"{PLATFORM_ENV}=cpu on a machine with a CUDA GPU: the CPU platform is for machines without "
                    f"one (scripts/smoke_cpu.sh); unset {PLATFORM_ENV} to train on the GPU (scripts/smoke_1gpu.sh)"
                )
            self._device_module = _cpu_device_module()

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> types.ModuleType:
            return self._device_module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return False  # never auto-detected: only VERL_PLATFORM=cpu selects it

        def current_device(self):
            return torch.device("cpu")  # an int would send model.to() to CUDA

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            pass

        def synchronize(self, device_index: Optional[int] = None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # what Ray sets for its (here logical) GPU resource

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return PlatformCPU


def _dedup_backend(init_process_group):
    """``init_process_group`` that reads ``cpu:gloo,cpu:gloo`` (verl's mixed backend on the CPU) as ``gloo``."""

    @functools.wraps(init_process_group)
    def wrapper(*args, **kwargs):
        backend = kwargs.get("backend", args[0] if args else None)
        if isinstance(backend, str) and "," in backend:
            parts = {part.strip() for part in backend.split(",")}
            if parts == {"cpu:gloo"}:
                if args:
                    args = ("gloo", *args[1:])
                else:
                    kwargs["backend"] = "gloo"
        return init_process_group(*args, **kwargs)

    wrapper.__gcpo_cpu_patch__ = True
    return wrapper


def _live_weight_cpu_gemm(original):
    """vLLM's CPU GEMM dispatch, but 2-D linear layers keep ``weight`` and compute ``F.linear`` on it."""

    @functools.wraps(original)
    def dispatch(layer, remove_weight: bool) -> None:
        if layer.weight.is_meta or layer.weight.ndim != 2:
            return original(layer, remove_weight)
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)

    dispatch.__gcpo_cpu_patch__ = True
    return dispatch


def patch_vllm() -> bool:
    """Keep vLLM's CPU linear layers on their live weights; True when vLLM is in this process and is patched."""
    if "vllm" not in sys.modules:
        return False
    from vllm.model_executor.layers import utils as layer_utils

    if not getattr(layer_utils.dispatch_cpu_unquantized_gemm, "__gcpo_cpu_patch__", False):
        layer_utils.dispatch_cpu_unquantized_gemm = _live_weight_cpu_gemm(layer_utils.dispatch_cpu_unquantized_gemm)
    return True


def activate() -> None:
    """Register the platform with verl and, when ``VERL_PLATFORM=cpu``, apply the CPU path's changes here."""
    from verl.plugin.platform.platform_manager import PlatformRegistry

    PlatformRegistry.register(platform=PLATFORM_NAME)(_platform_class())
    if not requested():
        return
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    os.environ.setdefault("VERL_ENGINE_VENDOR", "nvidia")
    import torch.distributed

    if not getattr(torch.distributed.init_process_group, "__gcpo_cpu_patch__", False):
        torch.distributed.init_process_group = _dedup_backend(torch.distributed.init_process_group)
    patch_vllm()


activate()
