"""Runs docker/Dockerfile's install steps with pip, offline, in a stand-in for the base image.

No Docker engine and no index: the base image is a virtual environment holding metadata-only wheels ("stubs")
of every package docker/base-image.txt names, at its version and with the requirements written down there.
pip resolves each `RUN python3 -m pip ...` step of the Dockerfile, verbatim, against that environment and a local
index of stubs: one per distribution of the CI environment (real name, version, Requires-Dist and extras), per
base-image entry, and per version the install steps pin (with the requirements of the CI environment's version
of that package where the pinned version is not installed here, an approximation). `RUN python3
docker/check_image.py ...` steps run too. A conflict between verl's requirements, this project's, the pins and
the base's stack fails here as it would fail `docker build`.

What it cannot see: packages of the real image that docker/base-image.txt does not name, requirements of pinned
versions this environment does not have, and the base's [system] (Python, OS, nvcc: the stand-in is a virtual
environment on this host, so its copy of each model leaves that section out). check_image.py covers those inside
the real build.
"""

from __future__ import annotations

import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from unittest import mock

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
EXECUTED = ("python3 -m pip ", "python3 docker/check_image.py ")
SECRET_CA = re.compile(
    r"^--mount=type=secret,id=pip-ca\s+if \[ -s /run/secrets/pip-ca \]; then export PIP_CERT=/run/secrets/pip-ca; fi"
    r"\s+&&\s+"
)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s,;]+)$")


@dataclass
class Step:
    command: str
    returncode: int
    output: str


@dataclass
class Build:
    steps: list[Step]
    skipped: list[str]
    site: Path

    @property
    def failed(self) -> Step | None:
        return next((s for s in self.steps if s.returncode != 0), None)

    def versions(self) -> dict[str, str]:
        return {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions(path=[str(self.site)])}


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined as Docker joins them."""
    joined = re.sub(r"\\\n", " ", text)
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def write_stub_wheel(directory: Path, name: str, version: str, requires=(), extras=()) -> Path:
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    fields = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    fields += [f"Provides-Extra: {extra}" for extra in extras]
    fields += [f"Requires-Dist: {req}" for req in requires]
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{info}/METADATA", "\n".join(fields) + "\n")
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: gcpo-verl tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path


def without_system_section(model_text: str) -> str:
    """A base-image model without its [system] section: what the base is, not what it holds, which a virtual
    environment on the test's host cannot stand in for."""
    kept, skipping = [], False
    for line in model_text.splitlines(keepends=True):
        stripped = line.split("#", 1)[0].strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            skipping = stripped == "[system]"
        if not skipping:
            kept.append(line)
    return "".join(kept)


def project_metadata() -> tuple[str, str, list[str]]:
    """Name, version and Requires-Dist of this project, read from setup.py as setuptools would get them."""
    captured: dict = {}
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        with mock.patch("setuptools.setup", lambda **kwargs: captured.update(kwargs)):
            runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    finally:
        os.chdir(cwd)
    requires = list(captured["install_requires"])
    for extra, reqs in captured.get("extras_require", {}).items():
        for req in reqs:
            assert ";" not in req, f"setup.py extra {extra}: markers are not modelled here ({req})"
            requires.append(f'{req}; extra == "{extra}"')
    return captured["name"], captured["version"], requires


STUB_BACKEND = '''"""PEP 517 backend of the stand-in project: hands pip the metadata-only wheel built for it."""
import os
import shutil

WHEEL = {wheel!r}


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    shutil.copy(WHEEL, wheel_directory)
    return os.path.basename(WHEEL)


build_editable = build_wheel
'''


def _ci_distributions() -> dict[str, metadata.Distribution]:
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        if dist.metadata["Name"]:
            found.setdefault(canonicalize_name(dist.metadata["Name"]), dist)
    return found


def _pins(commands: list[str], workdir: Path) -> dict[str, str]:
    """Every name==version the install steps ask for, on the command line or in a -r/-c file that exists."""
    pins: dict[str, str] = {}

    def add(token: str) -> None:
        match = PIN.match(token.strip())
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(3)

    for command in commands:
        tokens = shlex.split(command)
        for flag, value in zip(tokens, tokens[1:]):
            if flag in ("-r", "-c") and (workdir / value).is_file():
                for line in (workdir / value).read_text().splitlines():
                    add(line.split("#", 1)[0])
        for token in tokens:
            add(token)
    return pins


