import json
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from gcpo_core.word_pieces import (
    CHARS_PER_TOKEN,
    AsciiShortcut,
    PieceRules,
    Pieces,
    PieceTokenizer,
    ascii_normalizer,
    cut_into_pieces,
    padded_rows,
    rust_tokenize,
)

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
    return [pieces.ids[starts[p] : starts[p] + pieces.lengths[p]].tolist() for p in np.flatnonzero(pieces.owner == owner)]


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
    pieces = Pieces(ids=flat, lengths=lengths, owner=np.arange(12), long=np.zeros(12, bool), truncated=np.zeros(12, bool))
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
    for kwargs in ({"workers": -1}, {"workers": 1.5}, {"chunk": 0}, {"threads_per_worker": 0}, {"workers": True}):
        with pytest.raises(ValueError):
            PieceTokenizer(word_tokenizer, PieceRules(piece_length=4), **kwargs)
    with pytest.raises(ValueError):
        PieceRules(piece_length=4, long_text="middle")


def test_a_python_tokenizer_cannot_use_workers_and_says_so(minilm):
    class PythonOnly:  # a transformers "slow" tokenizer: callable, no Rust backend
        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[len(w) for w in t.split()] for t in texts]}

    with pytest.warns(RuntimeWarning, match="fast"):
        cutter = PieceTokenizer(PythonOnly(), PieceRules(piece_length=2), workers=2)
    assert cutter.workers == 0
    assert _pieces_of(cutter.pieces(["ab cde f"]), 0) == [[2, 3], [1]]


# ---------------------------------------------------------------------------------------------- workers
def _same(a: Pieces, b: Pieces) -> bool:
    return all(np.array_equal(getattr(a, n), getattr(b, n)) for n in ("ids", "lengths", "owner", "long", "truncated"))


@pytest.fixture(scope="module")
def math_texts():
    from gcpo_core.cli.demo import load_demo_rollouts

    texts = [r["text"] for r in load_demo_rollouts()]
    return [t * (1 + k % 4) for k, t in enumerate(texts * 8)]  # 120 texts, some past one piece


def test_worker_processes_cut_exactly_as_this_process_does(minilm, math_texts):
    rules = PieceRules(piece_length=32, max_chunks=3)
    local = PieceTokenizer(minilm.tokenizer, rules)
    pooled = PieceTokenizer(minilm.tokenizer, rules, workers=2, threads_per_worker=1, chunk=7)
    try:
        parts = list(pooled.chunks(math_texts))
        assert [first for first, _ in parts] == list(range(0, len(math_texts), 7))
        assert _same(Pieces.concatenate(parts), local.pieces(math_texts))
        assert list(pooled.chunks([])) == []
        # the workers' ASCII shortcut cuts as the Rust normaliser does
        usual = PieceTokenizer(minilm.tokenizer, rules, ascii_shortcut=False)
        assert _same(Pieces.concatenate(parts), usual.pieces(math_texts))
    finally:
        pooled.close()


def _kill_workers(cutter: PieceTokenizer) -> None:
    for process in list(cutter._pool._processes.values()):
        process.kill()
        process.join()


def _until_the_pool_knows_it_is_broken(cutter: PieceTokenizer, seconds: float = 30.0) -> None:
    # the executor notices a dead worker on its management thread, a moment after the death; a call made
    # before that finds out when a chunk fails (the "died during a call" path) instead
    deadline = time.monotonic() + seconds
    while not cutter._pool._broken:
        assert time.monotonic() < deadline, "the process pool never noticed its dead worker"
        time.sleep(0.01)


def test_a_worker_killed_during_a_call_costs_nothing_but_a_warning(minilm, math_texts):
    rules = PieceRules(piece_length=32)
    texts = math_texts * 10  # more chunks than the worker can finish before it is killed
    expected = PieceTokenizer(minilm.tokenizer, rules).pieces(texts)
    cutter = PieceTokenizer(minilm.tokenizer, rules, workers=1, threads_per_worker=1, chunk=1)
    try:
        chunks = cutter.chunks(texts)
        parts = [next(chunks)]
        _kill_workers(cutter)
        with pytest.warns(RuntimeWarning, match="died"):
            parts += list(chunks)
        assert _same(Pieces.concatenate(parts), expected)
        # the next call starts new workers
        assert _same(Pieces.concatenate(list(cutter.chunks(texts))), expected)
        assert cutter._pool is not None and all(p.is_alive() for p in cutter._pool._processes.values())
    finally:
        cutter.close()


