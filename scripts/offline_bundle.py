#!/usr/bin/env python3
"""Build an offline install of verl, vLLM and this project for a GPU box without network, in parts small enough to
carry one at a time, and the script that puts it together there.

    python scripts/offline_bundle.py --out OUT --present box-freeze.txt --keep torch --keep triton \\
        --build . --build 'antlr4-python3-runtime==4.9.3' --prune vllm-0.24-hopper-dense \\
        gcpo-verl vllm==0.24.0 'verl[verl-core]==0.9.1' ray==2.60.0 transferqueue==0.1.11 \\
        'apache-tvm-ffi==0.1.15.post2'
    # copy OUT/bundle/ to the box (its part files one at a time if need be), then there:
    bash OUT/bundle/unpack.sh /opt/gcpo-site && . /opt/gcpo-site/env.sh && export VLLM_USE_FLASHINFER_SAMPLER=0

What it does, in order (docs/deployment.md, "An offline GPU box", says why each step is there):

1. **Resolve** the requirements with pip's own resolver for the box's Python and platform (``pip install
   --dry-run --report`` with ``--python-version``/``--platform``/``--only-binary=:all:``), every ``--keep``
   distribution pinned to the box's version as a constraint: the box's GPU stack (torch, triton, the CUDA
   libraries) never moves. A hand-made closure that takes the first version it meets can pick a set that pip
   would never install together (vLLM 0.24.0 pins ``apache-tvm-ffi==0.1.9``, which xgrammar 0.2.8 cannot load).
2. **Leave out** what the box already has: a resolved distribution at exactly the version ``pip freeze`` on the
   box lists (``--present``). Any other version is bundled, and the bundle is first on ``PYTHONPATH``.
3. **Download** each remaining wheel (``pip download --no-deps`` of the resolved version), build the ``--build``
   ones first (a project folder, or an sdist-only pure-Python package such as omegaconf's antlr4 runtime).
4. **Install** them into ``OUT/site`` (``pip install --no-deps --target``). ``unpack.sh`` byte-compiles the site on
   the box with the box's Python (4.6 s on an H100 box's 16 cores), so its processes do not each compile what
   they import.
5. **Prune** what the named preset says the box's workload never imports (each entry names the guarded import).
6. **Pack** ``OUT/site`` as one tar stream compressed by ``zstd --long=27`` (CUDA binaries compress about 12x with a
   long window, about 4x with deflate), cut into ``--part-mib`` parts, with ``SHA256SUMS`` and ``unpack.sh``, plus
   the packing machine's ``zstd`` binary for a box that has none.

Needs pip, and ``zstd`` on this machine. ``--no-index --find-links DIR`` resolve and download from local wheels
only (the tests do).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from packaging.utils import canonicalize_name

# what a manylinux x86-64 box with glibc 2.35 or newer installs (pip matches each platform tag exactly; the H100
# box's Python 3.12.3 is Ubuntu 24.04's, glibc 2.39); --platform replaces the list
PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(35, 16, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
ZSTD_WINDOW_LOG = 27

# Paths inside the site that a dense text model in eager mode on a Hopper GPU never imports with vLLM 0.24.0
# (each import is guarded in vLLM's source: a missing module is skipped or only an unused feature fails), with
# the reason. Checked on an H100 (docs/benchmarks.md, 2026-11-26): the one-GPU smoke ran without them.
PRUNE_PRESETS: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm-0.24-hopper-dense": (
        ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "FlashAttention 2 kernels: Hopper runs FA3"),
        ("vllm/vllm_flash_attn/cute", "CuTe-DSL FlashAttention 4 (Blackwell)"),
        ("vllm/third_party/fmha_sm100", "Blackwell attention kernels"),
        ("vllm/_moe_C_stable_libtorch.abi3.so", "mixture-of-experts ops (vllm/platforms/cuda.py guards the import)"),
        ("vllm/vllm-rs", "the Rust front end, used only when asked for"),
        ("tokenspeed_triton", "tokenspeed kernels (guarded import)"),
        ("tokenspeed_mla", "tokenspeed MLA kernels (guarded import)"),
        ("nvidia_cutlass_dsl", "the CUTLASS DSL, for the CuTe kernels above"),
        ("nvidia_cutlass_dsl.pth", "its path hook"),
        ("quack", "CuTe-DSL kernels (guarded import)"),
        ("av", "video decoding, multimodal inputs only"),
        ("av.libs", "its libraries"),
        ("torchcodec", "audio/video decoding, multimodal inputs only"),
        ("torchcodec.libs", "its libraries"),
        ("nvidia", "nvcc and nvvm wheels: the box's CUDA and triton have their own (vLLM compiled on an H200)"),
        ("ray/jars", "Ray's Java workers"),
        ("bin", "console scripts written for this machine's paths"),
    ),
}
# The same, keeping the CUTLASS DSL and quack that flash-attn-4 (the CuTe-DSL FlashAttention: add the requirement
# 'flash-attn-4==4.0.0b19', the newest beside vLLM 0.24.0's pins) needs to train the FSDP actor on packed sequences
# (tests/special_e2e/smoke/fa4.py); about 58 MiB more packed. vLLM's own copy of its kernels stays out.
FA4_NEEDS = ("nvidia_cutlass_dsl", "nvidia_cutlass_dsl.pth", "quack")
PRUNE_PRESETS["vllm-0.24-hopper-dense-fa4"] = tuple(
    entry for entry in PRUNE_PRESETS["vllm-0.24-hopper-dense"] if entry[0] not in FA4_NEEDS
)
UNPACK_SH = """#!/usr/bin/env bash
# Put the bundle back together on the box: check every part, decompress, unpack into DEST.
#   bash unpack.sh DEST [PARTS_DIR]     (PARTS_DIR: where the part files are; default: beside this script)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEST="${1:?usage: unpack.sh DEST [PARTS_DIR]}"
PARTS="${2:-${HERE}}"
ZSTD="$(command -v zstd || true)"
[ -n "${ZSTD}" ] || { chmod +x "${HERE}/zstd" 2>/dev/null; ZSTD="${HERE}/zstd"; }
[ -x "${ZSTD}" ] || { echo "unpack: no zstd on PATH and none beside this script" >&2; exit 2; }
(cd "${PARTS}" && sha256sum --quiet -c "${HERE}/SHA256SUMS") \\
  || { echo "unpack: a part in ${PARTS} is missing or damaged (SHA256SUMS above); copy it again" >&2; exit 3; }
