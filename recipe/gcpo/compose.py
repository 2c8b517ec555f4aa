"""The entry point's command line and its one composition of the config.

``python -m recipe.gcpo.main_gcpo [--config-path P] [--config-name N] [--config-dir D] key=value ...`` is parsed with
Hydra's own argument parser and composed once, with Hydra's own loader, into the config the start-up checks read and
the run trains on: the recipe's ``config/gcpo_trainer.yaml``, or a config of the user's own (verl's ``ppo_trainer``
plus their keys), the same way. A user's config that lacks the recipe's keys (``algorithm.gcpo`` and the baselines'
blocks) gets them as ``+gcpo_keys=recipe`` from the recipe's config folder, which is on every search path (after
the user's own folders) so that ``+protocol=<name>`` works there too. An override Hydra cannot apply is a
:class:`~recipe.gcpo.config.ConfigError` naming the key, with the closest existing key, whichever config it is.

:func:`run_composed` runs a task on that composed config as ``hydra.main`` would (Hydra's run directory, its
``.hydra/`` record and log, ``HYDRA_FULL_ERROR``) without composing it again. Hydra's inspection commands (``--help``,
``--cfg``, ``--info``, ...) run on the same search path and overrides (:func:`run_hydra_command`); a multirun is
refused, since each of its jobs would be a training run of its own.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, NoReturn, Optional

# Hydra 1.3's own pieces of hydra.main (its parser, search path, loader, run_job and error report): the entry point
# does what hydra.main does, split where the checks go (tests/recipe/gcpo/test_main_gcpo.py runs each)
from hydra._internal.callbacks import Callbacks
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path, get_args_parser, run_and_report
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import run_job
from hydra.errors import OverrideParseException
from hydra.types import HydraContext, RunMode
from hydra.version import setbase
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from recipe.gcpo.config import ConfigError

CONFIG_DIR = str(Path(__file__).resolve().parent / "config")
CONFIG_NAME = "gcpo_trainer"
# Hydra's name of the job (its log file is <task>.log in the run directory): the module hydra.main decorated
TASK_NAME = "main_gcpo"
# config/gcpo_keys/recipe.yaml: algorithm.gcpo and the baselines' blocks, for a user's config that lacks them
RECIPE_KEYS_GROUP = "gcpo_keys"
RECIPE_KEYS = f"+{RECIPE_KEYS_GROUP}=recipe"
RECIPE_BLOCK = "algorithm.gcpo"


@dataclass(frozen=True)
class CommandLine:
    """The entry point's arguments as Hydra's parser reads them."""

    args: argparse.Namespace
    parser: argparse.ArgumentParser

    @property
    def config_name(self) -> str:
        return self.args.config_name or CONFIG_NAME

    @property
    def overrides(self) -> list[str]:
        return list(self.args.overrides)

    @property
    def own_config(self) -> bool:
        """Whether the primary config is one of the user's own (``--config-path`` / ``--config-name``)."""
        return self.args.config_path is not None or self.config_name != CONFIG_NAME

    @property
    def hydra_command(self) -> bool:
        """Whether a Hydra command other than a run is asked for (help, --cfg, --info, multirun, completion)."""
        a = self.args
        return bool(
            a.help or a.hydra_help or a.cfg or a.info or a.multirun or a.shell_completion or a.experimental_rerun
        )


def parse_command_line(argv: list[str]) -> CommandLine:
    """``argv`` (without the program) parsed by Hydra's own parser, as ``hydra.main`` parses ``sys.argv``.

    Raises:
        ConfigError: what argparse refuses (an unknown flag, a flag after the overrides, a bad choice), in one
            line instead of argparse's usage block.
    """
    parser = get_args_parser()

    def refuse(message: str) -> NoReturn:
        raise ConfigError(None, f"{message} (flags go before the key=value overrides; --help lists them)")

    parser.error = refuse  # type: ignore[method-assign]
    return CommandLine(parser.parse_args(argv), parser)


@dataclass
class Composed:
    """The composed config (``config``, without Hydra's node, as a task gets it) and what running it needs."""

    config: DictConfig
    hydra_config: DictConfig  # the whole composition, Hydra's node included (run directory, logging, choices)
    hydra: object  # Hydra's instance that composed it
    config_name: str
    notes: list[str]  # what the composition did beyond the command line, a line each

    @property
    def choices(self) -> dict[str, Optional[str]]:
        """The config's group choices (``hydra.runtime.choices``): the protocol's among them."""
        return OmegaConf.to_container(self.hydra_config.hydra.runtime.choices)


