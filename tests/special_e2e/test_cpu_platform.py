"""tests/special_e2e/cpu_platform.py: verl's CPU platform of the CPU smoke, loaded through verl's own plugin variable.

Each case runs in a fresh interpreter, as verl's workers do: verl picks its platform once per process."""

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.special_e2e import cpu_platform

PROBE = textwrap.dedent("""
    import json, os
    import torch
    import torch.distributed as dist
    from verl.plugin.platform import get_platform
    from verl.plugin.platform.platform_manager import PlatformRegistry
    out = {"registered": list(PlatformRegistry.registered_names()),
           "patched_init": getattr(dist.init_process_group, "__gcpo_cpu_patch__", False),
           "engine_device": os.environ.get("VERL_ENGINE_DEVICE")}
    try:
        platform = get_platform()
    except Exception as error:
        out["error"] = f"{type(error).__name__}: {error}"
    else:
        out.update(device=platform.device_name, backend=platform.communication_backend_name())
        if platform.device_name == "cpu":
            out.update(current=str(platform.current_device()), resource=platform.ray_resource_name(),
                       ipc=platform.is_ipc_supported(), count=platform.device_count(),
                       module_device=str(platform.device_module.current_device()),
                       module_name=platform.device_module.get_device_name())
            # verl's own process-group set-up asks for "cpu:gloo,cpu:gloo" here
            from verl.utils.distributed import initialize_global_process_group_ray
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PROBE_PORT"], RANK="0", WORLD_SIZE="1")
            initialize_global_process_group_ray(timeout_second=60)
            out["process_group"] = dist.get_backend()
            tensor = torch.ones(3)
            dist.all_reduce(tensor)
            out["all_reduce"] = tensor.tolist()
            dist.destroy_process_group()
            from verl.workers.engine import EngineRegistry
            out["engine"] = EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__
    print("PROBE" + json.dumps(out))
""")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _probe(tmp_path, fake_gpu=False, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("VERL_PLATFORM", "VERL_ENGINE_", "VERL_USE_"))}
    full.update(VERL_USE_EXTERNAL_MODULES="tests.special_e2e.cpu_platform", PROBE_PORT=str(_free_port()), **env)
    if fake_gpu:  # a driver that answers: what a machine with an NVIDIA GPU has
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\nexit 0\n")
        smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
        full["PATH"] = f"{bin_dir}{os.pathsep}{full['PATH']}"
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=full, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("PROBE") :])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of a machine without a GPU")
def test_inert_without_the_override(tmp_path):
    out = _probe(tmp_path)
    assert "cpu" in out["registered"]  # loaded through verl's plugin variable ...
    assert out["device"] == "cuda"  # ... yet verl's own detection is unchanged (its fallback on a GPU-less box)
    assert out["patched_init"] is False and out["engine_device"] is None


def test_never_auto_detected():
    platform_cls = cpu_platform._platform_class()
    assert platform_cls.is_platform_available(object.__new__(platform_cls), use_smi_check=True) is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_selected_by_the_override_and_trains_on_the_cpu(tmp_path):
    out = _probe(tmp_path, VERL_PLATFORM="cpu")
    assert out["device"] == "cpu" and out["backend"] == "gloo" and out["resource"] == "GPU"
    assert out["current"] == "cpu" and out["module_device"] == "cpu" and out["count"] == 1
    assert out["ipc"] is False and isinstance(out["module_name"], str)
    assert out["process_group"] == "gloo" and out["all_reduce"] == [1.0, 1.0, 1.0]
    assert out["engine"] == "FSDPEngineWithLMHead" and out["engine_device"] == "cuda"


def test_refused_on_a_machine_with_a_gpu(tmp_path):
    out = _probe(tmp_path, fake_gpu=True, VERL_PLATFORM="cpu")
    assert out["error"].startswith("GPUPresentError: VERL_PLATFORM=cpu on a machine with a CUDA GPU")
    assert "smoke_1gpu.sh" in out["error"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of a machine without a GPU")
def test_a_gpu_machine_without_the_override_is_not_affected(tmp_path):
    out = _probe(tmp_path, fake_gpu=True)
    assert out["device"] == "cuda" and "error" not in out


def test_backend_dedup_only_rewrites_the_duplicate():
    seen = []
    wrapped = cpu_platform._dedup_backend(lambda *a, **k: seen.append((a, k)))
    wrapped(backend="cpu:gloo,cpu:gloo", rank=0)
    wrapped("cpu:gloo,cpu:gloo")
    wrapped(backend="cpu:gloo,cuda:nccl")
    wrapped(backend="gloo")
    assert seen == [
        ((), {"backend": "gloo", "rank": 0}),
        (("gloo",), {}),
        ((), {"backend": "cpu:gloo,cuda:nccl"}),
        ((), {"backend": "gloo"}),
    ]


class _Layer(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)


def test_vllm_linear_layers_compute_on_their_live_weight():
    """vLLM's CPU dispatch would prepack the weight and drop it; verl's weight sync then has nowhere to write."""
    original_calls = []
    dispatch = cpu_platform._live_weight_cpu_gemm(lambda layer, remove_weight: original_calls.append(layer))
    layer = _Layer(torch.eye(3))
    dispatch(layer, remove_weight=True)
    x = torch.tensor([[1.0, 2.0, 3.0]])
    assert torch.equal(layer.cpu_linear(x, layer.weight, None), x)
    layer.weight.data.copy_(2 * torch.eye(3))  # what a weight sync does
    assert torch.equal(layer.cpu_linear(x, layer.weight, None), 2 * x)
    assert layer.weight.shape == (3, 3) and not original_calls
    conv = _Layer(torch.ones(4, 1, 3))  # not a linear layer: vLLM's own handling
    dispatch(conv, remove_weight=True)
    assert original_calls == [conv]
