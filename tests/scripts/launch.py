"""What a launcher passes to ``python3 -m recipe.gcpo.main_gcpo``, read by running it with a stub ``python3``.

Tests compose these overrides with ``tests.recipe.gcpo.conftest.compose_gcpo`` to get exactly the config the
launcher's run would get, without starting Python's heavy imports once per launcher.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS = sorted(p.name for p in (ROOT / "scripts").glob("run_*.sh"))
ENTRY = ["-m", "recipe.gcpo.main_gcpo"]

# prints its arguments NUL-separated instead of running anything
_STUB = '#!/usr/bin/env bash\nprintf "%s\\0" "$@"\n'


def launcher_overrides(script: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """The Hydra overrides ``scripts/<script>`` passes to the entry point, in order (``args`` come last)."""
    with tempfile.TemporaryDirectory(prefix="gcpo-stub-") as stub_dir:
        stub = Path(stub_dir) / "python3"
        stub.write_text(_STUB)
        stub.chmod(0o755)
        full_env = {key: value for key, value in os.environ.items() if key != "WANDB_API_KEY"}
        full_env.update(env or {})
        full_env["PATH"] = f"{stub_dir}:{full_env['PATH']}"
        proc = subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True, env=full_env)
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed: {proc.stderr.decode()[-2000:]}")
    out = proc.stdout.decode()
    if out.startswith("+ "):  # the launcher's echo of its command
        out = out.split("\n", 1)[1]
    argv = out.split("\0")[:-1]
    if argv[:2] != ENTRY:
        raise RuntimeError(f"{script} did not run {' '.join(ENTRY)}: {argv[:3]}")
    return argv[2:]
