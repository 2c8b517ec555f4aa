"""The settings files in configs/ and `--config` on the command line."""

import json
from pathlib import Path

import pytest
import yaml

from gcpo_core.cli import main
from gcpo_core.cli.common import settings_file_defaults
from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.encoder import EncoderConfig

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_the_default_settings_file_is_the_engines_defaults():
    settings = yaml.safe_load((CONFIGS / "credit_default.yaml").read_text())
    assert CreditConfig(**settings["credit"]) == CreditConfig()
    assert EncoderConfig(**settings["encoder"]) == EncoderConfig()


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml") if p.name != "credit_default.yaml"))
def test_a_settings_file_writes_only_what_differs_from_the_defaults(name):
    """credit_default.yaml is the engine's defaults written out (checked above) and config/gcpo_keys/recipe.yaml the
    recipe's (tests/recipe/gcpo/test_config.py); every other file sets only what it changes, so that a changed
    default reaches it instead of leaving a stale copy that trains differently."""
    settings = yaml.safe_load((CONFIGS / name).read_text())
    defaults = {"credit": CreditConfig(), "encoder": EncoderConfig()}
    copies = [
        f"{block}.{key}: {value!r}"
        for block, values in settings.items()
        for key, value in values.items()
        if getattr(defaults[block], key) == value
    ]
    assert not copies, f"{name} repeats the defaults: {copies}"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_settings_file_is_valid(name):
    settings = yaml.safe_load((CONFIGS / name).read_text())
    CreditConfig(**(settings.get("credit") or {}))
    EncoderConfig(**(settings.get("encoder") or {}))
    assert settings_file_defaults(str(CONFIGS / name))


def test_file_settings_apply_and_flags_win(tmp_path):
    rollouts = tmp_path / "in.jsonl"
    rollouts.write_text(
        "".join(json.dumps({"group": "g", "reward": 1, "embedding": e}) + "\n" for e in ([1, 0], [1, 0], [0, 1]))
    )
    settings = tmp_path / "s.yaml"
    settings.write_text("credit:\n  method: loo\n")
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(rollouts), "-o", str(out), "--config", str(settings)]) == 0
    assert json.loads(out.read_text().splitlines()[0])["shapley"] == pytest.approx(0.4054651)  # LOO: log 1.5
    assert main(["credit", str(rollouts), "-o", str(out), "--config", str(settings), "--method", "exact"]) == 0
    assert json.loads(out.read_text().splitlines()[0])["shapley"] == pytest.approx(0.5493061)  # Shapley


def test_bad_settings_files_name_the_problem(tmp_path, capsys):
    rollouts = tmp_path / "in.jsonl"
    rollouts.write_text(json.dumps({"group": "g", "reward": 1, "embedding": [1, 0]}) + "\n")
    for text, message in (
        ("credit:\n  permutation: 8\n", "unknown credit key(s) ['permutation']"),
        ("solver: {}\n", "unknown block(s) ['solver']"),
        ("credit:\n  method: shap\n", 'bad.yaml: credit.method: must be one of auto, exact, mc, loo, got "shap"'),
        ("credit:\n  permutations: abc\n", "bad.yaml: credit.permutations: not a valid int, got 'abc'"),
        ("credit:\n  epsilon: .nan\n", "bad.yaml: credit.epsilon: must be a finite number > 0, got NaN"),
        ("encoder:\n  max_chunks: 2.5\n", "bad.yaml: encoder.max_chunks: must be an integer >= 1, got 2.5"),
    ):
        settings = tmp_path / "bad.yaml"
        settings.write_text(text)
        assert main(["credit", str(rollouts), "--config", str(settings)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert main(["credit", str(rollouts), "--config", str(tmp_path / "none.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_every_engine_and_encoder_field_has_a_flag_and_a_settings_key():
    import dataclasses

    from gcpo_core.cli.common import CREDIT_KEYS, ENCODER_KEYS

    assert set(CREDIT_KEYS) == {f.name for f in dataclasses.fields(CreditConfig)}
    assert set(ENCODER_KEYS) == {f.name for f in dataclasses.fields(EncoderConfig)}
