"""Package exports loaded on first use (PEP 562): importing one module of a package (a reward worker importing
the answer checker, say) does not import every module the package exports (torch, sentence-transformers)."""

from __future__ import annotations

from importlib import import_module
from typing import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose public ``name`` lives in module ``exports[name]``
    (relative to the package)."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        vars(import_module(package))[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(import_module(package))) | set(exports))

    return __getattr__, __dir__
