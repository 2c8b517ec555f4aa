"""The tiny policy: a Qwen3 checkpoint that transformers and verl's agent loop treat like the real one."""

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from tests.special_e2e.smoke.policy import IM_END, IM_START, TinyPolicySpec, build_policy, build_tokenizer


def test_the_checkpoint_is_a_few_million_parameter_qwen3_in_bf16(smoke_dir):
    model = AutoModelForCausalLM.from_pretrained(smoke_dir / "model")
    config = json.loads((smoke_dir / "model" / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["architectures"] == ["Qwen3ForCausalLM"]
    assert model.dtype == torch.bfloat16
    assert 1_000_000 < sum(p.numel() for p in model.parameters()) < 10_000_000
    tokenizer = AutoTokenizer.from_pretrained(smoke_dir / "model")
    assert model.config.vocab_size == len(tokenizer)  # never an id the tokenizer cannot decode
    assert model.config.eos_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids(IM_END)
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id


def test_the_tokenizer_renders_chatml_without_bert_wrapping(smoke_dir):
    tokenizer = AutoTokenizer.from_pretrained(smoke_dir / "model")
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 3 x 60?"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens[0] == IM_START and tokens[-3:] == [IM_START, "assistant", "\n"]
    assert "[CLS]" not in tokens and "[SEP]" not in tokens
    assert tokenizer.encode("what is 3", add_special_tokens=True) == tokenizer.encode(
        "what is 3", add_special_tokens=False
    )
    assert tokenizer.pad_token == "[PAD]" and tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True).split() == [
        "user",
        "what",
        "is",
        "3",
        "x",
        "60?",
        "assistant",
    ]


def test_verls_agent_loop_takes_its_qwen3_token_builder(smoke_dir):
    tokenizer = AutoTokenizer.from_pretrained(smoke_dir / "model")
    model_type = json.loads((smoke_dir / "model" / "config.json").read_text())["model_type"]
    builder = create_continuous_token_builder(tokenizer, hf_model_type=model_type)
    assert type(builder).__name__ == "QwenContinuousTokenBuilder"  # needs <|im_end|> and a one-token newline
    messages = [{"role": "user", "content": "hi"}]
    assert builder.build_initial_tokens(messages) == tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


def test_the_random_policy_generates_and_computes_a_loss(smoke_dir):
    tokenizer = AutoTokenizer.from_pretrained(smoke_dir / "model")
    model = AutoModelForCausalLM.from_pretrained(smoke_dir / "model", dtype=torch.float32)
    prompt = torch.tensor(
        [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": "1 + 1?"}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        ]
    )
    torch.manual_seed(0)
    out = model.generate(prompt, max_new_tokens=12, do_sample=True, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] > prompt.shape[1]
    loss = model(out, labels=out).loss
    assert torch.isfinite(loss)


def test_the_weights_are_a_function_of_the_seed_and_leave_the_global_rng_alone(tmp_path):
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    spec = TinyPolicySpec(num_hidden_layers=1)
    build_policy(tmp_path / "a", spec)
    assert torch.equal(torch.rand(1), expected_next)
    build_policy(tmp_path / "b", spec)
    build_policy(tmp_path / "c", TinyPolicySpec(num_hidden_layers=1, seed=1))
    data = {name: (tmp_path / name / "model.safetensors").read_bytes() for name in "abc"}
    assert data["a"] == data["b"] and data["a"] != data["c"]


def test_build_tokenizer_needs_no_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = build_tokenizer()
    assert tokenizer.encode("\n", add_special_tokens=False) == [tokenizer.convert_tokens_to_ids("\n")]


def test_the_parameter_count_is_the_built_models_and_the_qwen3_shapes_are_the_public_ones(smoke_dir):
    from dataclasses import replace

    from transformers import Qwen3Config, Qwen3ForCausalLM

    from tests.special_e2e.smoke.shapes import QWEN3_0_6B, QWEN3_1_7B, SHAPES, parameter_count

    model = AutoModelForCausalLM.from_pretrained(smoke_dir / "model")
    assert parameter_count(TinyPolicySpec(), model.config.vocab_size) == sum(p.numel() for p in model.parameters())
    # a Qwen3-0.6B layer as transformers builds it (two layers: the count is linear in them)
    spec = replace(QWEN3_0_6B, num_hidden_layers=2)
    config = Qwen3Config(
        vocab_size=1000,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        built = Qwen3ForCausalLM(config)
    assert parameter_count(spec, 1000) == sum(p.numel() for p in built.parameters())
    # with Qwen's 151,936-token vocabulary, the public sizes: 0.6B (0.44B without embeddings) and 1.7B (1.4B)
    assert 0.59e9 < parameter_count(QWEN3_0_6B, 151_936) < 0.61e9
    assert 0.43e9 < parameter_count(QWEN3_0_6B, 151_936) - 151_936 * 1024 < 0.45e9
    assert 1.70e9 < parameter_count(QWEN3_1_7B, 151_936) < 1.75e9
    assert SHAPES["tiny"].spec == TinyPolicySpec() and SHAPES["tiny"].resume
    assert not SHAPES["qwen3-0.6b"].resume and SHAPES["qwen3-0.6b"].n_resp == 16
