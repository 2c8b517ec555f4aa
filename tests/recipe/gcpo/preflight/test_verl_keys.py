"""verl's keys the entry point checks at start-up (recipe/gcpo/preflight/verl_keys.py); the estimator's name, the
numbers and the cluster's shape through the entry point are tests/recipe/gcpo/test_main_gcpo.py's."""


def test_the_recipes_estimator_list_is_what_its_register_module_registers():
    """The driver checks algorithm.adv_estimator against verl's registry and the recipe's estimators without importing
    the trainer; the register module is what puts the recipe's into verl's registry."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    import recipe.gcpo.register  # noqa: F401
    from recipe.gcpo.settings import recipe_estimators

    recipe_modules = {name for name, fn in ADV_ESTIMATOR_REGISTRY.items() if fn.__module__.startswith("recipe.gcpo")}
    assert recipe_modules == set(recipe_estimators())
