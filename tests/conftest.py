import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The encoder and every model in the tests are local: never reach a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real public math sets beside the checkout (../shared/data); skip where they are absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (see DEVELOPERS.md: ../shared/data)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 on the CPU (bundled weights, offline), loaded once per test session."""
    from gcpo_core.encoder import EncoderConfig, RolloutEncoder

    return RolloutEncoder(EncoderConfig(device="cpu"))
