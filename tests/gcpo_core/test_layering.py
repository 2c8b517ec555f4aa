"""gcpo_core's packages import only from themselves and the packages below them, and never from verl or Ray; the
recipe's modules (recipe/gcpo) likewise, in four layers: settings -> estimator, credit actor, baselines -> trainer,
checks -> entry point, the settings layer without Ray or verl, and no recipe import hidden in a function; the checks
of a verl config (verl_preflight) import neither the recipe nor gcpo_core."""

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "gcpo_core"
# the order, bottom first: a package may import from the packages before it, never from one after it
LAYERS = ["credit", "encoding", "rewards", "training_data", "baselines", "evaluation", "cli"]
FORBIDDEN = ("verl", "ray", "recipe")


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement names, at any depth of the file (function-level imports included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if node.module == "gcpo_core":  # from gcpo_core import credit
                found += [(node.lineno, f"gcpo_core.{alias.name}") for alias in node.names]
    return found


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "gcpo_core" else None


def test_every_module_of_gcpo_core_lives_in_a_layer():
    loose = [p.name for p in CORE.glob("*.py") if p.name not in ("__init__.py", "_lazy.py")]
    packages = {p.name for p in CORE.iterdir() if (p / "__init__.py").is_file()}
    assert not loose, f"modules outside the packages: {loose}"
    assert packages == set(LAYERS), packages


@pytest.mark.parametrize("layer", LAYERS)
def test_a_package_imports_nothing_from_a_package_above_it(layer):
    allowed = set(LAYERS[: LAYERS.index(layer) + 1]) | {"_lazy"}
    upward, outside = [], []
    for path in sorted((CORE / layer).rglob("*.py")):
        for line, module in _imports(path):
            package = _package(module)
            if package is not None and package not in allowed:
                upward.append(f"{path.relative_to(CORE)}:{line} imports {module}")
            if module.split(".")[0] in FORBIDDEN:
                outside.append(f"{path.relative_to(CORE)}:{line} imports {module}")
    assert not upward, f"{layer} reaches up: {upward}"
    assert not outside, f"gcpo_core must not import verl, Ray or the recipe: {outside}"


def test_the_rule_catches_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from gcpo_core.evaluation.dump import write_credit_dump\nfrom gcpo_core import cli\n"
    )
    assert sorted(str(_package(m)) for _, m in _imports(module)) == ["None", "cli", "evaluation"]


def test_each_package_says_what_it_holds():
    for layer in LAYERS:
        doc = ast.get_docstring(ast.parse((CORE / layer / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc.split("\n\n")[0].splitlines()) <= 2, layer  # a summary of at most two lines


# --- the recipe: settings -> estimator, credit actor, baselines -> trainer, checks -> entry point ------------------

RECIPE = CORE.parent / "recipe" / "gcpo"
# bottom first: a module may import from its own layer and the ones before it, never from one after it
RECIPE_LAYERS = {
    "settings": ["settings", "credit_shards", "reward"],
    "step": ["estimator", "credit_actor", "baselines"],
    "trainer": ["gcpo_trainer", "checks", "run_summary"],
    "entry": ["register", "main_gcpo"],
}
# what a training run does not import: the smoke harness and CPU platform (tests/special_e2e/) and the miniature
# experiment (experiments/) use the recipe, never the other way round
TOOL_PACKAGES = ("tests", "experiments")
# recipe imports made inside a function, each for a reason other than an import cycle
LATE_IMPORTS = {
    ("main_gcpo", "recipe.gcpo.gcpo_trainer"): "only the task runner builds the trainer; the driver never imports it",
    ("main_gcpo", "recipe.gcpo.register"): "registers the estimators in the task runner's process",
}


def _recipe_unit(module: str) -> str | None:
    """``recipe.gcpo.baselines.copo`` -> ``baselines``; ``recipe.gcpo.settings`` -> ``settings``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["recipe", "gcpo"] else None


def _recipe_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, inside a function) of every import of a recipe module in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    late = {
        id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)
    }
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + (
                [f"{node.module}.{a.name}" for a in node.names] if node.module == "recipe.gcpo" else []
            )
        found += [(node.lineno, name, id(node) in late) for name in names if _recipe_unit(name)]
    return found


def _layer_of(unit: str) -> int:
    for index, units in enumerate(RECIPE_LAYERS.values()):
        if unit in units:
            return index
    raise KeyError(unit)


def _recipe_files() -> list[tuple[str, Path]]:
    """(unit, file) of every recipe module in the layers."""
    files = []
    for unit in (u for units in RECIPE_LAYERS.values() for u in units):
        path = RECIPE / unit
        files += [(unit, p) for p in sorted(path.rglob("*.py"))] if path.is_dir() else [(unit, path.with_suffix(".py"))]
    return files


def test_the_recipe_rule_sees_imports_at_any_depth():
    imports = {(m, inside) for _, m, inside in _recipe_imports(RECIPE / "main_gcpo.py")}
    assert ("recipe.gcpo.checks", False) in imports
    assert ("recipe.gcpo.gcpo_trainer", True) in {
        (m, inside) for _, m, inside in _recipe_imports(RECIPE / "main_gcpo.py")
    }


def test_every_module_of_the_recipe_lives_in_a_layer():
    units = {p.stem for p in RECIPE.glob("*.py") if p.name != "__init__.py"}
    units |= {p.name for p in RECIPE.iterdir() if (p / "__init__.py").is_file()}
    placed = {u for layer in RECIPE_LAYERS.values() for u in layer}
    assert units == placed, sorted(units.symmetric_difference(placed))


def test_a_recipe_module_imports_nothing_from_a_layer_above_it():
    upward = []
    for unit, path in _recipe_files():
        for line, module, _ in _recipe_imports(path):
            target = _recipe_unit(module)
            if _layer_of(target) > _layer_of(unit):
                upward.append(f"{path.relative_to(RECIPE)}:{line} imports {module}")
    assert not upward, upward


def test_the_recipe_imports_no_tool():
    tools = [
        f"{path.relative_to(RECIPE)}:{line} imports {module}"
        for _, path in _recipe_files()
        for line, module in _imports(path)
        if module.split(".")[0] in TOOL_PACKAGES
    ]
    assert not tools, tools


def test_the_checks_of_a_verl_config_import_neither_the_recipe_nor_gcpo_core():
    package = CORE.parent / "verl_preflight"
    found = [
        f"{path.name}:{line} imports {module}"
        for path in sorted(package.glob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] in ("recipe", "gcpo_core", "tests", "experiments")
    ]
    assert list(package.glob("*.py")) and not found, found


def test_the_settings_layer_imports_neither_ray_nor_verl():
    found = [
        f"{path.relative_to(RECIPE)}:{line} imports {module}"
        for unit, path in _recipe_files()
        if _layer_of(unit) == 0
        for line, module in _imports(path)
        if module.split(".")[0] in ("ray", "verl")
    ]
    assert not found, found


def test_no_recipe_module_imports_another_inside_a_function_but_for_a_stated_reason():
    late = [
        f"{path.relative_to(RECIPE)}:{line} imports {module}"
        for unit, path in _recipe_files()
        for line, module, inside in _recipe_imports(path)
        if inside and (unit, module) not in LATE_IMPORTS
    ]
    assert not late, late