def test_a_worker_that_died_between_calls_is_replaced(minilm, math_texts):
    rules = PieceRules(piece_length=32)
    expected = PieceTokenizer(minilm.tokenizer, rules).pieces(math_texts)
    cutter = PieceTokenizer(minilm.tokenizer, rules, workers=1, threads_per_worker=1)
    try:
        _kill_workers(cutter)
        _until_the_pool_knows_it_is_broken(cutter)
        with pytest.warns(RuntimeWarning, match="starting new workers"):
            parts = list(cutter.chunks(math_texts))
        assert _same(Pieces.concatenate(parts), expected)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _same(Pieces.concatenate(list(cutter.chunks(math_texts))), expected)
    finally:
        cutter.close()


def test_a_tokenizer_worker_does_not_import_torch():
    # workers are spawned and import gcpo_core.word_pieces: the package must not pull torch in with it
    code = "import sys, gcpo_core.word_pieces; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------- ASCII shortcut
def _ascii_strings(count: int, seed: int = 0) -> list[str]:
    """Every ASCII character between and beside letters, then random ASCII strings leaning to letters,
    digits, spaces, brackets and control characters."""
    every = [f"A{chr(c)}b {chr(c)}{chr(c)}Word{chr(c)}" for c in range(128)] + [chr(c) for c in range(128)]
    rng = np.random.default_rng(seed)
    alphabet = [chr(c) for c in range(128)] + list("aZ09 [](){}$\\^_") * 4
    random = ["".join(rng.choice(alphabet, size=rng.integers(0, 60))) for _ in range(count)]
    return every + random


def _with_normalizer(normalizer) -> Tokenizer:
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizer
    return tokenizer


KNOWN_ON_ASCII = {
    "bert": normalizers.BertNormalizer(),
    "bert, cased": normalizers.BertNormalizer(lowercase=False),
    "bert, no clean-up": normalizers.BertNormalizer(clean_text=False),
    "bert, neither": normalizers.BertNormalizer(clean_text=False, lowercase=False, strip_accents=False),
    "lowercase": normalizers.Lowercase(),
    "nfkc": normalizers.NFKC(),
    "nfd, strip accents, lowercase": normalizers.Sequence(
        [normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()]
    ),
    "nfc then bert": normalizers.Sequence([normalizers.NFC(), normalizers.BertNormalizer(lowercase=False)]),
}


@pytest.mark.parametrize("name", list(KNOWN_ON_ASCII))
def test_the_python_normalizer_equals_the_rust_one_on_ascii(name):
    rust = KNOWN_ON_ASCII[name]
    python = ascii_normalizer(json.loads(_with_normalizer(rust).to_str())["normalizer"])
    assert python is not None
    for text in _ascii_strings(300):
        assert python(text) == rust.normalize_str(text), repr(text)


def test_normalizers_not_known_on_ascii_get_no_shortcut():
    for rust in (
        normalizers.Replace("a", "b"),
        normalizers.Strip(),
        normalizers.Prepend("_"),
        normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(" ", "_")]),
    ):
        tokenizer = _with_normalizer(rust)
        assert ascii_normalizer(json.loads(tokenizer.to_str())["normalizer"]) is None
        assert AsciiShortcut.of(tokenizer) is None
    assert AsciiShortcut.of(_with_normalizer(None)) is None  # nothing to skip


def _tokenizers(minilm):
    backend = minilm.tokenizer.backend_tokenizer
    return rust_tokenize(backend), rust_tokenize(backend, ascii_shortcut=False)


def test_the_ascii_shortcut_gives_the_same_token_ids_as_the_rust_normalizer(minilm, math_texts):
    shortcut, usual = _tokenizers(minilm)
    raw_tokens = ["[CLS] x", "a[SEP]b", "[cls]", "[MASK]", "x [UNK]", "[PAD][pad]"]
    other = ["Janet\u2019s ducks", "\u221a2 \u2264 \u03c0", "\u6570\u5b66 math", "caf\u00e9 CAF\u00c9", ""]
    windows = _ascii_strings(2000, seed=1) + raw_tokens + other + math_texts
    windows = [windows[k] for k in np.random.default_rng(2).permutation(len(windows))]
    assert shortcut(windows) == usual(windows)


def test_the_shortcut_takes_plain_ascii_and_leaves_the_rest_to_the_rust_normalizer(minilm):
    shortcut = AsciiShortcut.of(minilm.tokenizer.backend_tokenizer)
    assert shortcut is not None
    sent = []

    def usual(windows):
        sent.extend(windows)
        return [[-1] for _ in windows]

    windows = ["Let $x = 2$.", "the [CLS] token", "\u221a2", "plain\tTEXT", "[mask]"]
    ids = shortcut.tokenize(windows, usual)
    assert sent == ["the [CLS] token", "\u221a2"]
    assert ids[1] == ids[2] == [-1] and all(ids[k] != [-1] for k in (0, 3, 4))


