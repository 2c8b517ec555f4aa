"""Pieces shared by the gcpo sub-commands: the argument parser, user-facing errors, the engine's and the
encoder's flags and settings files.

Nothing here imports torch: ``gcpo ... --help`` must answer at once, not after the 1-2 s torch takes to import,
so the engine's choices and defaults that the flags show are written out below, and
tests/gcpo_core/cli/test_help.py holds them equal to the engine's own.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from typing import Any

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
    "advantage": ("dra", "mix", "shapley"),
    "text_span": ("answer", "full", "reasoning"),
    "long_text": ("chunk", "truncate", "head_tail"),
    "dtype": ("auto", "float32", "float16", "bfloat16"),
    "all_correct_scale": ("batch", "group"),
}
EXACT_LIMIT = 22  # gcpo_core.credit.shapley.exact.EXACT_LIMIT: most correct rollouts `exact` enumerates
MAX_GROUP_SIZE_LIMIT = 4096  # CreditConfig's upper bound on max_group_size
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


def one_line(message: object) -> str:
    return " ".join(str(message).split())


def shown(value: object, limit: int = 40) -> str:
    """A JSON value as a message shows it: JSON text, cut short."""
    try:
        text = json_text(value)
    except (ValueError, RecursionError):
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
        help="what is group-normalised: shapley: phi; mix: r + LAMBDA * phi; dra: DRA-GRPO's "
        "similarity-discounted reward (default %(default)s)",
    )
    group.add_argument(
        "--mix-coef",
        type=float,
        default=d["mix_coef"],
        metavar="LAMBDA",
        help="LAMBDA of --advantage mix (default %(default)s)",
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
    from gcpo_core.encoding.encoder import RolloutEncoder

    config = encoder_config_from_args(args)
    # what the libraries print while they load goes to stderr: stdout is the command's output (JSON lines, a
    # table), and transformers prints "[INFO] Running in WANDB offline mode" there on import when WANDB_MODE=offline
    with contextlib.redirect_stdout(sys.stderr):
        if getattr(args, "verbose", False):
            return RolloutEncoder(config)
        from transformers.utils import logging as hf_logging

        bars_were_on = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            return RolloutEncoder(config)
        finally:
            if bars_were_on:
                hf_logging.enable_progress_bar()
