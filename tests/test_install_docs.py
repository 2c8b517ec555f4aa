"""The README's set-up commands are the ones CI runs (.ci/run), and the torch they name is the pinned one."""

import os
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
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    setup = (ROOT / "README.md").read_text(encoding="utf-8").split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert f"torch {pins['torch']}" in setup


def test_a_test_without_the_shared_data_is_skipped_saying_where_to_get_it(tmp_path):
    import os
    import subprocess
    import sys

    missing = tmp_path / "no-data"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "tests/gcpo_core/cli/test_eval_report_cli.py::test_generation_without_vllm_is_a_clear_error",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "GCPO_SHARED_DATA": str(missing)},
    )
    assert "1 skipped" in proc.stdout, proc.stdout
    assert f"shared data not found at {missing}" in proc.stdout and "README.md, 'Set up'" in proc.stdout
    setup = (ROOT / "README.md").read_text(encoding="utf-8").split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert "../shared/data" in setup and "GCPO_SHARED_DATA" in setup


def test_the_readmes_python_example_runs_as_written():
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("### From Python", 1)[1].split("\n### ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {}
    exec(compile(code, "README.md (From Python)", "exec"), namespace)  # noqa: S102 - the README's own example
    result = namespace["result"]
    assert result.shapley.shape == (4,) and result.shapley[3] == 0  # the wrong rollout gets no credit
    assert abs(float(result.shapley[0] - result.shapley[2])) < 1e-9  # identical texts, identical credit
    assert "gcpo/team_value/mean" in result.metrics()


def test_the_tests_write_their_temporary_files_into_a_folder_of_their_own(tmp_path):
    """Ray's session folders, verl's ckpt_*.lock files and the like land in the session's folder (removed at the end),
    not in the machine's temporary folder."""
    import tempfile

    from tests.conftest import SESSION_TMP

    assert os.environ["TMPDIR"] == os.environ["RAY_TMPDIR"] == tempfile.gettempdir() == SESSION_TMP
    assert str(tmp_path).startswith(SESSION_TMP)