mkdir -p "${DEST}"
parts=(); while read -r _ name; do parts+=("${PARTS}/${name}"); done < "${HERE}/SHA256SUMS"
cat "${parts[@]}" | "${ZSTD}" -q -d --long=__WINDOW__ | tar -x -C "${DEST}"
# with the box's Python: its processes then load byte-code instead of each compiling what it imports
"${PYTHON:-python3}" -m compileall -q -j 0 "${DEST}" > /dev/null 2>&1 \
  || echo "unpack: byte-compiling ${DEST} failed; Python compiles each module as it is first imported" >&2
# DEST goes on PYTHONPATH, where Python reads no .pth file: the folders the site's .pth files name go there too
# (the CUTLASS DSL's python_packages, for one); an import line of a .pth is left out
paths="${DEST}"
for pth in "${DEST}"/*.pth; do
  [ -e "${pth}" ] || continue
  while IFS= read -r line || [ -n "${line}" ]; do
    case "${line}" in ""|"#"*|import*) continue ;; esac
    [ -d "${DEST}/${line}" ] && paths="${paths}:${DEST}/${line}"
  done < "${pth}"
done
printf 'export PYTHONPATH="%s${PYTHONPATH:+:${PYTHONPATH}}"\n' "${paths}" > "${DEST}/env.sh"
echo "unpack: ${#parts[@]} part(s) into ${DEST}; . ${DEST}/env.sh puts it on PYTHONPATH"
"""


class BundleError(Exception):
    """A step that cannot go on: one line, exit status 1."""


@dataclass(frozen=True)
class Resolved:
    """One distribution of the resolved closure."""

    name: str
    version: str
    requested: bool


def run(command: Sequence[str], what: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if proc.returncode:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise BundleError(f"{what} failed: {' | '.join(detail[-3:]) if detail else f'exit {proc.returncode}'}")
    return proc


def target_flags(python_version: str, platforms: Sequence[str]) -> list[str]:
    """pip's flags for wheels of another interpreter and platform (they need ``--only-binary=:all:``)."""
    abi = "cp" + python_version.replace(".", "")
    flags = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for tag in (abi, "abi3", "none"):
        flags += ["--abi", tag]
    for platform in (*platforms, "any"):
        flags += ["--platform", platform]
    return flags


def read_freeze(path: Path) -> dict[str, str]:
    """``name==version`` lines of ``pip freeze`` (comments, editable and URL lines are left out)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*(?:#.*)?", line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def resolve(requirements: Sequence[str], constraints: Path, pip_flags: Sequence[str], work: Path) -> list[Resolved]:
    """The closure pip itself would install on the box (its resolver, metadata only: nothing is installed)."""
    report = work / "resolve-report.json"
    run(
        [
            sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
            "--report", str(report), "--target", str(work / "resolve-target"), "-c", str(constraints),
            *pip_flags, *requirements,
        ],
        "resolving the requirements with pip",
    )  # fmt: skip
    items = json.loads(report.read_text(encoding="utf-8"))["install"]
    return sorted(
        (
            Resolved(canonicalize_name(i["metadata"]["name"]), i["metadata"]["version"], bool(i.get("requested")))
            for i in items
        ),
        key=lambda r: r.name,
    )


def build_wheels(specs: Iterable[str], wheel_dir: Path) -> None:
    for spec in specs:
        run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheel_dir), spec],
            f"building a wheel of {spec}",
        )


def download(dists: Sequence[Resolved], pip_flags: Sequence[str], wheel_dir: Path) -> list[Path]:
    """One wheel per distribution, the resolved version (a wheel already in ``wheel_dir`` is reused)."""
    wheels = []
    for dist in dists:
        found = _wheel_of(dist, wheel_dir)
        if found is None:
            run(
                [
                    sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheel_dir),
                    *pip_flags, f"{dist.name}=={dist.version}",
                ],
                f"downloading {dist.name}=={dist.version}",
            )  # fmt: skip
            found = _wheel_of(dist, wheel_dir)
        if found is None:
            raise BundleError(f"no wheel of {dist.name}=={dist.version} in {wheel_dir} after downloading it")
        wheels.append(found)
    return wheels


def _wheel_of(dist: Resolved, wheel_dir: Path) -> Path | None:
    for path in sorted(wheel_dir.glob("*.whl")):
        name, version = path.name.split("-")[:2]
        if canonicalize_name(name) == dist.name and version == dist.version:
            return path
    return None


def install(wheels: Sequence[Path], site: Path, python_version: str, platforms: Sequence[str]) -> None:
    if site.exists():
        shutil.rmtree(site)
    run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-compile",
            "--target", str(site), *target_flags(python_version, platforms), *map(str, wheels),
        ],
        "installing the wheels into the site folder",
    )  # fmt: skip


def prune(site: Path, preset: str | None) -> list[tuple[str, str, int]]:
    """Remove the preset's paths; ``(path, reason, bytes)`` of each one that was there."""
    removed = []
    for relative, reason in PRUNE_PRESETS.get(preset, ()) if preset else ():
        path = site / relative
        if not path.exists():
            continue
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        removed.append((relative, reason, size))
    return removed


def pack(site: Path, bundle: Path, part_bytes: int) -> list[Path]:
    """``site`` as one tar stream (sorted, so the same site packs the same way), zstd with a long window, cut into
    parts of ``part_bytes``; writes ``SHA256SUMS`` (in part order) and ``unpack.sh``; returns the parts."""
    zstd = shutil.which("zstd")
    if zstd is None:
        raise BundleError("zstd is needed to pack the bundle (Debian: apt-get install zstd)")
    if bundle.exists():
        shutil.rmtree(bundle)
    bundle.mkdir(parents=True)
    compressor = subprocess.Popen(
        [zstd, "-q", "-10", f"--long={ZSTD_WINDOW_LOG}", "-T0", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert compressor.stdin is not None and compressor.stdout is not None
    parts: list[Path] = []

    def write_parts() -> None:
        out, written = None, part_bytes
        for chunk in iter(lambda: compressor.stdout.read(1 << 20), b""):
            while chunk:
                if written == part_bytes:
                    if out is not None:
                        out.close()
                    parts.append(bundle / f"part-{len(parts):03d}")
                    out, written = parts[-1].open("wb"), 0
                take = chunk[: part_bytes - written]
                out.write(take)
                written += len(take)
                chunk = chunk[len(take) :]
        if out is not None:
            out.close()

    reader = threading.Thread(target=write_parts)
    reader.start()
    with tarfile.open(fileobj=compressor.stdin, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in [site, *sorted(site.rglob("*"))]:
            tar.add(path, arcname=os.path.relpath(path, site), recursive=False)
    compressor.stdin.close()
    reader.join()
    if compressor.wait():
        raise BundleError(f"zstd exited {compressor.returncode}")
    sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in parts]
    (bundle / "SHA256SUMS").write_text("\n".join(sums) + "\n", encoding="utf-8")
    (bundle / "unpack.sh").write_text(UNPACK_SH.replace("__WINDOW__", str(ZSTD_WINDOW_LOG)), encoding="utf-8")
    (bundle / "unpack.sh").chmod(0o755)
    shutil.copy2(zstd, bundle / "zstd")
    return parts


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument("requirements", nargs="+", help="what the box must be able to import (pip requirements)")
    parser.add_argument("--out", type=Path, required=True, help="work folder: wheels/, site/, bundle/")
    parser.add_argument("--present", type=Path, help="`pip freeze` of the box: these versions stay out of the bundle")
    parser.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="NAME",
        help="a distribution of the box that must not move (a constraint at the box's --present version)",
    )
    parser.add_argument("--build", action="append", default=[], help="a project folder or sdist spec to build first")
    parser.add_argument("--prune", choices=sorted(PRUNE_PRESETS), help="leave out what this workload never imports")
    parser.add_argument("--python-version", default="3.12", help="the box's Python (default 3.12)")
    parser.add_argument("--platform", action="append", help=f"wheel platform tags (default: {', '.join(PLATFORMS)})")
    parser.add_argument("--part-mib", type=float, default=57.0, help="largest part, MiB (default 57)")
    parser.add_argument("--no-index", action="store_true", help="resolve and download from --find-links only")
    parser.add_argument("--find-links", action="append", default=[], type=Path, help="a folder of local wheels")
    parser.add_argument("--resolve-only", action="store_true", help="write OUT/closure.txt and stop")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _main(args)
    except BundleError as err:
        print(f"offline_bundle: {err}", file=sys.stderr)
        return 1


def _main(args: argparse.Namespace) -> int:
    if args.part_mib <= 0:
        raise BundleError(f"--part-mib must be positive, got {args.part_mib}")
    present = read_freeze(args.present) if args.present else {}
    keep = {canonicalize_name(name) for name in args.keep}
    missing = sorted(keep - set(present))
    if missing:
        raise BundleError(f"--keep {', '.join(missing)}: not in the box's --present freeze (its version is needed)")
    out = args.out.resolve()
    wheel_dir, site, bundle = out / "wheels", out / "site", out / "bundle"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    platforms = args.platform or list(PLATFORMS)
    flags = target_flags(args.python_version, platforms)
    links = [*args.find_links, wheel_dir]
    flags += (["--no-index"] if args.no_index else []) + [f for link in links for f in ("--find-links", str(link))]

    build_wheels(args.build, wheel_dir)
    constraints = out / "constraints.txt"
    constraints.write_text("".join(f"{name}=={present[name]}\n" for name in sorted(keep)), encoding="utf-8")
    closure = resolve(args.requirements, constraints, flags, out)
    bundled = [d for d in closure if present.get(d.name) != d.version]
    on_box = [d for d in closure if present.get(d.name) == d.version]
    (out / "closure.txt").write_text(
        "".join(f"{d.name}=={d.version}{'  # on the box' if d in on_box else ''}\n" for d in closure),
        encoding="utf-8",
    )
    print(f"offline_bundle: pip resolved {len(closure)} distributions; {len(on_box)} are on the box at that version")
    if args.resolve_only:
        print(f"offline_bundle: the closure is in {out / 'closure.txt'}")
        return 0
    wheels = download(bundled, flags, wheel_dir)
    print(f"offline_bundle: {len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / 2**20:.0f} MiB")
    install(wheels, site, args.python_version, platforms)
    removed = prune(site, args.prune)
    for relative, reason, size in removed:
        print(f"offline_bundle: pruned {relative} ({size / 2**20:.1f} MiB): {reason}")
    site_bytes = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    parts = pack(site, bundle, int(args.part_mib * 2**20))
    packed = sum(p.stat().st_size for p in parts)
    print(
        f"offline_bundle: site {site_bytes / 2**20:.0f} MiB -> {len(parts)} part(s), {packed / 2**20:.0f} MiB, in "
        f"{bundle}; on the box: bash unpack.sh DEST, then . DEST/env.sh (PYTHONPATH)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
