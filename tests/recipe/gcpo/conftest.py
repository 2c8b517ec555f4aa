from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import recipe.gcpo

CONFIG_DIR = Path(recipe.gcpo.__file__).resolve().parent / "config"


def compose_gcpo(overrides=(), config_name: str = "gcpo_trainer"):
    """The recipe's Hydra config, composed exactly as ``python -m recipe.gcpo.main_gcpo`` composes it."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


@pytest.fixture
def gcpo_config():
    return compose_gcpo
