import json

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from gcpo_core.encoding.word_pieces import CHARS_PER_TOKEN, PieceRules, Pieces, PieceTokenizer, padded_rows

WORDS = [f"w{i}" for i in range(40)]


@pytest.fixture(scope="module")
def word_tokenizer() -> Tokenizer:
    """One token per whitespace-separated word: w0 -> 1, w1 -> 2, ... (0 is [UNK])."""
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def _text(count: int) -> str:
    return " ".join(WORDS[:count])


def _pieces_of(pieces: Pieces, owner: int) -> list[list[int]]:
    starts = pieces.offsets
    return [
        pieces.ids[starts[p] : starts[p] + pieces.lengths[p]].tolist() for p in np.flatnonzero(pieces.owner == owner)
    ]


def _cut(tokenizer, texts, **rules) -> Pieces:
    return PieceTokenizer(tokenizer, PieceRules(**rules)).pieces(texts)


def test_chunk_covers_the_whole_text_in_consecutive_pieces(word_tokenizer):
    pieces = _cut(word_tokenizer, [_text(10), _text(3)], piece_length=4)
    assert _pieces_of(pieces, 0) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    assert _pieces_of(pieces, 1) == [[1, 2, 3]]
    assert pieces.long.tolist() == [True, False] and pieces.truncated.tolist() == [False, False]


def test_chunk_beyond_max_chunks_keeps_evenly_spaced_pieces_including_both_ends(word_tokenizer):
    pieces = _cut(word_tokenizer, [_text(20)], piece_length=4, max_chunks=3)
    assert _pieces_of(pieces, 0) == [[1, 2, 3, 4], [9, 10, 11, 12], [17, 18, 19, 20]]
    assert pieces.truncated.tolist() == [True]


def test_truncate_and_head_tail(word_tokenizer):
    truncated = _cut(word_tokenizer, [_text(10)], piece_length=4, long_text="truncate")
    assert _pieces_of(truncated, 0) == [[1, 2, 3, 4]] and truncated.truncated.tolist() == [True]
    head_tail = _cut(word_tokenizer, [_text(10)], piece_length=4, long_text="head_tail")
    assert _pieces_of(head_tail, 0) == [[1, 2, 9, 10]] and head_tail.truncated.tolist() == [True]
    short = _cut(word_tokenizer, [_text(4)], piece_length=4, long_text="head_tail")
    assert _pieces_of(short, 0) == [[1, 2, 3, 4]] and short.truncated.tolist() == [False]


def test_a_text_too_long_to_tokenize_whole_is_read_in_evenly_spaced_windows(word_tokenizer):
    text = " ".join(WORDS[i % 40] for i in range(4 * 3 * CHARS_PER_TOKEN))  # longer than max_chunks windows
    pieces = _cut(word_tokenizer, [text], piece_length=4, max_chunks=3)
    assert len(_pieces_of(pieces, 0)) == 3 and pieces.truncated.tolist() == [True]
    assert all(0 < len(p) <= 4 for p in _pieces_of(pieces, 0))


def test_a_text_whose_characters_the_tokenizer_drops_gets_one_empty_piece(word_tokenizer):
    pieces = _cut(word_tokenizer, ["   ", _text(2)], piece_length=4)
    assert _pieces_of(pieces, 0) == [[]] and _pieces_of(pieces, 1) == [[1, 2]]


def test_padded_rows_frame_each_piece_with_special_tokens_and_pad_the_rest():
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 9, size=12)
    lengths[3] = 0
    flat = rng.integers(5, 100, size=int(lengths.sum())).astype(np.int32)
    pieces = Pieces(
        ids=flat, lengths=lengths, owner=np.arange(12), long=np.zeros(12, bool), truncated=np.zeros(12, bool)
    )
    rows = np.array([5, 3, 0, 11, 7])
    ids, mask = padded_rows(pieces, rows, prefix=[101], suffix=[102, 103], pad_id=0)
    starts = pieces.offsets
    width = int(lengths[rows].max()) + 3
    for r, p in enumerate(rows):
        expected = [101] + flat[starts[p] : starts[p] + lengths[p]].tolist() + [102, 103]
        assert ids[r].tolist() == expected + [0] * (width - len(expected))
        assert mask[r].tolist() == [1] * len(expected) + [0] * (width - len(expected))


def test_concatenated_chunks_index_the_texts_of_the_whole_list(word_tokenizer):
    texts = [_text(n) for n in (3, 9, 1, 6, 2)]
    cutter = PieceTokenizer(word_tokenizer, PieceRules(piece_length=4), chunk=2)
    parts = list(cutter.chunks(texts))
    assert [first for first, _ in parts] == [0, 2, 4]
    whole = cutter.pieces(texts)
    joined = Pieces.concatenate(parts)
    for name in ("ids", "lengths", "owner", "long", "truncated"):
        np.testing.assert_array_equal(getattr(joined, name), getattr(whole, name))


def test_the_model_tokenizer_is_left_untouched(minilm):
    backend = minilm.tokenizer.backend_tokenizer
    before = backend.to_str()
    PieceTokenizer(minilm.tokenizer, PieceRules(piece_length=8)).pieces(["a long enough text " * 20])
    assert backend.to_str() == before


def test_bad_settings_are_refused(word_tokenizer):
    for chunk in (0, 1.5, True):
        with pytest.raises(ValueError, match="chunk must be an integer"):
            PieceTokenizer(word_tokenizer, PieceRules(piece_length=4), chunk=chunk)
    with pytest.raises(ValueError):
        PieceRules(piece_length=4, long_text="middle")


def test_a_python_tokenizer_is_used_as_it_is(minilm):
    class PythonOnly:  # a transformers "slow" tokenizer: callable, no Rust backend
        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[len(w) for w in t.split()] for t in texts]}

    assert _pieces_of(PieceTokenizer(PythonOnly(), PieceRules(piece_length=2)).pieces(["ab cde f"]), 0) == [[2, 3], [1]]


def test_pieces_are_the_tokenizers_own_ids_on_real_text_as_written(minilm, shared_data):
    # problems, solutions and rollouts as written (case, LaTeX, Unicode): the pieces of a text, end to end, are
    # exactly what the model's tokenizer gives for it
    texts = []
    for name in ("math500.jsonl", "gsm8k_test.jsonl", "dapo_math_sample.jsonl", "rollout_groups.jsonl"):
        rows = [json.loads(line) for line in (shared_data / name).read_text(encoding="utf-8").splitlines()[:60]]
        texts += [str(r[k]) for r in rows for k in ("problem", "solution") if r.get(k)]
        texts += [str(text) for r in rows for text in r.get("responses", [])[:2]]
    rules = PieceRules(piece_length=minilm.piece_length, max_chunks=10_000)
    pieces = PieceTokenizer(minilm.tokenizer, rules, chunk=64).pieces(texts)
    for u in (0, 1, len(texts) // 2, len(texts) - 1, *range(2, len(texts), 37)):
        if len(texts[u]) > rules.max_chunks * rules.piece_length * CHARS_PER_TOKEN:
            continue
        own = minilm.tokenizer(texts[u], add_special_tokens=False)["input_ids"]
        assert sum(_pieces_of(pieces, u), []) == own, texts[u][:80]
