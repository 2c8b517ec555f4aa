"""A non-editable install runs: ``pip install .``, then ``python -m recipe.gcpo.main_gcpo`` from another directory.

TransferQueue 0.1.11 installs a top-level ``recipe/`` folder without ``__init__.py`` (a namespace portion), and
verl installs top-level ``scripts/`` and ``tests/``: the installed ``recipe`` package (a regular one) must win
over that folder wherever it sits on the path, and the wheel must carry everything the entry point reads (the
Hydra config, the reward module, gcpo_core's data files). The install goes into a bare virtual environment that
sees this environment's packages (verl, TransferQueue, torch) through a ``.pth`` line, not through the editable
install of this checkout, and runs with no PYTHONPATH from a directory outside the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.recipe.gcpo.test_main_gcpo import VALID

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["setup.py", "pyproject.toml", "README.md", "gcpo_core", "recipe", "verl_preflight"]


def _site_packages(venv: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


def test_a_non_editable_install_runs_the_entry_point_from_another_directory(tmp_path):
    # a copy of the sources: an in-tree build writes build/ and *.egg-info beside them
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = _site_packages(venv)
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(site),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    # this environment's packages after the install's own (a .pth line adds a path, it runs no .pth files there,
    # so the editable install of this checkout stays out)
    (site / "zz_this_environment.pth").write_text(sysconfig.get_path("purelib") + "\n")
    python = venv / "bin" / "python"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "RAY_ADDRESS", "HYDRA_FULL_ERROR")
    }
    env["GCPO_DRY_RUN"] = "1"
    proc = subprocess.run(
        [str(python), "-m", "recipe.gcpo.main_gcpo", *VALID], capture_output=True, text=True, env=env, cwd=elsewhere
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"# entry point: {(site / 'recipe' / 'gcpo' / 'main_gcpo.py').resolve()}" in proc.stdout.splitlines()
    assert "# dry run (adv_estimator=gcpo): the config composes and validates; nothing was started." in proc.stdout
    assert list(elsewhere.iterdir()) == []
    # the reward function verl loads by name (pkg://recipe.gcpo.reward) and the bundled encoder's data resolve too
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import recipe, recipe.gcpo.reward, gcpo_core, transfer_queue; "
            "print(recipe.gcpo.reward.__file__); print(gcpo_core.__file__)",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=elsewhere,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert [Path(line).resolve().is_relative_to(site.resolve()) for line in probe.stdout.split()] == [True, True]
