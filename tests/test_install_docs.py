"""The README's set-up commands are the ones CI runs (.ci/run), and the torch they name is the pinned one."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_setup_commands() -> list[str]:
    setup = (ROOT / "README.md").read_text(encoding="utf-8").split("## Set up", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", setup, re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    return [part.strip() for line in lines for part in line.split("&&") if part.strip()]


def test_ci_runs_the_readmes_commands():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    index = re.search(r"^TORCH_CPU_INDEX=(\S+)$", ci, re.M).group(1)
    ci_lines = {line.strip().replace('"$TORCH_CPU_INDEX"', index) for line in ci.splitlines()}
    commands = _readme_setup_commands()
    assert any("--index-url https://download.pytorch.org/whl/cpu" in c for c in commands)
    assert "python -m pytest -q" in commands
    missing = [c for c in commands if c not in ci_lines]
    assert not missing, f"README commands CI does not run: {missing}"


def test_the_pinned_torch_is_the_one_the_readme_describes():
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    setup = (ROOT / "README.md").read_text(encoding="utf-8").split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert f"torch {pins['torch']}" in setup
