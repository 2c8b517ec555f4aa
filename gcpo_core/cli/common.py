"""Pieces shared by the gcpo sub-commands: the argument parser, user-facing errors, the engine's and the
encoder's flags and settings files.

Nothing here imports torch: ``gcpo ... --help`` must answer at once, not after the 1-2 s torch takes to import,
so the engine's choices and defaults that the flags show are written out below, and
tests/gcpo_core/cli/test_help.py holds them equal to the engine's own.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

# dataclasses.asdict(CreditConfig())
CREDIT_DEFAULTS: dict[str, Any] = {
    "kernel": "cosine",
    "rbf_bandwidth": None,
    "quality": "clip",
    "method": "auto",
    "exact_max_contributors": 16,
    "permutations": 64,
    "antithetic": True,
    "stratified": True,
    "seed": 0,
    "advantage": "shapley",
    "mix_coef": 1.0,
    "blend_weight": 0.5,
    "norm_by_std": True,
    "all_correct_scale": "group",
    "epsilon": 1e-6,
    "std_floor": 0.0,
    "max_group_size": 128,
}
# dataclasses.asdict(EncoderConfig())
ENCODER_DEFAULTS: dict[str, Any] = {
    "model": "sentence-transformers/all-MiniLM-L6-v2",
    "device": "auto",
    "dtype": "auto",
    "batch_tokens": None,
    "max_seq_length": None,
    "text_span": "full",
    "long_text": "chunk",
    "max_chunks": 16,
}
# the engine's registries (KERNELS, QUALITY_MAPS, SHAPLEY_METHODS, ADVANTAGE_MODES, TEXT_SPANS, ...)
CHOICES: dict[str, tuple[str, ...]] = {
    "kernel": ("cosine", "rbf"),
    "quality": ("binary", "clip", "none", "sqrt"),
    "method": ("auto", "exact", "mc", "loo"),
    "advantage": ("blend", "dra", "mix", "shapley"),
    "text_span": ("answer", "full", "reasoning"),
    "long_text": ("chunk", "truncate", "head_tail"),
    "dtype": ("auto", "float32", "float16", "bfloat16"),
    "all_correct_scale": ("batch", "group"),
}
EXACT_LIMIT = 22  # gcpo_core.credit.shapley.exact.EXACT_LIMIT: most correct rollouts `exact` enumerates
MIN_PERMUTATIONS = 4  # gcpo_core.credit.shapley.monte_carlo.MIN_PERMUTATIONS
MAX_PERMUTATIONS = 1_000_000  # CreditConfig's upper bound on permutations
MAX_GROUP_SIZE_LIMIT = 4096  # CreditConfig's upper bound on max_group_size
DEMO_LARGEST_GROUP = 6  # the most solutions of one problem in gcpo_core/data/demo_rollouts.jsonl
REWARD_LIMIT = 1e150  # gcpo_core.credit.quality.REWARD_LIMIT: the largest reward size the engine normalises

# settings-file key -> command-line destination (the files in configs/ use the engine's field names)
CREDIT_KEYS = {
    "kernel": "kernel",
    "rbf_bandwidth": "rbf_bandwidth",
    "quality": "quality",
    "method": "method",
    "exact_max_contributors": "exact_max",
    "permutations": "permutations",
    "antithetic": "antithetic",
    "stratified": "stratified",
    "seed": "seed",
    "advantage": "advantage",
    "mix_coef": "mix_coef",
    "blend_weight": "blend_weight",
    "norm_by_std": "norm_by_std",
    "all_correct_scale": "all_correct_scale",
    "epsilon": "epsilon",
    "std_floor": "std_floor",
    "max_group_size": "max_group_size",
}
ENCODER_KEYS = {
    "model": "encoder",
    "text_span": "text_span",
    "long_text": "long_text",
    "max_chunks": "max_chunks",
    "device": "device",
    "dtype": "dtype",
    "batch_tokens": "batch_tokens",
    "max_seq_length": "max_seq_length",
}
# destinations whose flag is not "--" + dest with dashes
FLAGS = {"antithetic": "--no-antithetic", "stratified": "--no-stratified", "norm_by_std": "--no-std-norm"}


class CommandError(Exception):
    """A failure the user's input or flags caused: printed as ``gcpo <command>: <message>``, exit status 2."""


