"""A tiny named-function registry, shared by kernels, quality maps, advantage modes and text spans.

Mirrors verl's ``register_adv_est`` / ``get_adv_estimator_fn`` pattern so that ablations (and the baselines of
later recipes) plug in by name from a config value.
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """Maps a config value (``str``) to a function; unknown names fail naming the allowed values."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def decorator(fn: F) -> F:
            if name in self._entries and self._entries[name] is not fn:
                raise ValueError(f"{self.kind} {name!r} is already registered to {self._entries[name]!r}")
            self._entries[name] = fn
            return fn

        return decorator

    def get(self, name: str) -> F:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; allowed: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
