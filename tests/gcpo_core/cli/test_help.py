"""`gcpo ... --help`: quick (no torch), every default shown, every choice listed, and true to the engine."""

import argparse
import dataclasses
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gcpo_core.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[3]
COMMANDS = ("credit", "demo", "eval", "report")


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def _subparsers():
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_help_does_not_import_torch():
    probe = (
        "import sys\nfrom gcpo_core.cli import main\n"
        "for argv in ([], *([c] for c in %r)):\n"
        "    try:\n        main([*argv, '--help'])\n    except SystemExit:\n        pass\n"
        "print(sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules))"
    ) % (COMMANDS,)
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_with_a_value_shows_its_default(command):
    for action in _subparsers()[command]._actions:
        if action.option_strings and action.nargs != 0 and action.default not in (None, [], argparse.SUPPRESS):
            assert action.help and "default" in action.help, f"{command} {action.option_strings}"


@pytest.mark.parametrize("command", ("", *COMMANDS))
def test_help_has_no_rest_markup(capsys, command):
    assert "``" not in _help(capsys, *([command] if command else []))


def test_credit_help_shows_defaults_limits_choices_and_the_empty_input_rule(capsys):
    text = " ".join(_help(capsys, "credit").split())
    for expected in (
        "(default auto)",
        "--mix-coef LAMBDA",
        "(default 1.0)",
        "(default 1e-06)",
        "(default 128",
        "at most 4096",
        "dra",
        "empty input",
        "-v, --verbose",
        "byte-order mark",
    ):
        assert expected in text, expected


def test_eval_and_report_help_show_their_defaults(capsys):
    text = " ".join(_help(capsys, "eval").split())
    assert "(default 16)" in text and "(default eval_results)" in text and "(default 0.9)" in text
    assert "(default credit_report)" in " ".join(_help(capsys, "report").split())


def test_the_flags_choices_and_defaults_are_the_engines():
    from gcpo_core.cli import common
    from gcpo_core.cli.demo import load_demo_rollouts
    from gcpo_core.credit.advantages import ADVANTAGE_MODES, ALL_CORRECT_SCALES
    from gcpo_core.credit.config import CreditConfig
    from gcpo_core.credit.kernels import KERNELS
    from gcpo_core.credit.quality import QUALITY_MAPS, REWARD_LIMIT
    from gcpo_core.credit.shapley.dispatch import SHAPLEY_METHODS
    from gcpo_core.credit.shapley.exact import EXACT_LIMIT
    from gcpo_core.credit.shapley.monte_carlo import MIN_PERMUTATIONS
    from gcpo_core.encoding.encoder import DEFAULT_MODEL, DTYPES, EncoderConfig
    from gcpo_core.encoding.text_span import TEXT_SPANS
    from gcpo_core.encoding.word_pieces import LONG_TEXT_POLICIES

    assert common.CREDIT_DEFAULTS == dataclasses.asdict(CreditConfig())
    assert common.ENCODER_DEFAULTS == dataclasses.asdict(EncoderConfig())
    assert common.ENCODER_DEFAULTS["model"] == DEFAULT_MODEL
    assert common.CHOICES == {
        "kernel": tuple(KERNELS.names()),
        "quality": tuple(QUALITY_MAPS.names()),
        "method": tuple(SHAPLEY_METHODS),
        "advantage": tuple(ADVANTAGE_MODES.names()),
        "text_span": tuple(TEXT_SPANS.names()),
        "long_text": tuple(LONG_TEXT_POLICIES),
        "dtype": ("auto", *DTYPES),
        "all_correct_scale": tuple(ALL_CORRECT_SCALES),
    }
    assert common.EXACT_LIMIT == EXACT_LIMIT
    assert common.MIN_PERMUTATIONS == MIN_PERMUTATIONS
    with pytest.raises(ValueError):
        CreditConfig(permutations=common.MAX_PERMUTATIONS + 2)
    CreditConfig(permutations=common.MAX_PERMUTATIONS)
    sizes = Counter(row["group"] for row in load_demo_rollouts())
    assert common.DEMO_LARGEST_GROUP == max(sizes.values())
    assert common.REWARD_LIMIT == REWARD_LIMIT
    with pytest.raises(ValueError):
        CreditConfig(max_group_size=common.MAX_GROUP_SIZE_LIMIT + 1)
    CreditConfig(max_group_size=common.MAX_GROUP_SIZE_LIMIT)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help(command):
    parser = _subparsers()[command]
    bare = [
        a.option_strings or [a.dest] for a in parser._actions if not isinstance(a, argparse._HelpAction) and not a.help
    ]
    assert not bare, f"gcpo {command}: options without help: {bare}"


def test_the_flag_rules_accept_what_the_engine_and_encoder_configs_accept():
    """FLAG_RULES checks the credit and encoder flags before the configs are built: at and around every bound, a
    value passes the rule exactly when the engine's (or the encoder's) config takes it (the flags also refuse
    integers beyond 64 bits)."""
    import math

    from gcpo_core.cli.common import CREDIT_KEYS, ENCODER_KEYS, FLAG_RULES
    from gcpo_core.credit.config import CreditConfig
    from gcpo_core.encoding.encoder import EncoderConfig

    for config, keys in ((CreditConfig, CREDIT_KEYS), (EncoderConfig, ENCODER_KEYS)):
        for field, dest in keys.items():
            rule = FLAG_RULES.get(dest)
            if rule is None or rule.kind not in ("int", "float"):
                continue
            step = 1 if rule.kind == "int" else 1e-9
            edges = [rule.low - step, rule.low, rule.low + step, 2**63 - 1, 2**63, math.nan, math.inf]
            if rule.high is not None:
                edges += [rule.high - step, rule.high, rule.high + step]
            for value in edges:
                if rule.kind == "int" and isinstance(value, float):
                    continue
                if (
                    value == 2**63 and rule.kind == "int"
                ):  # beyond 64 bits: refused by the flags, whatever the config says
                    assert rule.problem(value) is not None, field
                    continue
                try:
                    config(**{field: value})
                    engine_takes = True
                except ValueError:
                    engine_takes = False
                assert (rule.problem(value) is None) == engine_takes, (field, value)