def _search_path(command: CommandLine):
    """Hydra's search path for ``command`` as ``hydra.main`` builds it (a relative ``--config-path`` is read from the
    recipe's folder), with the recipe's config folder last: its groups (``gcpo_keys``, ``protocol``) for a user's
    config, below the user's own."""
    search_path = create_automatic_config_search_path(__file__, None, command.args.config_path or "config")
    if command.args.config_dir is not None:
        folder = os.path.abspath(command.args.config_dir)
        if not os.path.isdir(folder):
            raise ConfigError("--config-dir", f"--config-dir {folder} is not a folder")
        search_path.prepend(provider="command-line", path=f"file://{folder}", anchor=SearchPathQuery(provider="schema"))
    if command.own_config:
        # before Hydra's schema source, which must stay last
        search_path.prepend(
            provider="gcpo-recipe", path=f"file://{CONFIG_DIR}", anchor=SearchPathQuery(provider="schema")
        )
    return search_path


def _has_recipe_keys(hydra, config_name: str, overrides: list[str]) -> bool:
    """Whether a config file the composition merges sets ``algorithm.gcpo``: read from Hydra's defaults list and the
    raw files, so that the config is composed once, with the recipe's keys added or not."""
    loader = hydra.config_loader
    for default in loader.compute_defaults_list(config_name, overrides, RunMode.RUN).defaults:
        if default.config_path is None or default.config_path.startswith("hydra/"):
            continue
        # where the file's keys land: "" (the root) or a dotted package such as actor_rollout_ref.actor
        package = [part for part in (default.package or "").split(".") if part and part != "_global_"]
        block = RECIPE_BLOCK.split(".")
        if package[: len(block)] == block:
            return True  # the file is (part of) the block itself
        if block[: len(package)] != package:
            continue  # its keys land elsewhere
        loaded = loader.repository.load_config(default.config_path)
        if loaded is not None and OmegaConf.select(loaded.config, ".".join(block[len(package) :])) is not None:
            return True
    return False


@contextmanager
def hydra_session() -> Iterator[None]:
    """Hydra's global state (its instance, its config) for one composition and its run, cleared at the end."""
    try:
        yield
    finally:
        GlobalHydra.instance().clear()


def _main_hydra(command: CommandLine) -> tuple[Hydra, list[str], list[str]]:
    """Hydra's instance for ``command`` (inside :func:`hydra_session`), the overrides to compose with (a user's config
    that lacks the recipe's keys gets them, as ``+gcpo_keys=recipe``) and a line for each thing added."""
    setbase(None)  # hydra.main(version_base=None): this Hydra's defaults (no chdir into the run directory)
    overrides, notes = command.overrides, []
    hydra = Hydra.create_main_hydra2(task_name=TASK_NAME, config_search_path=_search_path(command))
    if (
        command.own_config
        and not any(o.lstrip("+~").startswith(f"{RECIPE_KEYS_GROUP}=") for o in overrides)
        and not _has_recipe_keys(hydra, command.config_name, overrides)
    ):
        overrides = [*overrides, RECIPE_KEYS]
        notes.append(
            f"your config ({command.config_name}) has no {RECIPE_BLOCK}: the recipe's keys are added "
            f"({RECIPE_KEYS}, from {CONFIG_DIR}/{RECIPE_KEYS_GROUP}/recipe.yaml)"
        )
    return hydra, overrides, notes


def compose(command: CommandLine) -> Composed:
    """The config ``command`` names, composed once (inside :func:`hydra_session`).

    Raises:
        ConfigError: an override Hydra cannot parse or apply, or a config it cannot find, in one line.
    """
    overrides = command.overrides
    try:
        hydra, overrides, notes = _main_hydra(command)
        # from_shell and the log configuration as hydra.main composes
        composition = hydra.compose_config(command.config_name, overrides, run_mode=RunMode.RUN)
    except ConfigError:
        raise
    except Exception as error:  # every composition failure comes from the command line or the config files
        raise composition_error(error, overrides) from error
    if composition.hydra.mode is None:
        composition.hydra.mode = RunMode.RUN
    HydraConfig.instance().set_config(composition)  # ${hydra:...} resolves in the checks as in the run
    config = copy.deepcopy(composition)  # the task's config, as run_job makes it: without Hydra's node
    with read_write(config), open_dict(config):
        del config["hydra"]
    return Composed(config, composition, hydra, command.config_name, notes)


def run_composed(composed: Composed, task: Callable[[], None]) -> None:
    """Run ``task`` as ``hydra.main`` runs its task function on ``composed``: Hydra's run directory
    (``hydra.run.dir``) with its ``.hydra/`` record of the composed config and the job's log, Hydra's callbacks, and
    Hydra's report of a failure (``HYDRA_FULL_ERROR=1``: the whole traceback) -- what ``Hydra.run`` does after it
    composes, without composing again. ``task`` trains on the config the checks accepted, not on the job's copy."""

    def run() -> None:
        callbacks = Callbacks(composed.hydra_config)
        callbacks.on_run_start(config=composed.hydra_config, config_name=composed.config_name)
        result = run_job(
            hydra_context=HydraContext(config_loader=composed.hydra.config_loader, callbacks=callbacks),
            task_function=lambda _job_config: task(),
            config=composed.hydra_config,
            job_dir_key="hydra.run.dir",
            job_subdir_key=None,
            configure_logging=True,
        )
        callbacks.on_run_end(config=composed.hydra_config, config_name=composed.config_name, job_return=result)
        result.return_value  # noqa: B018  (raises the task's exception, as Hydra.run does)

    run_and_report(run)


