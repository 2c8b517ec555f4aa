"""The one error a check raises, and the helpers every check writes its refusal with."""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping, NoReturn, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf


class ConfigError(ValueError):
    """A config (or command line) refused before anything starts, on one line: ``<key>: <problem>``, the key at fault
    named once, here (the problem alone when no single key is at fault: ``key`` None). A command line turns it into
    ``error: <message>``, exit status 2; a ValueError, which it is, reads the same everywhere else."""

    def __init__(self, key: Optional[str], problem: str):
        problem = " ".join(problem.split())  # one line, whatever the text it quotes
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key = key
        self.problem = problem


def refuse(key: Optional[str], problem: str) -> NoReturn:
    raise ConfigError(key, problem)


def did_you_mean(word: Any, known: Iterable[str], prefix: str = ": did you mean ", cutoff: float = 0.6) -> str:
    """``prefix`` + the closest of ``known`` to ``word`` + "?", or "" when none is close."""
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=cutoff)
    return f"{prefix}{close[0]}?" if close else ""


def check_known(key_path: str, block: Mapping, allowed: Iterable[str]) -> None:
    """Refuse keys of ``block`` outside ``allowed``, naming the closest known one.

    Raises:
        ConfigError: ``<key_path>: unknown key(s) [...] (did you mean ...?); known: [...]``.
    """
    allowed = sorted(allowed)
    unknown = sorted(set(block) - set(allowed))
    if unknown:
        close = [match for key in unknown for match in difflib.get_close_matches(key, allowed, n=1)]
        hint = f" (did you mean {', '.join(repr(m) for m in close)}?)" if close else ""
        raise ConfigError(key_path, f"unknown key(s) {unknown}{hint}; known: {allowed}")


def plain(value: Any) -> Any:
    """A config node as plain Python (resolved), anything else as it is."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value