class UsageError(CommandError):
    """A command line argparse cannot read (unknown flag, bad value, missing argument)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is a :class:`UsageError` (one line from ``gcpo.cli.main``, exit 2)
    instead of the usage text and ``sys.exit``; ``--help`` is unchanged."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


INT64_MAX = 2**63 - 1  # the largest integer a flag takes: torch, numpy and vLLM hold them as 64-bit integers
DEVICE_PATTERN = r"auto|cpu|mps|(cuda|xpu)(:\d+)?"  # the devices the encoder runs on


@dataclass(frozen=True)
class Rule:
    """What one flag accepts. ``kind``: ``int`` or ``float`` (finite) between ``low`` and ``high`` (``low``
    excluded where ``above``); ``input`` (a readable file, '-' for stdin where ``stdin``), ``dump`` (a file or a
    folder), ``folder`` (one to write into, made if missing), ``model`` (a name, or a model folder), ``device``.
    ``unset``: None (the flag not given) is allowed. ``what`` names the range in words where a bound needs it."""

    kind: str
    low: Optional[float] = None
    high: Optional[float] = None
    above: bool = False
    unset: bool = False
    stdin: bool = False
    what: str = ""

    def problem(self, value: object) -> Optional[str]:
        """Why ``value`` is refused, or None."""
        if value is None and self.unset:
            return None
        if self.kind in ("int", "float"):
            return self._number_problem(value)
        if not isinstance(value, (str, Path)) or not str(value):
            return f"must be a non-empty string, got {shown(value)}"
        return getattr(self, f"_{self.kind}_problem")(str(value))

    def range_text(self) -> str:
        number = "an integer" if self.kind == "int" else "a finite number"
        if self.what:
            return self.what
        low, high = (f"{x:d}" if self.kind == "int" else f"{x:g}" for x in (self.low, self.high or 0))
        if self.high is None:
            return f"{number} {'>' if self.above else '>='} {low}"
        return f"{number} in {'(' if self.above else '['}{low}, {high}]"

    def _number_problem(self, value: object) -> Optional[str]:
        if self.kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if ok and self.kind == "int" and self.high is None and value > INT64_MAX:
            return "must be at most 2^63 - 1"
        high = self.high if self.high is not None else math.inf
        ok = ok and (value > self.low if self.above else value >= self.low) and value <= high
        return None if ok else f"must be {self.range_text()}"

    @staticmethod
    def _input_problem(path: str) -> Optional[str]:
        if not os.path.exists(path):
            return "no such file"
        if os.path.isdir(path):
            return "a folder, not a file"
        return None if os.access(path, os.R_OK) else "cannot read it (permission denied)"

    @staticmethod
    def _dump_problem(path: str) -> Optional[str]:
        if not os.path.exists(path):
            return "no such file or folder"
        return None if os.access(path, os.R_OK) else "cannot read it (permission denied)"

    @staticmethod
    def _folder_problem(path: str) -> Optional[str]:
        if os.path.exists(path) and not os.path.isdir(path):
            return "is a file, not a folder"
        existing = os.path.abspath(path)
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            return f"{existing} is a file, not a folder"
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"cannot create files in {existing} (permission denied)"
        return None

    @staticmethod
    def _model_problem(name: str) -> Optional[str]:
        if os.path.exists(name):
            return None if os.path.isdir(name) else "a file, not a model folder"
        if name.startswith(("/", "./", "../", "~")) or name in (".", ".."):  # a path, not a hub name
            return "no such model folder"
        return None

    @staticmethod
    def _device_problem(device: str) -> Optional[str]:
        if re.fullmatch(DEVICE_PATTERN, device):
            return None
        return "must be auto, cpu, cuda, cuda:N, mps or xpu[:N]"


# Every flag's rule, by destination ("<command>.<dest>" where one command's flag means something else). A flag
# with ``choices`` is checked against them; main() checks every flag here before a command does any work.
FLAG_RULES: dict[str, Rule] = {
    # credit engine (CreditConfig's bounds)
    "exact_max": Rule("int", 0, EXACT_LIMIT),
    "permutations": Rule("int", MIN_PERMUTATIONS, MAX_PERMUTATIONS),
    "seed": Rule("int", 0),
    "rbf_bandwidth": Rule("float", 0, above=True, unset=True),
    "mix_coef": Rule("float", 0),
    "blend_weight": Rule("float", 0, 1),
    "epsilon": Rule("float", 0, above=True),
    "std_floor": Rule("float", 0),
    "max_group_size": Rule("int", 1, MAX_GROUP_SIZE_LIMIT),
    # encoder (EncoderConfig's bounds)
    "encoder": Rule("model"),
    "device": Rule("device"),
    "max_chunks": Rule("int", 1),
    "max_seq_length": Rule("int", 8, unset=True),
    "batch_tokens": Rule("int", 8, unset=True),
    # credit
    "credit.input": Rule("input", stdin=True),
    "credit.dump": Rule("folder", unset=True),
    "dump_step": Rule("int", 0),
    # demo: its groups are the bundled data's
    "demo.max_group_size": Rule(
        "int",
        DEMO_LARGEST_GROUP,
        MAX_GROUP_SIZE_LIMIT,
        what=f"an integer in [{DEMO_LARGEST_GROUP}, {MAX_GROUP_SIZE_LIMIT}]: the demo has groups of "
        f"{DEMO_LARGEST_GROUP} solutions",
    ),
    # eval
    "generations": Rule("input"),
    "benchmark": Rule("input"),
    "eval.out_dir": Rule("folder"),
    "ks": Rule("int", 1, unset=True, what="an integer >= 1 (pass@k needs k >= 1, and at most the samples per problem)"),
    "cluster_threshold": Rule("float", -1, 1, what="a cosine, in [-1, 1]"),
    "samples": Rule("int", 1),
    "temperature": Rule("float", 0),
    "top_p": Rule("float", 0, 1, above=True),
    "max_tokens": Rule("int", 1),
    "tp": Rule("int", 1),
    "generate": Rule("model", unset=True),
    # report
    "report.dump": Rule("dump"),
    "report.out_dir": Rule("folder"),
    "max_groups": Rule("int", 1),
}


def check_flags(parser: argparse.ArgumentParser, command: str, args: argparse.Namespace) -> None:
    """Every flag of ``parser`` (one command's) against its choices and its rule in :data:`FLAG_RULES`: the first
    bad value is a :class:`CommandError` naming the flag (or the settings-file key that set it)."""
    sources = getattr(args, "setting_sources", {})
    for action in parser._actions:
        rule = FLAG_RULES.get(f"{command}.{action.dest}") or FLAG_RULES.get(action.dest)
        value = getattr(args, action.dest, None)
        for item in value if isinstance(value, list) and _takes_many(action) else [value]:
            if action.choices is not None and item is not None and item not in action.choices:
                problem = f"must be one of {', '.join(map(str, action.choices))}"
            elif rule is None or (rule.stdin and item == "-"):
                continue
            else:
                problem = rule.problem(item)
            if problem is None:
                continue
            if action.dest in sources:
                raise CommandError(f"{sources[action.dest]}: {problem}, got {shown(item)}")
            if not action.option_strings:  # a positional argument: the value is a path
                raise CommandError(f"{item or repr(item)}: {problem}")
            raise CommandError(f"{'/'.join(action.option_strings)} {item}: {problem}")


def path_argument(text: str) -> Path:
    """A flag's path: ``Path("")`` would be the current folder, so an empty one is refused (one line naming it)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return Path(text)


def _takes_many(action: argparse.Action) -> bool:
    return action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction)


