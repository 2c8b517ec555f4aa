"""A program of scripts/ or dev/ (not packages) imported as a module, for its tests."""

import importlib.util
import sys
from types import ModuleType

from tests.special_e2e import ROOT


def load_script(name: str, folder: str = "scripts") -> ModuleType:
    """``<folder>/<name>.py`` as the module ``name`` (registered in sys.modules: dataclasses look their module up
    there, and a script that imports another of scripts/ finds it)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
