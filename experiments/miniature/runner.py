"""Runs the miniature's arms one after another through ``python -m recipe.gcpo.main_gcpo`` on the CPU platform.

Each run is bounded (``timeout_s``) and afterwards every process it started is stopped (they carry the run's marker
in their environment: :func:`tests.special_e2e.smoke.processes.reap`), in a Ray folder of its own. A run folder with a
``done.json`` is kept and skipped when it trained from the same warm start, so an interrupted experiment goes on where
it stopped. ``done.json`` names the run's warm start (its seed and SHA-256) and its start time (``started_at``, ISO 8601
UTC).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

from experiments.miniature.arms import RunSpec, run_overrides
from tests.special_e2e import checkout_path
from tests.special_e2e.smoke.processes import reap

CPU_ENVIRONMENT = {
    "VERL_PLATFORM": "cpu",
    "VERL_USE_EXTERNAL_MODULES": "tests.special_e2e.cpu_platform",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}


def run_dir(out: Path, arm: str, seed: int) -> Path:
    return out / "runs" / f"{arm}-seed{seed}"


def policy_dir(out: Path, warm_seed: int) -> Path:
    """Where warm start ``warm_seed`` is saved."""
    return out / f"policy-warm{warm_seed}"


def warm_start_sha256(policy: Path) -> Optional[str]:
    """SHA-256 of a warm start's weights (``model.safetensors``), None where there are none. The same seed builds
    other weights on another CPU model (``docs/miniature.md``), so runs of two experiments are paired seed by seed
    only when this matches."""
    weights = Path(policy) / "model.safetensors"
    if not weights.is_file():
        return None
    with weights.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def train(
    arm: str,
    seed: int,
    spec: RunSpec,
    out: Path,
    timeout_s: float,
    extra: Sequence[str] = (),
    python: str = sys.executable,
    dry_run: bool = False,
    *,
    warm_seed: int,
    dump_rollouts: bool = False,
) -> Optional[dict]:
    """One run of ``arm`` from warm start ``warm_seed`` (:func:`policy_dir`); returns its ``done.json`` record (None
    for a dry run). ``dump_rollouts``: verl writes the training rollouts of every step (``arms.run_overrides``).
    Raises RuntimeError when it fails."""
    folder = run_dir(out, arm, seed)
    done = folder / "done.json"
    if done.is_file() and not dry_run:
        record = json.loads(done.read_text())
        if record.get("warm_seed") == warm_seed:
            print(f"miniature: {arm} seed {seed}: done before, kept ({folder})", flush=True)
            return record
        print(
            f"miniature: {arm} seed {seed}: done before from warm start {record.get('warm_seed')}, "
            f"this experiment's is {warm_seed}: trained again",
            flush=True,
        )
    ray_dir = Path(tempfile.mkdtemp(prefix="gcpo-ray.", dir=os.environ.get("TMPDIR", "/tmp")))
    args = run_overrides(
        arm, seed, spec, out / "data", policy_dir(out, warm_seed), folder, ray_dir, dump_rollouts=dump_rollouts
    ) + list(extra)
    marker = f"gcpo-miniature-{os.getpid()}-{arm}-{seed}-{time.time_ns()}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # always a local Ray of its own
    env.update(
        CPU_ENVIRONMENT,
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", str(os.cpu_count() or 1)),
        GCPO_SMOKE_MARKER=marker,
        TMPDIR=str(ray_dir),
        # the experiment and the CPU platform from this checkout (not in the wheel), in every process
        PYTHONPATH=checkout_path(env.get("PYTHONPATH")),
    )
    command = [python, "-m", "recipe.gcpo.main_gcpo", *args]
    try:
        if dry_run:
            env["GCPO_DRY_RUN"] = "1"
            subprocess.run(command, env=env, check=True)
            return None
        if folder.exists():
            shutil.rmtree(folder)  # a run that did not finish starts over: verl would append to its files
        folder.mkdir(parents=True)
        env["VERL_FILE_LOGGER_PATH"] = str(folder / "metrics.jsonl")
        print(f"miniature: {arm} seed {seed}: training {spec.steps} steps ({folder})", flush=True)
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")  # ISO 8601, UTC
        start = time.monotonic()
        with open(folder / "log.txt", "w") as log:
            try:
                rc = subprocess.run(
                    command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
                ).returncode
            except subprocess.TimeoutExpired:
                rc = None
        wall = time.monotonic() - start
    finally:
        reap(marker)
        shutil.rmtree(ray_dir, ignore_errors=True)
    if rc is None:
        raise RuntimeError(f"{arm} seed {seed} did not finish in {timeout_s:.0f} s; log: {folder / 'log.txt'}")
    if rc != 0:
        raise RuntimeError(f"{arm} seed {seed} exited {rc}; log: {folder / 'log.txt'}")
    record = {
        "arm": arm,
        "seed": seed,
        "warm_seed": warm_seed,
        "warm_start_sha256": warm_start_sha256(policy_dir(out, warm_seed)),
        "started_at": started_at,
        "wall_s": round(wall, 1),
        "spec": spec.__dict__,
        "overrides": list(extra),
        "rollouts_dumped": dump_rollouts,
    }
    done.write_text(json.dumps(record, indent=2) + "\n")
    print(f"miniature: {arm} seed {seed}: finished in {wall:.0f} s", flush=True)
    return record
