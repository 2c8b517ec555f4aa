import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def check_image():
    """docker/check_image.py as a module (it is a script in the image, not part of the package)."""
    spec = importlib.util.spec_from_file_location("check_image", ROOT / "docker" / "check_image.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_image", module)
    spec.loader.exec_module(module)
    return module
