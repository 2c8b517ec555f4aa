"""The recipe's config folder on Hydra's search path, below every other, in a run of the recipe's entry point.

Hydra finds this plugin in the ``hydra_plugins`` namespace package of every app; it adds the folder only in a
process that imported ``recipe.gcpo.main_gcpo``, so that a config of the user's own there takes the recipe's groups
with a ``+`` (``+protocol=shared``, ``+gcpo_keys=recipe``) and verl's own entry points are untouched.
"""

import sys

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class GCPORecipeSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        entry_point = sys.modules.get("recipe.gcpo.main_gcpo")
        if entry_point is not None:  # by its path: as a module path, recipe.gcpo.config names config.py
            search_path.append(provider="gcpo-recipe", path=f"file://{entry_point.CONFIG_DIR}")
