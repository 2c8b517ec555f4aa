"""scripts/build_image.py: how it builds docker/Dockerfile (host network, the CA as a secret, the CPU base's
arguments), and what it says on bad input. The build itself runs in scripts/build_image.sh (docs/benchmarks.md)."""

import importlib.util
import re
import subprocess
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


def test_the_gpu_image_on_the_pypi_stand_in_is_the_same_dockerfile_with_its_differences_allowed(build_image):
    cmd = build_image.build_command(build_image.parse(["--target", "gpu", "--base", "pypi"]))
    args = dict(cmd[i + 1].split("=", 1) for i, word in enumerate(cmd) if word == "--build-arg")
    assert args == {
        "BASE_IMAGE": "gpu-pypi-base",
        "BASE_DIFFERENCES": "docker/base-image-pypi-differences.txt",
        "DEBIAN_IMAGE": "localhost/debian:bookworm",
    }
    assert (ROOT / args["BASE_DIFFERENCES"]).is_file() and "AS gpu-pypi-base" in DOCKERFILE
    assert cmd[:4] == ["podman", "build", "--network", "host"] and "--secret" in cmd
    assert cmd[-3:] == ["-t", "localhost/gcpo-verl-pypi:0.1.0", str(ROOT)]
    assert build_image.needs_debian(build_image.parse(["--target", "gpu", "--base", "pypi"]))
    assert not build_image.needs_debian(build_image.parse(["--target", "gpu"]))


def test_the_pypi_stand_in_installs_the_pins_of_verls_image(check_image):
    """The stage gpu-pypi-base pins what docker/base-image.txt pins, and nothing at another version: each pin of the
    model is on a pip line of the stage, but flash-attn (a difference it is let through with) and the pins that
    come with another pin."""
    stage = re.search(r"^FROM \S+ AS gpu-pypi-base$(.*?)^FROM ", DOCKERFILE, flags=re.M | re.S).group(1)
    pins = dict(re.findall(r"(?<![\w.-])([A-Za-z][\w.-]*)==([\w.+]+)", stage))
    model = check_image.read_model(ROOT / "docker" / "base-image.txt")
    pinned = {name: entry.version for name, entry in model.entries.items() if entry.version}
    stage_pins = {check_image.canonicalize_name(name): version for name, version in pins.items()}
    assert stage_pins.pop("verl") == "0.7.1"  # installed for its dependencies, then uninstalled, as verl's image
    assert {name: pinned.get(name) for name in stage_pins} == stage_pins
    come_with = {
        "numba": "vllm 0.24.0 pins it",
        "accelerate": "vllm-omni 0.24.0 pins it",
        "mistral-common": "vllm 0.24.0 brings it",
    }
    assert sorted(set(pinned) - set(stage_pins)) == sorted(["flash-attn", *come_with])
    assert "flash-attn" in check_image.read_differences(ROOT / "docker" / "base-image-pypi-differences.txt")


def test_both_targets_share_the_recipe_layers_and_the_ca_is_in_no_layer():
    stages = re.split(r"^FROM ", DOCKERFILE, flags=re.M)
    assert [" ".join(s.split()[:3]) for s in stages[1:]] == [
        "${DEBIAN_IMAGE} AS cpu-base",
        "${DEBIAN_IMAGE} AS gpu-pypi-base",
        "${BASE_IMAGE} ARG VERL_VERSION=0.9.1",
    ]
    assert "ARG BASE_IMAGE=verlai/verl:vllm024.dev2" in stages[0]
    recipe = stages[3]  # above any base: the checks, the recipe, the encoder
    assert 'check_image.py snapshot "${BASE_MODEL}" --allow "${BASE_DIFFERENCES}"' in recipe
    assert "ARG BASE_DIFFERENCES=\n" in recipe and "check_image.py verify" in recipe  # by default none is allowed
    assert "RolloutEncoder" in recipe and "pip install --no-deps -e ." in recipe
    for run in re.findall(r"^RUN .*?(?<!\\)$", DOCKERFILE, flags=re.M | re.S):
        if "pip install" in run or "setup_cpu_env.sh" in run:
            assert run.startswith("RUN --mount=type=secret,id=pip-ca"), run  # pip sees the CA only as a secret
    assert "ca-certificates.crt" not in DOCKERFILE.replace("src=/etc/ssl/certs/ca-certificates.crt", "")
    assert not re.search(r"^(COPY|ADD) .*(\.crt|\.pem)", DOCKERFILE, flags=re.M)


def test_bad_input_stops_with_one_line(build_image, capsys, tmp_path):
    assert build_image.main(["--ca", str(tmp_path / "none.pem")]) == 2  # as argparse's refusals; a failed build: 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --ca {tmp_path / 'none.pem'} is not a file (the CA bundle pip needs inside the build)"]
    with pytest.raises(SystemExit) as exit_info:
        build_image.main(["--target", "tpu"])
    assert exit_info.value.code == 2 and "invalid choice: 'tpu'" in capsys.readouterr().err


def test_base_with_the_cpu_target_stops_with_one_line_not_ignored(build_image, capsys):
    """The CPU image is always built on the Debian stage: a --base given with it would be silently ignored.
    (parse, not main: were it let through, main would build the image.)"""
    for argv in (["--base", "pypi"], ["--target", "cpu", "--base", "verlai/verl:other"]):
        with pytest.raises(SystemExit) as exit_info:
            build_image.parse(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2
        assert err[-1].endswith(
            f"error: --base {argv[-1]} is the GPU image's base (--target gpu); the CPU image's is --debian-image"
        )
    assert build_image.parse(["--target", "gpu"]).base == "verlai/verl:vllm024.dev2"  # the default, gpu only
    assert build_image.parse([]).target == "cpu"


@pytest.mark.parametrize("rmi_rc, said", [(0, "removed the image"), (2, "kept the image")])
def test_the_image_a_build_replaces_is_removed_or_the_reason_it_stays_said(
    build_image, monkeypatch, capsys, rmi_rc, said
):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd[1:3])
        if cmd[1:3] == ["image", "inspect"]:
            return subprocess.CompletedProcess(cmd, 0, stdout="sha256:new\n", stderr="")
        return subprocess.CompletedProcess(cmd, rmi_rc, stdout="", stderr="Error: image is in use by a container")

    monkeypatch.setattr(build_image, "run", fake_run)
    build_image.remove_replaced("podman", "sha256:old", "localhost/x:1")
    assert calls[-1] == ["rmi", "sha256:old"]
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"build_image: {said} localhost/x:1 replaced (sha256:old)")
    assert err.endswith("in use by a container") == (rmi_rc != 0)
    calls.clear()
    build_image.remove_replaced("podman", "sha256:new", "localhost/x:1")  # the build changed nothing: kept
    build_image.remove_replaced("podman", None, "localhost/x:1")  # a first build: nothing replaced
    assert ["rmi", "sha256:new"] not in calls and capsys.readouterr().err == ""