def one_line(message: object) -> str:
    return " ".join(str(message).split())


def shown(value: object, limit: int = 40) -> str:
    """A JSON value as a message shows it: JSON text, cut short."""
    try:
        text = json_text(value)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_text(value: object) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def flag_of(dest: str) -> str:
    return FLAGS.get(dest, "--" + dest.replace("_", "-"))


def settings_file_defaults(path: str) -> dict:
    """Command-line defaults from a settings file (YAML with ``credit:`` and ``encoder:`` blocks, e.g.
    configs/credit_default.yaml); unknown blocks or keys are errors naming them."""
    return read_settings_file(path)[0]


def read_settings_file(path: str) -> tuple[dict, dict]:
    """:func:`settings_file_defaults` and, for each destination, where it was set (``FILE: credit.key``)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            settings = yaml.safe_load(handle) or {}
    except OSError as err:
        raise CommandError(f"--config {path}: cannot read it ({err.strerror})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise CommandError(f"--config {path}: not valid YAML ({one_line(err)})") from None
    if not isinstance(settings, dict):
        raise CommandError(f"{path}: expected a mapping with 'credit' and/or 'encoder' blocks")
    unknown = sorted(set(map(str, settings)) - {"credit", "encoder"})
    if unknown:
        raise CommandError(f"{path}: unknown block(s) {unknown}; known: ['credit', 'encoder']")
    defaults, sources = {}, {}
    for block, keys in (("credit", CREDIT_KEYS), ("encoder", ENCODER_KEYS)):
        values = settings.get(block) or {}
        if not isinstance(values, dict):
            raise CommandError(f"{path}: {block}: expected a mapping of settings, got {shown(values)}")
        bad = sorted(set(map(str, values)) - set(keys))
        if bad:
            raise CommandError(f"{path}: unknown {block} key(s) {bad}; known: {sorted(keys)}")
        defaults.update({keys[k]: v for k, v in values.items()})
        sources.update({keys[k]: f"{path}: {block}.{k}" for k in values})
    return defaults, sources


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="SETTINGS.yaml",
        help="credit / encoder settings (e.g. configs/credit_default.yaml); flags win over it",
    )


def add_credit_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for every :class:`CreditConfig` choice; defaults are the recipe's."""
    d = CREDIT_DEFAULTS
    group = parser.add_argument_group("credit engine")
    group.add_argument(
        "--method",
        choices=CHOICES["method"],
        default=d["method"],
        help="Shapley estimator; auto: exact up to --exact-max correct rollouts, else mc (default %(default)s)",
    )
    group.add_argument(
        "--exact-max",
        type=int,
        default=d["exact_max_contributors"],
        metavar="C",
        help=f"auto: most correct rollouts solved exactly (default %(default)s, at most {EXACT_LIMIT})",
    )
    group.add_argument(
        "--permutations",
        type=int,
        default=d["permutations"],
        metavar="M",
        help="Monte-Carlo permutations per group (default %(default)s)",
    )
    group.add_argument("--no-antithetic", dest="antithetic", action="store_false", help="no reversed permutations")
    group.add_argument(
        "--no-stratified", dest="stratified", action="store_false", help="no position-stratified permutations"
    )
    group.add_argument("--seed", type=int, default=d["seed"], help="Monte-Carlo seed (default %(default)s)")
    group.add_argument(
        "--kernel", choices=CHOICES["kernel"], default=d["kernel"], help="similarity of rollouts (default %(default)s)"
    )
    group.add_argument(
        "--rbf-bandwidth", type=float, default=None, metavar="SIGMA", help="RBF sigma (default: the median heuristic)"
    )
    group.add_argument(
        "--quality",
        choices=CHOICES["quality"],
        default=d["quality"],
        help="reward -> quality mapping (default %(default)s)",
    )
    group.add_argument(
        "--advantage",
        choices=CHOICES["advantage"],
        default=d["advantage"],
        help="what is group-normalised: shapley: phi; mix: r + LAMBDA * phi; blend: (1 - W) * GRPO's "
        "advantage + W * shapley's; dra: DRA-GRPO's similarity-discounted reward (default %(default)s)",
    )
    group.add_argument(
        "--mix-coef",
        type=float,
        default=d["mix_coef"],
        metavar="LAMBDA",
        help="LAMBDA of --advantage mix (default %(default)s)",
    )
    group.add_argument(
        "--blend-weight",
        type=float,
        default=d["blend_weight"],
        metavar="W",
        help="W in [0, 1] of --advantage blend: 0 is GRPO's advantage, 1 shapley's (default %(default)s)",
    )
    group.add_argument(
        "--no-std-norm",
        dest="norm_by_std",
        action="store_false",
        help="centre advantages without dividing by the group std (Dr.GRPO)",
    )
    group.add_argument(
        "--all-correct-scale",
        choices=CHOICES["all_correct_scale"],
        default=d["all_correct_scale"],
        help="groups whose rewards are all equal: scaled by the batch's right-vs-wrong spread (batch) "
        "or by their own std (group) (default %(default)s)",
    )
    group.add_argument(
        "--epsilon",
        type=float,
        default=d["epsilon"],
        help="added to the group std, keeps a constant group finite (> 0) (default %(default)s)",
    )
    group.add_argument(
        "--std-floor",
        type=float,
        default=d["std_floor"],
        metavar="NATS",
        help="take the group std as at least this (default %(default)s: GRPO's normalisation)",
    )
    group.add_argument(
        "--max-group-size",
        type=int,
        default=d["max_group_size"],
        metavar="G",
        help="larger groups are refused: they mean rollouts were grouped wrongly "
        f"(default %(default)s, at most {MAX_GROUP_SIZE_LIMIT})",
    )


