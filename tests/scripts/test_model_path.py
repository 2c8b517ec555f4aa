"""The policy model from shared storage: scripts/prepare_model.py (the start-up check of the path a run uses is
verl_preflight.machine.check_model_path, tested in tests/verl_preflight/test_machine.py)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# by path: verl installs a top-level `scripts` package of its own, which `import scripts.prepare_model` would find
_spec = importlib.util.spec_from_file_location("prepare_model", ROOT / "scripts" / "prepare_model.py")
prepare_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prepare_model)


def write_tiny_model(folder: Path) -> Path:
    """A real (tiny, random) Qwen2 checkpoint with a word-level tokenizer, as save_pretrained writes them."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"[UNK]": 0, "<|endoftext|>": 1, **{w: i + 2 for i, w in enumerate("two plus two is four".split())}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", eos_token="<|endoftext|>").save_pretrained(
        folder
    )
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("model"))


def test_a_complete_folder_passes_the_check_and_names_model_path(tiny_model, capsys):
    assert prepare_model.check_model_dir(tiny_model) == []
    assert prepare_model.main(["--check", str(tiny_model)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"MODEL_PATH={tiny_model.resolve()}"


def test_a_missing_weight_shard_is_named(tiny_model, tmp_path, capsys):
    folder = tmp_path / "sharded"
    folder.mkdir()
    for path in tiny_model.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    assert prepare_model.check_model_dir(folder) == [
        "weight shard model-00002-of-00002.safetensors (named in model.safetensors.index.json) is missing"
    ]
    assert prepare_model.main(["--check", str(folder)]) == 1
    assert "will not load on the nodes" in capsys.readouterr().err


def test_a_folder_transformers_cannot_read_is_refused(tiny_model, tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    for path in tiny_model.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "config.json").write_text('{"model_type": "no-such-architecture"}')
    problems = prepare_model.check_model_dir(folder)
    assert len(problems) == 1 and problems[0].startswith("AutoConfig cannot load it offline")
    assert prepare_model.check_model_dir(tmp_path / "absent") == [f"{tmp_path / 'absent'} is not a directory"]


def test_download_fetches_config_tokenizer_and_safetensors_into_the_folder_then_checks_it(
    tiny_model, tmp_path, monkeypatch, capsys
):
    calls = []

    def snapshot_download(**kwargs):
        calls.append(kwargs)
        Path(kwargs["local_dir"]).mkdir(parents=True)
        for path in tiny_model.iterdir():
            (Path(kwargs["local_dir"]) / path.name).write_bytes(path.read_bytes())
        return kwargs["local_dir"]

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    dest = tmp_path / "models" / "Qwen3-4B-Base"
    assert prepare_model.main(["Qwen/Qwen3-4B-Base", str(dest), "--revision", "abc123"]) == 0
    assert calls == [
        {
            "repo_id": "Qwen/Qwen3-4B-Base",
            "revision": "abc123",
            "local_dir": str(dest),
            "allow_patterns": prepare_model.ALLOW_PATTERNS,
        }
    ]
    assert "*.safetensors" in prepare_model.ALLOW_PATTERNS and "*.bin" not in prepare_model.ALLOW_PATTERNS
    assert capsys.readouterr().out.strip().endswith(f"MODEL_PATH={dest.resolve()}")


def test_download_with_the_hub_off_is_refused_before_trying(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert prepare_model.main(["Qwen/Qwen3-4B-Base", str(tmp_path / "m")]) == 2
    assert "run this where the hub is reachable" in capsys.readouterr().err and not (tmp_path / "m").exists()
