"""Pieces shared by the ``gcpo`` sub-commands: errors, credit-engine flags, JSONL input and atomic output."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from typing import Iterator, Optional

from gcpo_core.advantages import ADVANTAGE_MODES
from gcpo_core.config import CreditConfig
from gcpo_core.encoder import DEFAULT_MODEL, LONG_TEXT_POLICIES, EncoderConfig
from gcpo_core.kernels import KERNELS
from gcpo_core.quality import QUALITY_MAPS
from gcpo_core.shapley import SHAPLEY_METHODS
from gcpo_core.text_span import TEXT_SPANS


class CommandError(Exception):
    """A user-facing failure: printed as ``gcpo <command>: <message>`` with exit status 2."""


# settings-file key -> command-line destination (the files in configs/ use the engine's field names)
CREDIT_KEYS = {
    "kernel": "kernel", "rbf_bandwidth": "rbf_bandwidth", "quality": "quality", "method": "method",
    "exact_max_contributors": "exact_max", "permutations": "permutations", "antithetic": "antithetic",
    "stratified": "stratified", "seed": "seed", "advantage": "advantage", "mix_coef": "mix_coef",
    "norm_by_std": "norm_by_std", "epsilon": "epsilon", "std_floor": "std_floor", "max_group_size": "max_group_size",
}
ENCODER_KEYS = {
    "model": "encoder", "text_span": "text_span", "long_text": "long_text", "max_chunks": "max_chunks",
    "device": "device", "dtype": "dtype", "batch_tokens": "batch_tokens", "max_seq_length": "max_seq_length",
}


def settings_file_defaults(path: str) -> dict:
    """Command-line defaults from a settings file (YAML with ``credit:`` and ``encoder:`` blocks, e.g.
    configs/credit_default.yaml); unknown blocks or keys are errors naming them."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            settings = yaml.safe_load(handle) or {}
    except OSError as err:
        raise CommandError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise CommandError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(settings, dict):
        raise CommandError(f"{path}: expected a mapping with 'credit' and/or 'encoder' blocks")
    unknown = sorted(set(settings) - {"credit", "encoder"})
    if unknown:
        raise CommandError(f"{path}: unknown block(s) {unknown}; known: ['credit', 'encoder']")
    defaults = {}
    for block, keys in (("credit", CREDIT_KEYS), ("encoder", ENCODER_KEYS)):
        values = settings.get(block) or {}
        bad = sorted(set(values) - set(keys))
        if bad:
            raise CommandError(f"{path}: unknown {block} key(s) {bad}; known: {sorted(keys)}")
        defaults.update({keys[k]: v for k, v in values.items()})
    return defaults


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="SETTINGS.yaml",
                        help="credit / encoder settings (e.g. configs/credit_default.yaml); flags win over it")


def add_credit_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for every :class:`CreditConfig` choice; defaults are the recipe's."""
    defaults = CreditConfig()
    group = parser.add_argument_group("credit engine")
    group.add_argument("--method", choices=SHAPLEY_METHODS, default=defaults.method, help="Shapley estimator")
    group.add_argument("--exact-max", type=int, default=defaults.exact_max_contributors, metavar="C",
                       help="auto: largest number of correct rollouts solved exactly (default %(default)s)")
    group.add_argument("--permutations", type=int, default=defaults.permutations, metavar="M",
                       help="Monte-Carlo permutations per group (default %(default)s)")
    group.add_argument("--no-antithetic", dest="antithetic", action="store_false", help="no reversed permutations")
    group.add_argument("--no-stratified", dest="stratified", action="store_false",
                       help="no position-stratified permutations")
    group.add_argument("--seed", type=int, default=defaults.seed, help="Monte-Carlo seed (default %(default)s)")
    group.add_argument("--kernel", choices=KERNELS.names(), default=defaults.kernel)
    group.add_argument("--rbf-bandwidth", type=float, default=None, metavar="SIGMA",
                       help="RBF sigma (default: median heuristic)")
    group.add_argument("--quality", choices=QUALITY_MAPS.names(), default=defaults.quality,
                       help="reward -> quality mapping (default %(default)s)")
    group.add_argument("--advantage", choices=ADVANTAGE_MODES.names(), default=defaults.advantage, metavar="MODE",
                       help="shapley: normalise phi; mix: normalise r + lambda*phi (default %(default)s)")
    group.add_argument("--mix-coef", type=float, default=defaults.mix_coef, metavar="LAMBDA")
    group.add_argument("--no-std-norm", dest="norm_by_std", action="store_false",
                       help="centre advantages without dividing by the group std (Dr.GRPO)")
    group.add_argument("--epsilon", type=float, default=defaults.epsilon, help="added to the group std")
    group.add_argument("--std-floor", type=float, default=defaults.std_floor, metavar="NATS",
                       help="take the group std as at least this (default %(default)s: GRPO's normalisation)")
    group.add_argument("--max-group-size", type=int, default=defaults.max_group_size)


def credit_config_from_args(args: argparse.Namespace) -> CreditConfig:
    try:
        return CreditConfig(**{field: getattr(args, dest) for field, dest in CREDIT_KEYS.items()})
    except ValueError as err:
        raise CommandError(str(err)) from None


def add_encoder_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for :class:`EncoderConfig`; defaults are the recipe's."""
    defaults = EncoderConfig()
    group = parser.add_argument_group("encoder (for text input)")
    group.add_argument("--encoder", default=DEFAULT_MODEL, metavar="MODEL",
                       help="sentence-transformers model name or path (default %(default)s, bundled offline)")
    group.add_argument("--text-span", choices=TEXT_SPANS.names(), default=defaults.text_span,
                       help="what is embedded (default %(default)s)")
    group.add_argument("--long-text", choices=LONG_TEXT_POLICIES, default=defaults.long_text,
                       help="texts longer than the encoder reads (default %(default)s)")
    group.add_argument("--max-chunks", type=int, default=defaults.max_chunks)
    group.add_argument("--device", default=defaults.device, help="auto, cpu, cuda, cuda:1, ...")
    group.add_argument("--dtype", default=defaults.dtype,
                       help="auto (float16 on a GPU, float32 on a CPU), float32, float16, bfloat16")
    group.add_argument("--max-seq-length", type=int, default=defaults.max_seq_length,
                       help="word pieces the encoder reads (default: the model's)")
    group.add_argument("--batch-tokens", type=int, default=defaults.batch_tokens,
                       help="padded tokens per forward pass, bounding the encoder's memory (default: 262144 on a GPU, "
                            "16384 on a CPU)")


def encoder_config_from_args(args: argparse.Namespace) -> EncoderConfig:
    try:
        return EncoderConfig(**{field: getattr(args, dest) for field, dest in ENCODER_KEYS.items()})
    except ValueError as err:
        raise CommandError(str(err)) from None


def read_jsonl(path: str) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line; a line that is not a JSON object is a CommandError."""
    try:
        handle = sys.stdin if path == "-" else open(path, encoding="utf-8")
    except OSError as err:
        raise CommandError(f"cannot read {path}: {err.strerror}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise CommandError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise CommandError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            yield number, record


def finite_number(value: object) -> Optional[float]:
    """The value as a float if it is a finite JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def write_text_atomically(path: Optional[str], text: str) -> None:
    """Write all of ``text`` to ``path`` (stdout if None) or nothing: a temp file renamed into place."""
    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".gcpo-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