def test_the_shortcut_gives_the_same_token_ids_on_real_rollouts(minilm, shared_data):
    texts = []
    for path in sorted(shared_data.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            texts += [row[k] for k in ("problem", "solution") if isinstance(row.get(k), str)]
            texts += [r for r in row.get("responses") or [] if isinstance(r, str)]
    assert len(texts) > 1000 and sum(t.isascii() for t in texts) > len(texts) // 2
    shortcut, usual = _tokenizers(minilm)
    windows = [t[:2048] for t in texts]
    assert shortcut(windows) == usual(windows)


def test_an_added_token_that_only_normalising_reveals_is_left_to_the_rust_normalizer(minilm):
    # a cased BERT: "[CL\x07S]" becomes "[CLS]" only after the control character is dropped, which must not
    # make it the [CLS] token (raw added tokens are matched before normalising)
    cased = Tokenizer.from_str(minilm.tokenizer.backend_tokenizer.to_str())
    cased.normalizer = normalizers.BertNormalizer(lowercase=False)
    windows = ["[CL\x07S] x", "a[SE\x00P]b", "[MASK] y", "plain"]
    assert rust_tokenize(cased)(windows) == rust_tokenize(cased, ascii_shortcut=False)(windows)


def test_many_added_tokens_with_regex_characters_are_found_and_nothing_else(minilm):
    tokenizer = Tokenizer.from_str(minilm.tokenizer.backend_tokenizer.to_str())
    tokenizer.add_special_tokens(["<|im_start|>", "a.b", "(x)", "C++"] + [f"<|tool_{k}|>" for k in range(300)])
    windows = ["say <|im_start|> hi", "a.b c", "axb c", "f(x) = 1", "f x", "C++ code", "C code", "<|tool_299|>",
               "<|TOOL_7|>", "A.B", "plain [cls] text"]
    expected_slow = ["say <|im_start|> hi", "a.b c", "f(x) = 1", "C++ code", "<|tool_299|>", "<|TOOL_7|>", "A.B"]
    assert rust_tokenize(tokenizer)(windows) == rust_tokenize(tokenizer, ascii_shortcut=False)(windows)
    sent = []
    AsciiShortcut.of(tokenizer).tokenize(windows, lambda slow: sent.extend(slow) or [[] for _ in slow])
    assert sent == expected_slow


def test_an_added_token_that_normalising_changes_turns_the_shortcut_off(minilm):
    # normalised added tokens are looked for in their normalised form: "GCPO" as "gcpo"
    changed = Tokenizer.from_str(minilm.tokenizer.backend_tokenizer.to_str())
    changed.add_tokens(["GCPO", "caf\u00e9", "x\ty"])
    windows = ["GCPO rewards groups.", "gcpo", "cafe au lait", "x\ty", "x y"]
    assert AsciiShortcut.of(changed) is None
    assert rust_tokenize(changed)(windows) == rust_tokenize(changed, ascii_shortcut=False)(windows)
    # one that normalising leaves as it is keeps the shortcut, with the same ids
    unchanged = Tokenizer.from_str(minilm.tokenizer.backend_tokenizer.to_str())
    unchanged.add_tokens(["gcpo"])
    assert AsciiShortcut.of(unchanged) is not None
    windows += ["the GCPO and gcpo tokens"]
    assert rust_tokenize(unchanged)(windows) == rust_tokenize(unchanged, ascii_shortcut=False)(windows)


def test_a_pre_tokenizer_that_reads_alignments_turns_the_shortcut_off():
    # Metaspace "first" prepends its marker only where the text starts at the original offset 0: a dropped
    # leading control character moves that start
    vocab = [("[UNK]", -1.0)] + [(c, -1.0) for c in "abcdefghijklmnopqrstuvwxyz\u2581"]
    tokenizer = Tokenizer(models.Unigram(vocab, 0))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    assert AsciiShortcut.of(tokenizer) is None
    windows = ["\x01ab", "ab", "a\x01b c"]
    assert rust_tokenize(tokenizer)(windows) == rust_tokenize(tokenizer, ascii_shortcut=False)(windows)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits()])
    assert AsciiShortcut.of(tokenizer) is not None
    assert rust_tokenize(tokenizer)(windows) == rust_tokenize(tokenizer, ascii_shortcut=False)(windows)