def _config_error(args: argparse.Namespace, err: ValueError, keys: dict[str, str]) -> CommandError:
    """The engine's message, naming the flag (or the settings-file key) that set the bad value."""
    message = one_line(err)
    match = re.match(r"(?:credit|encoder) config: (\w+) ", message)
    if match and match.group(1) in keys:
        dest = keys[match.group(1)]
        where = getattr(args, "setting_sources", {}).get(dest) or f"{flag_of(dest)} {getattr(args, dest)}"
        return CommandError(f"{where}: {message.split(': ', 1)[1]}")
    return CommandError(message)


def credit_config_from_args(args: argparse.Namespace):
    from gcpo_core.credit.config import CreditConfig

    try:
        return CreditConfig(**{field: getattr(args, dest) for field, dest in CREDIT_KEYS.items()})
    except ValueError as err:
        raise _config_error(args, err, CREDIT_KEYS) from None


def add_encoder_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for :class:`EncoderConfig`; defaults are the recipe's."""
    d = ENCODER_DEFAULTS
    group = parser.add_argument_group("encoder (for text input)")
    group.add_argument(
        "--encoder",
        default=d["model"],
        metavar="MODEL",
        help="sentence-transformers model name or path (default %(default)s, bundled offline)",
    )
    group.add_argument(
        "--text-span",
        choices=CHOICES["text_span"],
        default=d["text_span"],
        help="what is embedded (default %(default)s)",
    )
    group.add_argument(
        "--long-text",
        choices=CHOICES["long_text"],
        default=d["long_text"],
        help="texts longer than the encoder reads (default %(default)s)",
    )
    group.add_argument(
        "--max-chunks",
        type=int,
        default=d["max_chunks"],
        help="most pieces pooled per text under --long-text chunk (default %(default)s)",
    )
    group.add_argument("--device", default=d["device"], help="auto, cpu, cuda, cuda:1, ... (default %(default)s)")
    group.add_argument(
        "--dtype",
        choices=CHOICES["dtype"],
        default=d["dtype"],
        help="auto: float16 on a GPU, float32 on a CPU (default %(default)s)",
    )
    group.add_argument(
        "--max-seq-length",
        type=int,
        default=d["max_seq_length"],
        help="word pieces the encoder reads (default: the model's)",
    )
    group.add_argument(
        "--batch-tokens",
        type=int,
        default=d["batch_tokens"],
        help="padded tokens per forward pass, bounding the encoder's memory (default: 262144 on a GPU, 16384 on a CPU)",
    )
    group.add_argument(
        "-v", "--verbose", action="store_true", help="show the encoder's own output (its weight-loading progress bar)"
    )