def run_hydra_command(command: CommandLine) -> None:
    """Hydra's inspection commands (``--help``, ``--hydra-help``, ``--cfg``, ``--info``, ``--shell-completion``) as
    ``hydra.main`` runs them, on the composition a run gets: the same search path, and a user's config with the
    recipe's keys added (said on standard error, so that ``--cfg`` prints only the config). A multirun is refused.

    Raises:
        ConfigError: ``--multirun`` / ``-m`` or ``--experimental-rerun``, or a composition Hydra cannot make.
    """
    args = command.args
    if args.multirun or args.experimental_rerun:
        flag = "--multirun" if args.multirun else "--experimental-rerun"
        raise ConfigError(
            flag,
            f"{flag}{' (-m)' if args.multirun else ''} is not supported: the entry point composes, checks and starts one training run per call; "
            "start one call per setting (python -m recipe.gcpo.main_gcpo key=value ..., or a launcher with its "
            "overrides)",
        )
    overrides = command.overrides
    try:
        hydra, overrides, notes = _main_hydra(command)
        for note in notes:
            print(f"gcpo: {note}", file=sys.stderr, flush=True)
        name, args = command.config_name, argparse.Namespace(**{**vars(args), "overrides": overrides})
        if args.help:
            hydra.app_help(config_name=name, args_parser=command.parser, args=args)
        elif args.hydra_help:
            hydra.hydra_help(config_name=name, args_parser=command.parser, args=args)
        elif args.cfg:
            if (
                args.package
                and OmegaConf.select(hydra.compose_config(name, overrides, RunMode.RUN), args.package) is None
            ):
                # Hydra would print its own line and exit 1
                raise ConfigError("--package", f"--package {args.package}: no such block in the config")
            hydra.show_cfg(name, overrides, cfg_type=args.cfg, package=args.package, resolve=args.resolve)
        elif args.info:
            hydra.show_info(args.info, config_name=name, overrides=overrides)
        else:
            hydra.shell_completion(config_name=name, overrides=overrides)
    except ConfigError:
        raise
    except Exception as error:  # as in compose(): the command line's or the config files'
        raise composition_error(error, overrides) from error


# ---- one line for a composition that failed ------------------------------------------------------------------


def composition_error(error: BaseException, overrides: list[str]) -> ConfigError:
    """One line for a composition that failed: an override Hydra cannot parse (which one, and how to write it), a
    key that does not exist (the closest one that does, from the node the key was looked for in), or Hydra's own
    message on one line."""
    if isinstance(error, OverrideParseException):
        return unparsable_override(overrides, error)
    cause = error.__cause__
    written = str(error).split("'")
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and str(error).startswith("Could not override '"):
        key = written[1]  # as written in the override (the error's full_key stops at the first missing level)
        return ConfigError(key, unknown_key_message(key, cause))
    text = one_line(error) + (f" ({one_line(cause)})" if cause is not None else "")
    return ConfigError(None, text)


def unknown_key_message(key: str, cause) -> str:
    """``<key> is not a key of the config: did you mean <closest>?``, the closest key from the siblings of the level
    that is missing (the error's ``parent_node``)."""
    missing = str(cause.full_key).split(".")
    parent = cause.parent_node
    known = [str(k) for k in parent.keys()] if isinstance(parent, DictConfig) else []
    match = difflib.get_close_matches(missing[-1], known, n=1, cutoff=0.6)
    if len(missing) > len(key.split(".")):  # the key is inside the value ('a.b={c: 1}'): name it whole
        key = ".".join(missing)
    if match:
        parts = key.split(".")
        parts[len(missing) - 1] = match[0]
        return f"{key} is not a key of the config: did you mean {'.'.join(parts)}?"
    return f"{key} is not a key of the config (a new key is added with a leading +: +{key}=...)"


def unparsable_override(overrides: list[str], error: BaseException) -> ConfigError:
    """The first override Hydra's grammar cannot read, with how to write it: a path starting with ``~`` (which the
    grammar does not allow unquoted, and which no worker would expand) as its absolute form, anything else quoted."""
    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except Exception:
            key, _, value = override.partition("=")
            key = key.lstrip("+~")
            if value.startswith("~"):
                fix = f"give the path absolute: {key}={os.path.expanduser(value)}"
            else:
                fix = f"quote the value: {key}='\"{value}\"' (in a shell, the outer quotes keep the inner ones)"
            return ConfigError(key, f"{override} cannot be read by Hydra's override grammar: {fix}")
    return ConfigError(None, one_line(error))


def one_line(error: BaseException) -> str:
    """An exception's message on one line (Hydra's and OmegaConf's span several)."""
    text = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    return text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}"