def run_install_steps(dockerfile_text: str, tmp: Path, check_image) -> Build:
    """Builds the stand-in base, then runs the Dockerfile's pip and check_image.py steps in order, stopping at
    the first that fails."""
    instructions = dockerfile_instructions(dockerfile_text)
    # the GPU image: the recipe layers (after the last FROM) on verl's image; the CPU base's stage is not its
    last_from = max((i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"), default=-1)
    instructions = [(k, r) for k, r in instructions[: max(last_from, 0)] if k == "ARG"] + instructions[last_from + 1 :]
    env_vars: dict[str, str] = {}
    for keyword, rest in instructions:
        if keyword == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            env_vars[key] = value
        elif keyword == "ENV":
            env_vars.update(pair.split("=", 1) for pair in shlex.split(rest))

    def expand(command: str) -> str:
        return re.sub(r"\$\{(\w+)\}", lambda m: env_vars.get(m.group(1), ""), command)

    commands, skipped = [], []
    for keyword, rest in instructions:
        if keyword != "RUN":
            continue
        rest = SECRET_CA.sub("", rest)  # the site's CA for pip, a build secret: none here (an offline index)
        if rest.startswith(EXECUTED):
            assert not re.search(r">\s*/", rest), f"an install step writes outside its working directory: {rest}"
            commands.append(expand(rest))
        else:
            assert "pip" not in rest, f"a pip step this test would not run (start it with {EXECUTED}): {rest}"
            skipped.append(rest)

    workdir, index, empty = tmp / "workdir", tmp / "index", tmp / "no-config"
    for directory in (workdir / "docker", index, empty):
        directory.mkdir(parents=True)
    for path in DOCKER.iterdir():
        if path.is_file():
            shutil.copy(path, workdir / "docker" / path.name)
    for path in (workdir / "docker").glob("base-image*.txt"):
        path.write_text(without_system_section(path.read_text()))
    name, version, requires = project_metadata()
    extras = sorted({r.split('extra == "')[1].rstrip('"') for r in requires if 'extra == "' in r})
    (tmp / "project").mkdir()
    wheel = write_stub_wheel(tmp / "project", name, version, requires, extras)
    (workdir / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "stub_backend"\nbackend-path = ["."]\n'
    )
    (workdir / "stub_backend.py").write_text(STUB_BACKEND.format(wheel=str(wheel)))

    # the index: the base model first (its recorded requirements win), then the CI environment, then the pins
    ci = _ci_distributions()
    model = check_image.read_model(DOCKER / "base-image.txt")
    written: set[tuple[str, str]] = set()

    def emit(dist_name: str, dist_version: str, dist_requires, extras=()) -> None:
        key = (canonicalize_name(dist_name), dist_version)
        if key not in written:
            written.add(key)
            write_stub_wheel(index, dist_name, dist_version, dist_requires, extras)

    def ci_metadata(key: str):
        dist = ci.get(key)
        return (dist.requires or [], dist.metadata.get_all("Provides-Extra") or []) if dist else ([], [])

    base = []
    for entry in model.entries.values():
        if entry.version is None:
            assert entry.name in ci, f"docker/base-image.txt: {entry.name} has no version and CI does not have it"
        entry_version = entry.version or ci[entry.name].version
        same = entry.name in ci and ci[entry.name].version == entry_version
        ci_requires, ci_extras = ci_metadata(entry.name) if same else ([], [])
        emit(entry.name, entry_version, entry.requires or ci_requires, ci_extras)
        base.append(f"{entry.name}=={entry_version}")
    for key, dist in ci.items():
        if key != canonicalize_name(name):
            emit(dist.metadata["Name"], dist.version, *ci_metadata(key))
    for key, pinned in _pins(commands, workdir).items():
        emit(key, pinned, *ci_metadata(key))

    # the stand-in base: a bare virtual environment; pip and packaging reach it through a .pth, not as packages
    venv = tmp / "base"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python3"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    tools = tmp / "tools"
    tools.mkdir()
    import packaging
    import pip

    for module in (pip, packaging):
        (tools / module.__name__).symlink_to(Path(module.__file__).parent)
    (site / "_image_sandbox_tools.pth").write_text(f"{tools}\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(env_vars)
    env.update(
        PATH=f"{venv / 'bin'}:{os.environ['PATH']}",
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(index),
        PIP_CONFIG_FILE=os.devnull,
        XDG_CONFIG_DIRS=str(empty),
        PIP_CONSTRAINT="",
        PIP_NO_INPUT="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_PROGRESS_BAR="off",
        PYTHONNOUSERSITE="1",
    )

    def run(command: str) -> Step:
        proc = subprocess.run(
            ["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True, timeout=600
        )
        return Step(command, proc.returncode, proc.stdout + proc.stderr)

    setup = run(f"python3 -m pip install --no-deps {' '.join(shlex.quote(b) for b in base)}")
    assert setup.returncode == 0, setup.output
    steps = []
    for command in commands:
        steps.append(run(command))
        if steps[-1].returncode != 0:
            break
    return Build(steps=steps, skipped=skipped, site=site)