def encoder_config_from_args(args: argparse.Namespace):
    from gcpo_core.encoding.encoder import EncoderConfig

    try:
        return EncoderConfig(**{field: getattr(args, dest) for field, dest in ENCODER_KEYS.items()})
    except ValueError as err:
        raise _config_error(args, err, ENCODER_KEYS) from None


def load_encoder(args: argparse.Namespace):
    """The configured :class:`RolloutEncoder`, without transformers' "Loading weights" bar unless --verbose."""
    config = encoder_config_from_args(args)
    try:
        encoder = _load_encoder(config, getattr(args, "verbose", False))
    except (OSError, ValueError) as err:  # no such model (a hub name not cached offline), not a model folder
        message = one_line(err)
        if message.startswith("encoder config: "):  # a rule that needs the model: one piece fits in a batch
            changed = [
                f"{flag_of(dest)} {getattr(args, dest)}"
                for key, dest in ENCODER_KEYS.items()
                if key in ("batch_tokens", "max_seq_length") and getattr(args, dest) != ENCODER_DEFAULTS[key]
            ]
            where = " ".join(changed) or f"--encoder {config.model}"
            raise CommandError(f"{where}: {message.removeprefix('encoder config: ')}") from None
        raise CommandError(f"--encoder {config.model}: cannot load it as a sentence encoder ({message})") from None
    # the transformer reads at most its position embeddings: a longer piece fails inside it, mid-run
    positions = getattr(getattr(encoder._transformer.auto_model, "config", None), "max_position_embeddings", None)
    if config.max_seq_length is not None and isinstance(positions, int) and config.max_seq_length > positions:
        raise CommandError(
            f"--max-seq-length {config.max_seq_length}: {config.model} reads at most {positions} word pieces"
        )
    return encoder


def _load_encoder(config, verbose: bool):
    from gcpo_core.encoding.encoder import RolloutEncoder

    # what the libraries print while they load goes to stderr with -v, else nowhere: stdout is the command's output
    # (JSON lines, a table), and stderr holds only what went wrong and the summary; transformers prints
    # "[INFO] Running in WANDB offline mode" on stdout on import when WANDB_MODE=offline
    with contextlib.redirect_stdout(sys.stderr if verbose else io.StringIO()):
        if verbose:
            return RolloutEncoder(config)
        from transformers.utils import logging as hf_logging

        bars_were_on = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            return RolloutEncoder(config)
        finally:
            if bars_were_on:
                hf_logging.enable_progress_bar()
