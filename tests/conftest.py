import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The encoder and every model in the tests are local: never reach a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# verl's default trainer.logger has wandb, which the entry point refuses without an API key unless W&B is offline
# (recipe/gcpo/preflight/machine.py): the tests log nowhere; the logger checks pass their own environment
os.environ.setdefault("WANDB_MODE", "offline")

# Everything the tests and what they start write to the temporary folder (Ray's session folders, verl's checkpoint
# locks, vLLM's and TransferQueue's sockets, pytest's own tmp_path) goes into one folder of this session, removed
# when the session ends: the machine's temporary folder is left as it was. Short, for Ray's socket paths.
SESSION_TMP = tempfile.mkdtemp(prefix="gcpo-tests-", dir="/tmp" if os.path.isdir("/tmp") else None)
os.environ["TMPDIR"] = os.environ["RAY_TMPDIR"] = SESSION_TMP
tempfile.tempdir = SESSION_TMP


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(SESSION_TMP, ignore_errors=True)


settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The real public math sets some tests read (see the README's "Set up"): ../shared/data beside the checkout, or
# wherever GCPO_SHARED_DATA points.
SHARED_DATA = Path(os.environ.get("GCPO_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
SHARED_DATA_MISSING = (
    f"shared data not found at {SHARED_DATA}: put the math data folder there or set GCPO_SHARED_DATA "
    "(README.md, 'Set up')"
)


@pytest.fixture
def shared_data() -> Path:
    """The real public math sets (SHARED_DATA); skip, saying where to get them, where they are absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(SHARED_DATA_MISSING)
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 on the CPU (bundled weights, offline), loaded once per test session."""
    from gcpo_core.encoding.encoder import EncoderConfig, RolloutEncoder

    return RolloutEncoder(EncoderConfig(device="cpu"))
