"""scripts/offline_bundle.py on local wheels: pip's resolver picks the closure, what the box has at that version
stays out, the kept GPU stack does not move, the preset's paths are pruned, and the parts put back together on
the "box" (unpack.sh) give the site bit for bit."""

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.scripts.load import load_script

pytestmark = pytest.mark.skipif(shutil.which("zstd") is None, reason="packing needs the zstd command")


bundle_script = load_script("offline_bundle")


def _wheel(folder: Path, name: str, version: str, requires=(), files=None) -> Path:
    """A minimal pure-Python wheel (what pip needs: METADATA, WHEEL, RECORD)."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    files = files or {f"{name.replace('-', '_')}/__init__.py": f"VERSION = {version!r}\n"}
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in files.items():
            archive.writestr(file, text)
        archive.writestr(f"{dist}.dist-info/METADATA", metadata)
        archive.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n")
        archive.writestr(f"{dist}.dist-info/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path):
    """A local index: app needs lib>=2 and gpu; lib 1 and 2; gpu 1 and 2 (the box has gpu 1); util on the box."""
    folder = tmp_path / "index"
    folder.mkdir()
    _wheel(folder, "app", "1.0", requires=["lib>=2", "gpu", "util==3.0"])
    _wheel(folder, "lib", "1.0")
    # a big, incompressible file (random bytes), so that the stream needs several parts
    payload = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(2048))
    # with a .pth file that puts a folder on the path (and an import line), as nvidia-cutlass-dsl's wheel does
    files = {"lib/__init__.py": "", "lib/blob.bin": payload.hex(), "lib/python_packages/inner.py": ""}
    _wheel(folder, "lib", "2.0", files={**files, "lib.pth": "lib/python_packages\nimport os\n"})
    _wheel(folder, "gpu", "1.0")
    _wheel(folder, "gpu", "2.0")
    _wheel(folder, "util", "3.0")
    return folder


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _build(tmp_path, index, *extra):
    present = tmp_path / "freeze.txt"
    present.write_text("gpu==1.0\nutil==3.0\nlib==1.0\n-e git+https://example.invalid/x#egg=x\n")
    out = tmp_path / "out"
    argv = ["--out", str(out), "--present", str(present), "--keep", "gpu", "--no-index", "--find-links", str(index)]
    return out, bundle_script.main([*argv, "--part-mib", str(16 / 1024), *extra, "app"])


def test_the_closure_is_pips_the_box_keeps_its_versions_and_the_parts_reassemble_bit_for_bit(tmp_path, index):
    out, status = _build(tmp_path, index)
    assert status == 0
    closure = (out / "closure.txt").read_text().splitlines()
    # pip's resolver: lib 2 (app needs >= 2), gpu held at the box's 1.0 (--keep), util on the box at 3.0
    assert closure == ["app==1.0", "gpu==1.0  # on the box", "lib==2.0", "util==3.0  # on the box"]
    site = out / "site"
    assert (site / "app" / "__init__.py").is_file() and (site / "lib" / "blob.bin").is_file()
    assert not (site / "gpu").exists() and not (site / "util").exists()
    parts = sorted((out / "bundle").glob("part-*"))
    assert len(parts) > 1 and all(p.stat().st_size <= 16 * 1024 for p in parts)
    # the box: the parts copied elsewhere, one folder of their own, then unpack.sh
    carried = tmp_path / "carried"
    carried.mkdir()
    for part in parts:
        shutil.copy(part, carried / part.name)
    dest = tmp_path / "box-site"
    proc = subprocess.run(
        ["bash", str(out / "bundle" / "unpack.sh"), str(dest), str(carried)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert {k: v for k, v in _tree(dest).items() if k != "env.sh"} == _tree(site)
    assert list(dest.rglob("__pycache__"))  # byte-compiled on the box
    # env.sh: the site on PYTHONPATH, with the folder its .pth file names (Python reads no .pth there)
    probe = f". {dest}/env.sh && python3 -c 'import sys; print(sys.path)'"
    path = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert f"'{dest}', '{dest}/lib/python_packages'" in path.stdout


def test_a_damaged_or_missing_part_stops_the_unpack_with_one_line(tmp_path, index):
    out, status = _build(tmp_path, index)
    assert status == 0
    bundle = out / "bundle"
    part = sorted(bundle.glob("part-*"))[1]
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    proc = subprocess.run(["bash", str(bundle / "unpack.sh"), str(tmp_path / "d")], capture_output=True, text=True)
    assert proc.returncode == 3 and "a part in" in proc.stderr and "missing or damaged" in proc.stderr
    part.unlink()
    proc = subprocess.run(["bash", str(bundle / "unpack.sh"), str(tmp_path / "d")], capture_output=True, text=True)
    assert proc.returncode == 3


def test_the_preset_prunes_only_its_paths_and_says_why(tmp_path, index, capsys):
    _wheel(index, "app", "1.1", requires=["lib>=2"], files={"app/__init__.py": "", "ray/jars/x.jar": "java"})
    out, status = _build(tmp_path, index, "--prune", "vllm-0.24-hopper-dense")
    assert status == 0
    assert not (out / "site" / "ray" / "jars").exists() and (out / "site" / "app" / "__init__.py").is_file()
    assert "pruned ray/jars" in capsys.readouterr().out and "Ray's Java workers" in dict(
        bundle_script.PRUNE_PRESETS["vllm-0.24-hopper-dense"]
    ).get("ray/jars", "")


def test_a_kept_name_the_box_does_not_list_and_an_unresolvable_set_are_one_line_errors(tmp_path, index, capsys):
    out = tmp_path / "out"
    status = bundle_script.main(["--out", str(out), "--keep", "torch", "--no-index", "--find-links", str(index), "app"])
    assert status == 1 and "--keep torch: not in the box's --present freeze" in capsys.readouterr().err
    status = bundle_script.main(["--out", str(out), "--no-index", "--find-links", str(index), "app", "lib<2"])
    err = capsys.readouterr().err
    assert status == 1 and err.startswith("offline_bundle: resolving the requirements with pip failed")
    assert len(err.strip().splitlines()) == 1


def test_the_fa4_preset_keeps_the_cutlass_dsl_and_quack_and_prunes_the_rest():
    base = dict(bundle_script.PRUNE_PRESETS["vllm-0.24-hopper-dense"])
    fa4 = dict(bundle_script.PRUNE_PRESETS["vllm-0.24-hopper-dense-fa4"])
    assert set(base) - set(fa4) == {"nvidia_cutlass_dsl", "nvidia_cutlass_dsl.pth", "quack"}
    assert set(fa4) < set(base) and "vllm/vllm_flash_attn/cute" in fa4  # vLLM's own copy stays out
