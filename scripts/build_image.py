#!/usr/bin/env python3
"""Builds this recipe's image from a clean checkout: the CPU image (default) or the GPU one, with docker/Dockerfile.

    python3 scripts/build_image.py [--target cpu|gpu] [--tool podman|docker] [--tag TAG] [--ca FILE]
                                   [--base IMAGE|pypi] [--debian-image IMAGE] [--mirror URL] [--save FILE]

The CPU image needs no image registry: its base is Debian 12 made with Debian's debootstrap (--variant=minbase,
about a minute) and imported as --debian-image when the container tool does not have it yet; the CPU smoke's stack
(scripts/cpu_env/lock.txt) goes on it from the package index. The GPU image is built FROM --base (verl's image,
from its registry), or with `--base pypi` FROM the Dockerfile's stage gpu-pypi-base: a stand-in for verl's image
made of its Python packages from PyPI on the same Debian base, which lacks what PyPI cannot give (flash-attn, the
CUDA toolkit; Python 3.11, not 3.12): docker/check_image.py names each of those differences as a warning, allowed
by docker/base-image-pypi-differences.txt, and stops the build on any other.

The container tool comes from Debian's packages when absent (root only): podman (daemonless; with runc, as crun
refuses hosts whose cgroups are in hybrid mode) or docker.io, whose daemon this then starts as
`dockerd --bridge=none --iptables=false --ip-masq=false` (a default dockerd adds a bridge and iptables rules
that cut off network namespaces on the same host). Every build uses the host's network (--network host). The CA
bundle (--ca, default the host's) reaches pip as the build secret `pip-ca`: in no layer of the image.

Bad input stops with one line: an unknown target or tool, --base with --target cpu (the CPU image's base is
--debian-image), a missing CA file, a tool that cannot be installed, a base image without the expected stack
(docker/check_image.py names each difference). Exit status 2 for bad input (the arguments, the CA file), 1 for a
build that failed. The image a build takes the tag from is removed (or kept, saying which container uses it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CA = "/etc/ssl/certs/ca-certificates.crt"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
GPU_BASE = "verlai/verl:vllm024.dev2"
PYPI_BASE = "pypi"  # --base pypi: the stand-in below
PYPI_ARGS = {
    "BASE_IMAGE": "gpu-pypi-base",
    "BASE_DIFFERENCES": "docker/base-image-pypi-differences.txt",
}
# podman's default rlimits are refused on machines of this project's kind ("error setting rlimit type 7/6")
PODMAN_LIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
CPU_ARGS = {
    "BASE_IMAGE": "cpu-base",
    "BASE_MODEL": "docker/base-image-cpu.txt",
    "REQUIREMENTS": "docker/image-requirements-cpu.txt",
    "NO_DEPS": "docker/image-no-deps-cpu.txt",
}


class BuildError(Exception):
    """Stops the build with one line."""


def say(message: str) -> None:
    print(f"build_image: {message}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=False, **kwargs)


def apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0:
        raise BuildError(f"{' '.join(packages)} not installed, and only root can install them: install them first")
    if not shutil.which("apt-get"):
        raise BuildError(f"{' '.join(packages)} not installed and this is not a Debian-like system: install them")
    say(f"installing {' '.join(packages)} (Debian's packages)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if run(["apt-get", "update", "-qq"], env=env).returncode != 0:
        raise BuildError("apt-get update failed")
    if run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env).returncode != 0:
        raise BuildError(f"apt-get install {' '.join(packages)} failed")


def ensure_tool(tool: str, need_debootstrap: bool) -> None:
    missing = []
    if tool == "podman":
        missing += [p for p in ("podman", "runc") if not shutil.which(p) and not Path(f"/usr/sbin/{p}").exists()]
    elif not shutil.which("dockerd"):
        missing.append("docker.io")
    if need_debootstrap and not (shutil.which("debootstrap") or Path("/usr/sbin/debootstrap").exists()):
        missing.append("debootstrap")
    if missing:
        apt_install(missing)
    if tool == "docker":
        ensure_dockerd()


def ensure_dockerd() -> None:
    if run(["docker", "info"], capture_output=True).returncode == 0:
        return
    if os.geteuid() != 0:
        raise BuildError("no docker daemon answers and only root can start one")
    log = Path(tempfile.gettempdir()) / "gcpo-dockerd.log"
    say(f"starting dockerd --bridge=none --iptables=false --ip-masq=false (log {log})")
    with log.open("ab") as out:
        subprocess.Popen(
            ["dockerd", "--bridge=none", "--iptables=false", "--ip-masq=false"],
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    for _ in range(60):
        if run(["docker", "info"], capture_output=True).returncode == 0:
            return
        time.sleep(1)
    raise BuildError(f"dockerd did not answer within 60 s; see {log}")


def image_id(tool: str, image: str) -> str | None:
    """The image's ID, None where the tool has no such image."""
    done = run([tool, "image", "inspect", image, "--format", "{{.Id}}"], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def remove_replaced(tool: str, old: str | None, tag: str) -> None:
    """Remove the image the new build took the tag from: untagged, it would stay on disk, and a machine that
    builds often fills its disk that way. An image a container still uses is kept (the tool refuses), saying so."""
    if old is None or old == image_id(tool, tag):
        return
    done = run([tool, "rmi", old], capture_output=True, text=True)
    if done.returncode == 0:
        say(f"removed the image {tag} replaced ({old[:12]})")
    else:
        reason = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        say(f"kept the image {tag} replaced ({old[:12]}): {reason}")


def make_debian_base(tool: str, image: str, mirror: str) -> None:
    """Debian 12 from Debian's packages (debootstrap --variant=minbase bookworm), imported as `image`."""
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    with tempfile.TemporaryDirectory(prefix="gcpo-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        say(f"making {image}: debootstrap --variant=minbase bookworm from {mirror}")
        start = time.monotonic()
        done = run([debootstrap, "--variant=minbase", "bookworm", str(rootfs), mirror], capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise BuildError(f"debootstrap failed: {tail[0]}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = run([tool, "import", "-", image], stdin=tar.stdout, capture_output=True, text=True)
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise BuildError(f"{tool} import of the Debian rootfs failed: {imported.stderr.strip()[-300:]}")
        say(f"{image} made in {time.monotonic() - start:.0f} s")


def build_command(args: argparse.Namespace) -> list[str]:
    cmd = [args.tool, "build", "--network", "host"]
    if args.tool == "podman":
        # chroot isolation: the build's RUN steps need no OCI runtime (crun refuses hybrid cgroups)
        cmd += ["--isolation", "chroot", *PODMAN_LIMITS]
    cmd += ["--secret", f"id=pip-ca,src={args.ca}", "-f", str(ROOT / "docker" / "Dockerfile")]
    if args.target == "cpu":
        build_args = dict(CPU_ARGS, DEBIAN_IMAGE=args.debian_image)
    elif args.base == PYPI_BASE:
        build_args = dict(PYPI_ARGS, DEBIAN_IMAGE=args.debian_image)
    else:
        build_args = {"BASE_IMAGE": args.base}
    for key, value in build_args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    return [*cmd, "-t", args.tag, str(ROOT)]


def image_size(tool: str, image: str) -> str:
    done = run([tool, "image", "inspect", image, "--format", "{{.Size}}"], capture_output=True, text=True)
    try:
        return f"{int(done.stdout.strip()) / 1e9:.2f} GB"
    except ValueError:
        return "unknown size"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--tool", choices=["podman", "docker"], default="podman")
    parser.add_argument(
        "--tag",
        help="default localhost/gcpo-verl-cpu:0.1.0 (cpu), gcpo-verl:0.1.0 (gpu), localhost/gcpo-verl-pypi:0.1.0 "
        "(gpu on the PyPI stand-in)",
    )
    parser.add_argument("--ca", default=DEFAULT_CA, help=f"CA bundle pip trusts, a build secret (default {DEFAULT_CA})")
    parser.add_argument(
        "--base",
        help=f"the GPU image's base, with --target gpu only (default {GPU_BASE}); `{PYPI_BASE}`: the stand-in made "
        "from PyPI (stage gpu-pypi-base), for a machine that cannot pull verl's image",
    )
    parser.add_argument(
        "--debian-image", default="localhost/debian:bookworm", help="the Debian base of the CPU image and the stand-in"
    )
    parser.add_argument("--mirror", default=DEFAULT_MIRROR, help="Debian mirror for debootstrap")
    parser.add_argument("--save", type=Path, help="also write the image to this archive (podman/docker save)")
    args = parser.parse_args(argv)
    if args.base is not None and args.target == "cpu":  # it would be ignored: the CPU image is built on Debian
        parser.error(f"--base {args.base} is the GPU image's base (--target gpu); the CPU image's is --debian-image")
    if args.base is None:
        args.base = GPU_BASE
    if args.tag is None:
        if args.target == "cpu":
            args.tag = "localhost/gcpo-verl-cpu:0.1.0"
        else:
            args.tag = "localhost/gcpo-verl-pypi:0.1.0" if args.base == PYPI_BASE else "gcpo-verl:0.1.0"
    return args


def needs_debian(args: argparse.Namespace) -> bool:
    """The CPU image and the PyPI stand-in are built on the Debian base."""
    return args.target == "cpu" or args.base == PYPI_BASE


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not Path(args.ca).is_file():  # bad input: exit 2, as argparse's refusals; a failed build is 1
        print(f"error: --ca {args.ca} is not a file (the CA bundle pip needs inside the build)", file=sys.stderr)
        return 2
    try:
        ensure_tool(args.tool, need_debootstrap=needs_debian(args))
        start = time.monotonic()
        if needs_debian(args) and image_id(args.tool, args.debian_image) is None:
            make_debian_base(args.tool, args.debian_image, args.mirror)
        cmd = build_command(args)
        replaced = image_id(args.tool, args.tag)
        say(" ".join(cmd))
        if run(cmd).returncode != 0:
            raise BuildError(
                f"{args.tool} build failed (its output above names the step; a base without the "
                "expected stack is listed by check_image.py snapshot, one line per difference)"
            )
        seconds = time.monotonic() - start
        say(f"built {args.tag} in {seconds:.0f} s, {image_size(args.tool, args.tag)}")
        remove_replaced(args.tool, replaced, args.tag)
        if args.save:
            if run([args.tool, "save", "-o", str(args.save), args.tag]).returncode != 0:
                raise BuildError(f"{args.tool} save to {args.save} failed")
            say(f"saved {args.tag} to {args.save} ({args.save.stat().st_size / 1e9:.2f} GB)")
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
