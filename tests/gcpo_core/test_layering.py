"""gcpo_core's packages import only from themselves and the packages below them, and never from verl or Ray."""

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "gcpo_core"
# the order, bottom first: a package may import from the packages before it, never from one after it
LAYERS = ["credit", "encoding", "rewards", "baselines", "evaluation", "cli"]
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
    module.write_text("def f():\n    from gcpo_core.evaluation.dump import write_credit_dump\n"
                      "from gcpo_core import cli\n")
    assert sorted(str(_package(m)) for _, m in _imports(module)) == ["None", "cli", "evaluation"]


def test_each_package_says_what_it_holds():
    for layer in LAYERS:
        doc = ast.get_docstring(ast.parse((CORE / layer / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc.split("\n\n")[0].splitlines()) <= 2, layer  # a summary of at most two lines
