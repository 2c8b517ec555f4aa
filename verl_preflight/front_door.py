"""A verl command line, composed with Hydra's compose API, every failure one line: ``[--config-path DIR]
[--config-name NAME] [--cfg job|hydra|all [--resolve] [--package KEY]] key=value ...``, flags anywhere.

Why the compose API and not ``hydra.main``: what ``hydra.main`` meets first (its argparse, the composition, a
malformed YAML) it reports itself, in many lines or a traceback, and its composition of a user's config cannot take an
extension's keys without rewriting ``sys.argv``; composed here, each failure is caught where it happens and named.
What a run needs of Hydra beyond the composition (its record, ``.hydra/``) is :func:`write_record`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, NamedTuple, NoReturn, Optional, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from verl_preflight.errors import ConfigError, did_you_mean, refuse
from verl_preflight.schema import FREE_FORM, unknown_key_message

# exit status of a command line refused (argparse's too; Python's own for an uncaught error is 1)
CONFIG_ERROR_EXIT = 2
SUPPORTED = "--config-path/-cp, --config-name/-cn, --cfg job|hydra|all [--resolve] [--package KEY], --help"
# Hydra's flags this front door does not take, with their short forms
HYDRAS_OWN = {
    "--hydra-help": (),
    "--info": ("-i",),
    "--shell-completion": ("-sc",),
    "--experimental-rerun": (),
    "--run": ("-r",),
    "--config-dir": ("-cd",),
}


class Request(NamedTuple):
    """A command line: the config (``folder``/``name``), its overrides, and what to show instead of running."""

    folder: Path
    name: str
    overrides: list[str]
    show: Optional[str] = None
    resolve: bool = False
    package: Optional[str] = None


class Composition(NamedTuple):
    """A composed config (without Hydra's node), Hydra's node (``hydra.runtime.choices``: the group choices), where a
    run keeps its record (``hydra.run.dir``, resolved) and what the composition did that a user should be told."""

    config: DictConfig
    hydra: DictConfig
    notes: list[str]
    run_dir: Optional[str] = None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's usage block and exit, as one line
        refuse(None, f"{message} (this command takes key=value overrides and {SUPPORTED})")


def parse_command_line(argv: Sequence[str], folder: Path, name: str, program: str) -> Optional[Request]:
    """The request of ``argv`` (``folder``/``name``: the config without --config-path/--config-name; ``program``: how
    the command is started, for the help and the refusals); None after ``--help`` printed it.

    Raises:
        ConfigError: a flag this front door does not take, or a malformed one.
    """
    parser = _Parser(prog=program, add_help=False, allow_abbrev=False)
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--help", "-h", action="store_true")
    parser.add_argument("--config-path", "-cp")
    parser.add_argument("--config-name", "-cn")
    parser.add_argument("--cfg", "-c", choices=["job", "hydra", "all"])
    parser.add_argument("--resolve", action="store_true")
    parser.add_argument("--package", "-p")
    parser.add_argument("--multirun", "-m", action="store_true")
    for flag, short in HYDRAS_OWN.items():
        parser.add_argument(flag, *short, nargs="?", const=True, dest=flag.strip("-").replace("-", "_"))
    args = parser.parse_intermixed_args(list(argv))
    if args.help:
        print(f"usage: {program} [{SUPPORTED.replace(', ', '] [')}] [key=value ...]")
        return None
    for flag in HYDRAS_OWN:
        if getattr(args, flag.strip("-").replace("-", "_")) is not None:
            refuse(
                None,
                f"{flag} is Hydra's own and not taken here: this command composes with Hydra's compose API ({SUPPORTED})",
            )
    if args.multirun:
        refuse(
            None,
            "--multirun (-m) is not supported: the entry point composes, checks and starts one training run per "
            f"call; start one call per setting (python -m {program} key=value ..., or a launcher with its overrides)",
        )
    if (args.resolve or args.package) and not args.cfg:
        refuse(None, f"{'--resolve' if args.resolve else '--package'} goes with --cfg job|hydra|all")
    if args.config_path:
        folder = Path(args.config_path).expanduser().resolve()
        if not folder.is_dir():
            refuse(None, f"--config-path {args.config_path}: no such folder here")
    name = args.config_name or name
    for override in args.overrides:
        key = override.partition("=")[0].lstrip("+~")
        if key == "" or "=" not in override and not override.startswith("~"):
            refuse(None, f"{override!r}: an override is key=value (+key=value adds a key, ~key removes one)")
        if len(key) > 200:  # no key of a config is this long; Hydra would try it as a file name
            refuse(None, f"{override[:60]}...: a key of {len(key)} characters is no key of the config")
    return Request(folder, name.removesuffix(".yaml"), args.overrides, args.cfg, args.resolve, args.package)


def compose_config(request: Request, extension: Any = None) -> Composition:
    """The config of ``request`` composed as Hydra composes it, with the extension's config folder on its search path
    (its groups: ``+protocol=...``) and its blocks added where the config lacks them (said in a note).

    Raises:
        ConfigError: whatever the composition meets, in one line naming the file, the line, the key or the override.
    """
    check_primary_file(request.folder, request.name)
    overrides, notes = _search_path(request, extension) + request.overrides, []
    try:
        full = _compose(request.folder, request.name, overrides)
    except Exception as error:
        group = extension.keys_group if extension is not None else None
        if group is None or _failed_key(error) not in extension.blocks():  # not a block the config lacks
            raise ConfigError(None, explain(error, request._replace(overrides=overrides), extension)) from None
        overrides = [
            *overrides[: len(overrides) - len(request.overrides)],
            f"+{group[0]}={group[1]}",
            *request.overrides,
        ]
        try:  # a user's config takes the extension's keys, as its own config does
            full = _compose(request.folder, request.name, overrides)
        except Exception as error:
            raise ConfigError(None, explain(error, request._replace(overrides=overrides), extension)) from None
        notes.append(_keys_note(request, extension, extension.blocks()))
    with read_write(full), open_dict(full):
        run_dir = OmegaConf.select(full, "hydra.run.dir", throw_on_resolution_failure=False)
        hydra = full.pop("hydra")
    missing = [key for key in (extension.blocks() if extension else ()) if OmegaConf.select(full, key) is None]
    if missing and extension.keys_group is not None:
        group, option = extension.keys_group
        keys = OmegaConf.load(Path(extension.config_folder) / group / f"{option}.yaml")
        with open_dict(full):
            for key in missing:
                OmegaConf.update(full, key, OmegaConf.select(keys, key), force_add=True)
        notes.append(_keys_note(request, extension, missing))
    return Composition(full, hydra, notes, run_dir)


def _search_path(request: Request, extension: Any) -> list[str]:
    """The override that appends the extension's config folder to the search path of a config of the user's own
    (the primary config's own ``hydra.searchpath`` first); none for the extension's own config or a user's list."""
    folder = getattr(extension, "config_folder", None)
    if (
        folder is None
        or Path(folder).resolve() == request.folder
        or any(o.startswith("hydra.searchpath=") for o in request.overrides)
    ):
        return []
    try:
        own = OmegaConf.select(OmegaConf.load(request.folder / f"{request.name}.yaml"), "hydra.searchpath") or []
    except Exception:  # the composition says what is wrong with the file
        own = []
    entries = [*(str(e) for e in own), f"file://{Path(folder).resolve()}"]
    return ["hydra.searchpath=[" + ",".join(f"'{e}'" for e in entries) + "]"]


def _compose(folder: Path, name: str, overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    with initialize_config_dir(config_dir=str(folder), version_base=None):
        full = compose(name, overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(full)  # ${hydra:...} resolves in the checks as in the run
    return full


def _keys_note(request: Request, extension: Any, blocks: Sequence[str]) -> str:
    group, option = extension.keys_group
    return (
        f"your config ({request.name}) has no {', '.join(blocks)}: {extension.name}'s keys are added ({group}={option})"
    )


def check_primary_file(folder: Path, name: str) -> None:
    """The config file names no config of its own name first in its defaults list: Hydra looks in the config's own
    folder first, so a ``ppo_trainer.yaml`` that extends ``ppo_trainer`` includes itself (a RecursionError)."""
    path = folder / f"{name}.yaml"
    try:
        text = path.read_text(encoding="utf-8")
        body = yaml.safe_load(text) if path.is_file() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # the composition says what is wrong with it
    defaults = body.get("defaults") if isinstance(body, dict) else None
    if isinstance(defaults, list) and name in [d for d in defaults if isinstance(d, str)]:
        refuse(
            None,
            f"{path}: its defaults list names {name}, which is this file itself (Hydra looks in the config's own "
            f"folder first, so it shadows the {name} it means to extend): rename it, e.g. my_{name}.yaml",
        )


def explain(error: BaseException, request: Request, extension: Any = None) -> str:
    """One line for what the composition raised (``extension``: who else reads the config's keys and offers groups,
    for an unknown key)."""
    from hydra.errors import MissingConfigException, OverrideParseException

    cause = error
    while cause.__cause__ is not None or cause.__context__ is not None:
        if isinstance(cause, (yaml.YAMLError, UnicodeDecodeError)):
            break
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, yaml.MarkedYAMLError):
        mark = cause.problem_mark
        problem = " ".join(filter(None, (cause.context, cause.problem)))
        return f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}"
    if isinstance(cause, UnicodeDecodeError):
        path = _undecodable(request.folder / f"{request.name}.yaml", *sorted(request.folder.rglob("*.yaml")))
        return f"{path or request.folder}: not UTF-8 text ({cause.reason} at byte {cause.start})"
    if isinstance(error, RecursionError):
        return f"the defaults lists of {request.folder / request.name}.yaml include each other in a cycle"
    if isinstance(error, OverrideParseException):
        override = _unparsable(request.overrides) or error
        return f"{override}: Hydra cannot read this override ({str(error).splitlines()[0]}): quote a value with spaces or special characters (key='\"~/x\"'), and give paths absolute"
    if isinstance(error, MissingConfigException) and error.options is not None:
        group, option = error.missing_cfg_file.rpartition("/")[::2] if error.missing_cfg_file else ("", "")
        return f"{group}={option}: no option {option!r} in config group {group}{did_you_mean(option, error.options)} (options: {', '.join(error.options)})"
    if isinstance(error, MissingConfigException):
        return f"--config-name {request.name}: no config {request.name}.yaml in {request.folder}"
    key = _failed_key(error)
    removed = next((o for o in request.overrides if o.startswith("~") and f"{key}.".startswith(f"{o[1:]}.")), None)
    if key is not None and removed is not None:
        return (
            f"{removed}: removes verl's {removed[1:]}, which a later override sets a key of (and verl reads): drop it"
        )
    if key is not None:
        return _unknown_key(key, request, extension)
    text = " ".join(str(error).split())
    group = re.match(r"Multiple values for (\S+)\.", text)
    if group is not None:
        return f"+{group[1]}: the config chooses a {group[1]} already: drop the + to change it ({group[1]}=...)"
    if "Config group override must be a string or a list" in text:
        group = next((o.partition("=")[0] for o in request.overrides if o.partition("=")[2] in ("null", "")), "")
        return f"{group}: a config group of verl's, not a value: set its keys ({group}.<key>=...)"
    return f"the config does not compose: {type(error).__name__}: {text if len(text) < 300 else text[:300] + ' ...'}"


def _failed_key(error: BaseException) -> Optional[str]:
    """The key an override could not set (Hydra's "Could not override 'KEY'", or the key OmegaConf found missing)."""
    cause = error.__cause__
    while cause is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__
    if isinstance(cause, OmegaConfBaseException) and "not in struct" in str(cause):
        return cause.full_key
    found = re.match(r"Could not override '([^']+)'", str(error))
    return found[1] if found else None


def _unknown_key(key: str, request: Request, extension: Any) -> str:
    """A key the composed config does not have: the closest one (read from the config composed without the override
    that names it), never the advice to add it, unless it is a free-form block's or a config group's."""
    import fnmatch

    if any(fnmatch.fnmatchcase(key, f"{pattern}*") for pattern in FREE_FORM):
        return f"{key}: not in the config yet: a key of a free-form block is added with a + (+{key}=...)"
    groups = Path(getattr(extension, "config_folder", None) or request.folder)
    if (groups / key).is_dir():  # a group of the extension's that this config's defaults list does not choose
        options = ", ".join(sorted(p.stem for p in (groups / key).glob("*.yaml")))
        return (
            f"{key}: a config group your config does not choose: add one with a + (+{key}=<option>; options: {options})"
        )
    rest = [o for o in request.overrides if not o.lstrip("+~").startswith(key.split(".")[0])]
    try:
        config = _compose(request.folder, request.name, rest)
    except Exception:
        config = None
    parts, node = key.split("."), config
    for depth, part in enumerate(parts):
        if not isinstance(node, DictConfig) or part not in node:
            full = ".".join(parts[: depth + 1])
            known = list(node.keys()) if isinstance(node, DictConfig) else []
            reader = extension.reader if extension is not None else "verl 0.9.1"
            return f"{full}: {unknown_key_message(full, part, known, reader)}"
        node = node._get_node(part)
    return f"{key}: not a key of the config"


def _unparsable(overrides: Sequence[str]) -> Optional[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except Exception:
            return override
    return None


def _undecodable(*paths: Path) -> Optional[Path]:
    for path in paths:
        try:
            path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            return path
    return None


def show(full: DictConfig, hydra: Optional[DictConfig], request: Request) -> str:
    """What ``--cfg job|hydra|all`` prints (the composition, not checked)."""
    config = {"job": full, "hydra": hydra}.get(request.show)
    if config is None:  # all
        config = OmegaConf.create({**OmegaConf.to_container(full), "hydra": OmegaConf.to_container(hydra)})
    if request.package:
        config = OmegaConf.select(config, request.package)
        if config is None:
            refuse(None, f"package '{request.package}' not found in config")
    return OmegaConf.to_yaml(config, resolve=request.resolve) if isinstance(config, DictConfig) else f"{config}\n"


def write_record(config: DictConfig, request: Request, folder: Path) -> None:
    """Hydra's record of a run, in ``folder``/.hydra: the composed config and the overrides."""
    record = folder / ".hydra"
    record.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, record / "config.yaml")
    (record / "overrides.yaml").write_text(yaml.safe_dump(list(request.overrides)), encoding="utf-8")


def fail(reason: str, error: Optional[BaseException] = None) -> NoReturn:
    """Stop with the one-line reason, exit status 2; ``HYDRA_FULL_ERROR=1`` adds ``error``'s traceback, then the
    reason again (first and last, whatever scrolls by)."""
    line = f"error: {reason}"
    print(line, file=sys.stderr, flush=True)
    if error is not None and os.environ.get("HYDRA_FULL_ERROR") == "1":
        traceback.print_exception(error)
        print(line, file=sys.stderr, flush=True)
    raise SystemExit(CONFIG_ERROR_EXIT)


def run(
    argv: Optional[Sequence[str]],
    folder: Path,
    name: str,
    program: str,
    check: Callable[[Composition, Request], Any],
    accepted: Callable[[Composition, Request, Any], None],
    extension: Any = None,
) -> None:
    """A command line from parsing to ``accepted``: parse ``argv`` (None: the process's), compose, ``--cfg`` shows the
    composition, else ``check(composition, request)`` and, if it returns, ``accepted(composition, request, what it
    returned)``. Anything refused before ``accepted`` is one line, exit status 2 (Ctrl-C: 130); what ``accepted``
    raises is its own."""
    try:
        request = parse_command_line(sys.argv[1:] if argv is None else argv, folder, name, program)
        if request is None:
            return
        composition = compose_config(request, extension)
        if request.show:
            print(show(composition.config, composition.hydra, request), end="")
            return
        result = check(composition, request)
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except ConfigError as error:
        fail(str(error), error)
    except Exception as error:  # the checks read only the config and this machine: what they raise is the config's
        text = " ".join(str(error).split())
        fail(text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}", error)
    accepted(composition, request, result)
