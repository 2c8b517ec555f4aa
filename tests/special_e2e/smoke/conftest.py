import pytest

from tests.special_e2e.smoke.data import write_smoke_data
from tests.special_e2e.smoke.policy import build_policy


@pytest.fixture(scope="session")
def smoke_dir(tmp_path_factory):
    """The smoke run's inputs as ``python -m tests.special_e2e.smoke build`` writes them (policy, data), once."""
    root = tmp_path_factory.mktemp("smoke")
    build_policy(root / "model")
    write_smoke_data(root / "data")
    return root
