"""scripts/build_image.py: how it builds docker/Dockerfile (host network, the CA as a secret, the CPU base's
arguments), and what it says on bad input. The build itself runs in scripts/build_image.sh (docs/benchmarks.md)."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()


@pytest.fixture(scope="module")
def build_image():
    spec = importlib.util.spec_from_file_location("build_image", ROOT / "scripts" / "build_image.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_image", module)
    spec.loader.exec_module(module)
    return module


def test_the_cpu_image_builds_on_the_host_network_with_the_ca_as_a_secret(build_image):
    cmd = build_image.build_command(build_image.parse(["--ca", "/site/ca.pem"]))
    text = " ".join(cmd)
    assert cmd[:4] == ["podman", "build", "--network", "host"] and "--isolation chroot" in text
    assert "--secret id=pip-ca,src=/site/ca.pem" in text
    args = dict(cmd[i + 1].split("=", 1) for i, word in enumerate(cmd) if word == "--build-arg")
    assert args == {
        "BASE_IMAGE": "cpu-base",
        "BASE_MODEL": "docker/base-image-cpu.txt",
        "REQUIREMENTS": "docker/image-requirements-cpu.txt",
        "NO_DEPS": "docker/image-no-deps-cpu.txt",
        "DEBIAN_IMAGE": "localhost/debian:bookworm",
    }
    for value in args.values():  # every file the arguments name exists
        assert value in ("cpu-base", "localhost/debian:bookworm") or (ROOT / value).is_file()
    assert cmd[-3:] == ["-t", "localhost/gcpo-verl-cpu:0.1.0", str(ROOT)]


def test_the_gpu_image_is_the_same_dockerfile_on_verls_base(build_image):
    cmd = build_image.build_command(build_image.parse(["--target", "gpu", "--tool", "docker"]))
    args = [cmd[i + 1] for i, word in enumerate(cmd) if word == "--build-arg"]
    assert args == ["BASE_IMAGE=verlai/verl:vllm024.dev2"] and "--isolation" not in cmd
    assert cmd[:4] == ["docker", "build", "--network", "host"] and cmd[-2] == "gcpo-verl:0.1.0"


def test_both_targets_share_the_recipe_layers_and_the_ca_is_in_no_layer():
    stages = re.split(r"^FROM ", DOCKERFILE, flags=re.M)
    assert [s.split()[0] for s in stages[1:]] == ["${DEBIAN_IMAGE}", "${BASE_IMAGE}"]
    assert "ARG BASE_IMAGE=verlai/verl:vllm024.dev2" in stages[0]
    recipe = stages[2]  # above either base: the checks, the recipe, the encoder
    assert 'check_image.py snapshot "${BASE_MODEL}"' in recipe and "check_image.py verify" in recipe
    assert "RolloutEncoder" in recipe and "pip install --no-deps -e ." in recipe
    for run in re.findall(r"^RUN .*?(?<!\\)$", DOCKERFILE, flags=re.M | re.S):
        if "pip install" in run or "setup_cpu_env.sh" in run:
            assert run.startswith("RUN --mount=type=secret,id=pip-ca"), run  # pip sees the CA only as a secret
    assert "ca-certificates.crt" not in DOCKERFILE.replace("src=/etc/ssl/certs/ca-certificates.crt", "")
    assert not re.search(r"^(COPY|ADD) .*(\.crt|\.pem)", DOCKERFILE, flags=re.M)


def test_bad_input_stops_with_one_line(build_image, capsys, tmp_path):
    assert build_image.main(["--ca", str(tmp_path / "none.pem")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --ca {tmp_path / 'none.pem'} is not a file (the CA bundle pip needs inside the build)"]
    with pytest.raises(SystemExit) as exit_info:
        build_image.main(["--target", "tpu"])
    assert exit_info.value.code == 2 and "invalid choice: 'tpu'" in capsys.readouterr().err
