"""docker/Dockerfile's install steps resolve with pip, offline, against the base image written down in
docker/base-image.txt (see image_sandbox.py for how, and what it cannot see). No Docker engine here: the image
itself is not built in CI."""

import re

import pytest

from tests.docker.image_sandbox import ROOT, run_install_steps

DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()

# The install step this project shipped first: the base's transformers frozen, then verl[verl-core] 0.9.1 with
# its dependencies. verl 0.9.1 needs transformers>=5.5.3 and the base has 5.3.0: pip can never resolve it.
FROZEN_TRANSFORMERS = """
FROM verlai/verl:vllm024.latest
ARG VERL_VERSION=0.9.1
WORKDIR /opt/gcpo-verl
RUN python3 -m pip freeze \
        | grep -iE '^(torch|torchvision|torchaudio|vllm|flash[-_]attn|triton|transformers|xformers)==' \
        > image-constraints.txt && cat image-constraints.txt
RUN python3 -m pip install -c image-constraints.txt "verl[verl-core]==${VERL_VERSION}"
"""


@pytest.fixture(scope="module")
def build(tmp_path_factory, check_image):
    return run_install_steps(DOCKERFILE, tmp_path_factory.mktemp("image"), check_image)


def test_every_install_step_resolves_offline_against_the_base_image(build):
    assert build.failed is None, f"{build.failed.command}\n{build.failed.output[-4000:]}"
    commands = [step.command for step in build.steps]
    assert any("check_image.py snapshot" in c for c in commands)
    assert any(re.search(r"pip install .*verl==0\.9\.1", c) for c in commands)
    assert any(c.endswith("-e .") for c in commands)  # this project, with its install_requires
    assert "check_image.py verify" in commands[-1] and "image check passed" in build.steps[-1].output


def test_the_image_carries_verls_pins_over_an_untouched_gpu_stack(build):
    assert build.failed is None
    versions = build.versions()
    assert versions["verl"] == "0.9.1" and versions["gcpo-verl"] == "0.1.0"
    assert versions["transformers"] == "5.9.0"  # verl 0.9.1's pin for vLLM 0.24
    assert versions["transferqueue"] == "0.1.11" and versions["numpy"] == "2.3.5"
    assert versions["torch"] == "2.11.0" and versions["vllm"] == "0.24.0"
    assert versions["nvidia-nccl-cu13"] == "2.29.7"  # the base's NCCL, newer than torch's pin, kept


def test_the_frozen_transformers_install_step_is_resolution_impossible(tmp_path, check_image):
    failed = run_install_steps(FROZEN_TRANSFORMERS, tmp_path, check_image).failed
    assert failed is not None and "verl[verl-core]" in failed.command
    assert "ResolutionImpossible" in failed.output and "transformers" in failed.output


def test_resolving_torch_with_the_stack_frozen_is_refused(tmp_path, check_image):
    """Why the packages that depend on torch go in without dependencies: a resolution that includes torch wants
    NCCL at torch's pin, which the frozen stack (the base's newer NCCL) forbids."""
    dockerfile = """
RUN python3 docker/check_image.py snapshot docker/base-image.txt
RUN python3 -m pip install -c gpu-stack.txt -r docker/image-no-deps.txt
"""
    failed = run_install_steps(dockerfile, tmp_path, check_image).failed
    assert failed is not None and "image-no-deps" in failed.command
    assert "ResolutionImpossible" in failed.output and "nvidia-nccl-cu13" in failed.output


def test_the_base_image_is_the_tag_verl_builds_for_vllm_024():
    assert re.search(r"^ARG BASE_IMAGE=verlai/verl:vllm024\.dev2$", DOCKERFILE, re.M)
    model = (ROOT / "docker" / "base-image.txt").read_text()
    assert "verlai/verl:vllm024.dev2" in model and re.search(r"^vllm==0\.24\.0", model, re.M)
