"""Rollout texts cut into the encoder's word pieces, as flat arrays, in this process or in worker processes.

A sentence encoder reads one piece of at most ``piece_length`` word pieces (254 for all-MiniLM-L6-v2, after
[CLS] and [SEP]). How a longer text becomes pieces is the long-text policy:

* ``chunk``: consecutive pieces over the whole text (the caller mean-pools them); beyond ``max_chunks`` pieces,
  evenly spaced ones;
* ``truncate``: the first piece;
* ``head_tail``: the first and last half-pieces joined.

Tokenising a training batch (8,192 responses) takes the Rust tokenizer a few tenths of a second of CPU, and
turning its output into Python objects holds the GIL, so a thread cannot overlap it with the GPU's forward
passes (measured: slower than no thread). :class:`PieceTokenizer` can instead run it in spawned worker
processes that hand back numpy arrays, chunk by chunk, while the caller embeds the chunks already done.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import warnings
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

LONG_TEXT_POLICIES = ("chunk", "truncate", "head_tail")
# Characters read per wanted token: word pieces average ~4 characters, so 8 per token keeps enough text
# while never tokenizing a whole 100k-character response for one 256-token piece.
CHARS_PER_TOKEN = 8
# Distinct texts tokenised per chunk, in this process / per task handed to a worker: the first chunk's latency
# is not overlapped with the GPU, so workers, which tokenise with fewer threads each, get smaller chunks.
TOKENIZE_CHUNK = 1024
WORKER_CHUNK = 256

Tokenize = Callable[[list[str]], list[list[int]]]


@dataclass(frozen=True)
class PieceRules:
    """How texts become pieces: ``piece_length`` word pieces each, ``long_text`` policy, ``max_chunks``."""

    piece_length: int
    long_text: str = "chunk"
    max_chunks: int = 16

    def __post_init__(self) -> None:
        if self.long_text not in LONG_TEXT_POLICIES:
            raise ValueError(f"long_text must be one of {list(LONG_TEXT_POLICIES)}, got {self.long_text!r}")
        if self.piece_length < 1 or self.max_chunks < 1:
            raise ValueError(f"piece_length and max_chunks must be >= 1, got {self.piece_length}, {self.max_chunks}")


@dataclass
class Pieces:
    """The word pieces of N texts.

    Attributes:
        ids: `(np.ndarray)` int32 (T,): every piece's token ids, end to end.
        lengths: `(np.ndarray)` int64 (P,): tokens per piece (0 for a text whose characters the tokenizer drops).
        owner: `(np.ndarray)` int64 (P,): the text each piece belongs to, in 0..N-1.
        long: `(np.ndarray)` bool (N,): the text is longer than one piece.
        truncated: `(np.ndarray)` bool (N,): some of the text is in no piece.
    """

    ids: np.ndarray
    lengths: np.ndarray
    owner: np.ndarray
    long: np.ndarray
    truncated: np.ndarray

    @staticmethod
    def concatenate(parts: Sequence[tuple[int, "Pieces"]]) -> "Pieces":
        """One :class:`Pieces` of several ``(first, pieces)`` chunks, owners shifted by each chunk's ``first``
        (the texts of the chunks are then indexed as in the list they were cut from)."""
        return Pieces(
            ids=np.concatenate([p.ids for _, p in parts]),
            lengths=np.concatenate([p.lengths for _, p in parts]),
            owner=np.concatenate([p.owner + first for first, p in parts]),
            long=np.concatenate([p.long for _, p in parts]),
            truncated=np.concatenate([p.truncated for _, p in parts]),
        )

    @property
    def offsets(self) -> np.ndarray:
        """int64 (P,): where each piece starts in ``ids``."""
        offsets = np.zeros(len(self.lengths), dtype=np.int64)
        np.cumsum(self.lengths[:-1], out=offsets[1:])
        return offsets


def windows_of(text: str, rules: PieceRules) -> tuple[list[str], str]:
    """Character windows to tokenize for ``text`` and how to cut their tokens: ``all`` (one window, or the
    head and tail windows) or ``each`` (one piece per window, for texts too long to tokenize whole)."""
    width = rules.piece_length * CHARS_PER_TOKEN
    if rules.long_text == "truncate":
        return [text[:width]], "all"
    if rules.long_text == "head_tail":
        return ([text] if len(text) <= 2 * width else [text[:width], text[-width:]]), "all"
    if len(text) <= rules.max_chunks * width:
        return [text], "all"
    starts = [round(k * (len(text) - width) / (rules.max_chunks - 1 or 1)) for k in range(rules.max_chunks)]
    return [text[s : s + width] for s in starts], "each"


def cut(token_lists: list[list[int]], mode: str, text_length: int, rules: PieceRules) -> tuple[list[list[int]], bool, bool]:
    """(pieces, long, truncated) of one text from the tokens of its windows (see :func:`windows_of`)."""
    length = rules.piece_length
    policy = rules.long_text
    if mode == "each":  # evenly spaced windows of a very long text: one piece from each
        return [ids[:length] for ids in token_lists if ids] or [[]], True, True
    if policy == "head_tail" and len(token_lists) == 2:
        head, tail = token_lists
        return [head[: length // 2] + tail[-(length - length // 2) :]], True, True
    ids = token_lists[0]
    long = len(ids) > length or (policy == "truncate" and text_length > length * CHARS_PER_TOKEN)
    if policy == "truncate":
        return [ids[:length]], long, long
    if policy == "head_tail":
        if len(ids) <= length:
            return [ids], False, False
        return [ids[: length // 2] + ids[-(length - length // 2) :]], True, True
    pieces = [ids[i : i + length] for i in range(0, len(ids), length)] or [[]]
    truncated = False
    if len(pieces) > rules.max_chunks:
        keep = [round(k * (len(pieces) - 1) / (rules.max_chunks - 1 or 1)) for k in range(rules.max_chunks)]
        pieces = [pieces[k] for k in sorted(set(keep))]
        truncated = True
    return pieces, long, truncated


def cut_into_pieces(texts: Sequence[str], tokenize: Tokenize, rules: PieceRules) -> Pieces:
    """Tokenize ``texts`` (one ``tokenize`` call for all their windows) and cut them into pieces.

    Args:
        texts: `(Sequence[str])` length N, non-empty texts.
        tokenize: windows -> token ids without special tokens.
        rules: the piece length and long-text policy.
    Returns:
        :class:`Pieces`; every text has at least one piece.
    """
    windows, owners, modes = [], [], []
    for u, text in enumerate(texts):
        text_windows, mode = windows_of(text, rules)
        windows += text_windows
        owners += [u] * len(text_windows)
        modes.append(mode)
    per_text: list[list[list[int]]] = [[] for _ in texts]
    for owner, ids in zip(owners, tokenize(windows) if windows else []):
        per_text[owner].append(ids)
    flat, lengths, piece_owner = [], [], []
    long = np.zeros(len(texts), dtype=bool)
    truncated = np.zeros(len(texts), dtype=bool)
    for u, (text, ids) in enumerate(zip(texts, per_text)):
        text_pieces, long[u], truncated[u] = cut(ids, modes[u], len(text), rules)
        for piece in text_pieces:
            flat += piece
            lengths.append(len(piece))
        piece_owner += [u] * len(text_pieces)
    return Pieces(
        ids=np.asarray(flat, dtype=np.int32),
        lengths=np.asarray(lengths, dtype=np.int64),
        owner=np.asarray(piece_owner, dtype=np.int64),
        long=long,
        truncated=truncated,
    )


def padded_rows(pieces: Pieces, rows: np.ndarray, prefix: Sequence[int], suffix: Sequence[int], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Model inputs ``[prefix] piece [suffix]``, right-padded, for the pieces ``rows`` (numpy throughout).

    Returns:
        (input_ids, attention_mask), int64 (len(rows), width).
    """
    lengths = pieces.lengths[rows]
    starts = pieces.offsets[rows]
    head, tail = len(prefix), len(suffix)
    longest = int(lengths.max()) if len(rows) else 0
    ids = np.full((len(rows), longest + head + tail), pad_id, dtype=np.int64)
    ids[:, :head] = np.asarray(prefix, dtype=np.int64)
    column = np.arange(longest)
    inside = column[None, :] < lengths[:, None]
    ids[:, head : head + longest][inside] = pieces.ids[(starts[:, None] + column[None, :])[inside]]
    every_row = np.arange(len(rows))
    for k, token in enumerate(suffix):
        ids[every_row, head + lengths + k] = token
    mask = (np.arange(ids.shape[1])[None, :] < (lengths + head + tail)[:, None]).astype(np.int64)
    return ids, mask


# What a normaliser does to ASCII text, as ``str.translate`` tables and ``str.lower``. BERT's "clean text" drops
# control characters and turns \t \n \r into spaces; Unicode normal forms and accent stripping leave ASCII as
# it is. Checked against the Rust normalisers on every ASCII character (tests).
_BERT_CLEAN_TEXT = {
    **{c: None for c in (*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)},
    **{c: " " for c in (0x09, 0x0A, 0x0D)},
}
_IDENTITY_ON_ASCII = ("NFC", "NFD", "NFKC", "NFKD", "StripAccents")
# Pre-tokenizers that split on characters alone. Others may read the character alignments that the normaliser
# keeps: Metaspace's "first" prepend scheme does, so dropping a leading control character in Python would change
# its output.
_SPLIT_ON_CHARACTERS_ALONE = ("BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits")


def ascii_normalizer(spec: Optional[dict]) -> Optional[Callable[[str], str]]:
    """The normaliser ``spec`` (a ``tokenizer.json`` "normalizer" entry) as a Python function that gives the same
    string for ASCII text, or None if this normaliser is not one whose effect on ASCII is known here."""
    if spec is None:
        return lambda text: text
    kind = spec.get("type")
    if kind == "BertNormalizer":
        clean, lower = spec.get("clean_text", True), spec.get("lowercase", True)
        if clean and lower:
            return lambda text: text.translate(_BERT_CLEAN_TEXT).lower()
        if clean:
            return lambda text: text.translate(_BERT_CLEAN_TEXT)
        return str.lower if lower else (lambda text: text)
    if kind == "Lowercase":
        return str.lower
    if kind in _IDENTITY_ON_ASCII:
        return lambda text: text
    if kind == "Sequence":
        steps = [ascii_normalizer(step) for step in spec.get("normalizers", [])]
        if any(step is None for step in steps):
            return None
        return lambda text: _apply(steps, text)
    return None


def _apply(steps: list[Callable[[str], str]], text: str) -> str:
    for step in steps:
        text = step(text)
    return text


def _splits_on_characters_alone(spec: Optional[dict]) -> bool:
    if spec is None:
        return True
    if spec.get("type") == "Sequence":
        return all(_splits_on_characters_alone(step) for step in spec.get("pretokenizers", []))
    return spec.get("type") in _SPLIT_ON_CHARACTERS_ALONE


class AsciiShortcut:
    """Tokenises ASCII windows with a copy of the tokenizer that has no normaliser, after normalising them in
    Python (:func:`ascii_normalizer`): the Rust normaliser keeps a character alignment for every output character
    and costs a quarter of tokenising's CPU time or more. Where the shortcut applies (:meth:`of`), the token ids
    are the same (tests: every ASCII character, random ASCII strings, real solutions, added tokens).

    Added tokens matched on the raw text (``normalized: false``, e.g. ``[CLS]``) are matched before the
    normaliser runs, so a window containing one, before or after normalising, is tokenised the usual way.
    There is no shortcut for a tokenizer whose pre-tokenizer may read character alignments, or that has an added
    token matched on normalised text (``normalized: true``) whose own text the normaliser changes: the Rust
    tokenizer looks for that token's normalised form, the copy would look for it as written.
    """

    def __init__(self, spec: dict, normalize: Callable[[str], str]):
        """``spec``: the tokenizer's JSON, as a dict; ``normalize``: its normaliser on ASCII text."""
        from tokenizers import Tokenizer

        self._bare = Tokenizer.from_str(json.dumps({**spec, "normalizer": None}))
        self._bare.no_truncation()
        self._bare.no_padding()
        self._bare_encode = getattr(self._bare, "encode_batch_fast", self._bare.encode_batch)
        self._normalize = normalize
        raw_tokens = [t["content"] for t in spec.get("added_tokens", []) if not t.get("normalized", False)]
        # one search for all of them: some tokenizers have hundreds
        self._raw_token = re.compile("|".join(map(re.escape, raw_tokens))) if raw_tokens else None

    @classmethod
    def of(cls, tokenizer) -> Optional["AsciiShortcut"]:
        """The shortcut for a ``tokenizers.Tokenizer`` (its copy tokenises without truncation or padding), or
        None when it would not give the same ids: no normaliser (nothing to skip), one whose effect on ASCII is
        not known, a pre-tokenizer that may read alignments, or a normalised added token that normalising
        changes."""
        spec = json.loads(tokenizer.to_str())
        normalize = ascii_normalizer(spec.get("normalizer"))
        if normalize is None or spec.get("normalizer") is None:
            return None
        if not _splits_on_characters_alone(spec.get("pre_tokenizer")):
            return None
        normalized_tokens = [t["content"] for t in spec.get("added_tokens", []) if t.get("normalized", False)]
        if any(tokenizer.normalizer.normalize_str(content) != content for content in normalized_tokens):
            return None
        return cls(spec, normalize)

    def _holds_raw_token(self, *texts: str) -> bool:
        return self._raw_token is not None and any(self._raw_token.search(text) for text in texts)

    def tokenize(self, windows: list[str], tokenize: Tokenize) -> list[list[int]]:
        """Token ids of ``windows``: the ASCII ones here, the others (and those holding a raw added token) by
        ``tokenize``."""
        fast_rows, fast_texts, slow_rows = [], [], []
        for row, window in enumerate(windows):
            normalized = self._normalize(window) if window.isascii() else None
            if normalized is None or self._holds_raw_token(window, normalized):
                slow_rows.append(row)
            else:
                fast_rows.append(row)
                fast_texts.append(normalized)
        ids: list[list[int]] = [[] for _ in windows]
        if fast_texts:
            for row, encoding in zip(fast_rows, self._bare_encode(fast_texts, add_special_tokens=False)):
                ids[row] = encoding.ids
        if slow_rows:
            for row, row_ids in zip(slow_rows, tokenize([windows[row] for row in slow_rows])):
                ids[row] = row_ids
        return ids


def rust_tokenize(backend, ascii_shortcut: bool = True) -> Tokenize:
    """Token ids from a ``tokenizers.Tokenizer`` (a private copy: its truncation and padding are turned off,
    since texts are cut here), without offsets when the library can skip them, and with :class:`AsciiShortcut`
    when its normaliser allows (``ascii_shortcut``)."""
    from tokenizers import Tokenizer

    own = Tokenizer.from_str(backend.to_str())
    own.no_truncation()
    own.no_padding()
    encode = getattr(own, "encode_batch_fast", own.encode_batch)

    def tokenize(windows: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in encode(windows, add_special_tokens=False)]

    shortcut = AsciiShortcut.of(own) if ascii_shortcut else None
    if shortcut is None:
        return tokenize
    return lambda windows: shortcut.tokenize(windows, tokenize)


def transformers_tokenize(tokenizer) -> Tokenize:
    """Token ids from a (slow) transformers tokenizer, without its "longer than the maximum" warning: long
    texts are cut into pieces here."""

    def tokenize(windows: list[str]) -> list[list[int]]:
        logger = logging.getLogger("transformers.tokenization_utils_base")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            return tokenizer(windows, add_special_tokens=False)["input_ids"]
        finally:
            logger.setLevel(level)

    return tokenize


# ---------------------------------------------------------------------------------------------- workers
_worker_tokenize: Optional[Tokenize] = None
_worker_rules: Optional[PieceRules] = None


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's or Slurm's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _start_worker(tokenizer_json: str, rules: PieceRules, threads: int, ascii_shortcut: bool) -> None:
    global _worker_tokenize, _worker_rules
    # the Rust tokenizer's thread pool reads this when it first runs: several processes of a few threads
    # each tokenise faster than one process of many (measured: 0.37 s vs 0.58 s for 8,192 texts, 16 CPUs)
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    from tokenizers import Tokenizer

    _worker_tokenize = rust_tokenize(Tokenizer.from_str(tokenizer_json), ascii_shortcut)
    _worker_rules = rules


def _worker_pieces(texts: list[str]) -> Pieces:
    return cut_into_pieces(texts, _worker_tokenize, _worker_rules)


def _worker_ready() -> bool:
    return _worker_tokenize is not None


class PieceTokenizer:
    """Cuts texts into pieces chunk by chunk, in this process (``workers=0``) or in ``workers`` spawned
    processes (a ``tokenizers`` Rust tokenizer only) of ``threads_per_worker`` tokenizer threads each (None: the
    usable CPUs less one, for the caller, shared out). ``ascii_shortcut``: see :class:`AsciiShortcut` (the same
    ids either way, since it turns itself off where it would not give them; off only to measure it).

    Worker processes are started once, with a copy of the tokenizer; if one dies, the chunks it owed are cut
    in this process (with a warning) and a new pool is started on the next call. Results are identical either
    way.
    """

    def __init__(
        self,
        tokenizer,
        rules: PieceRules,
        workers: int = 0,
        threads_per_worker: Optional[int] = None,
        chunk: Optional[int] = None,
        ascii_shortcut: bool = True,
    ):
        for name, value, low in (("workers", workers, 0), ("threads_per_worker", threads_per_worker, 1), ("chunk", chunk, 1)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.rules = rules
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None and hasattr(tokenizer, "encode_batch"):
            backend = tokenizer  # a tokenizers.Tokenizer itself
        self._tokenizer_json = backend.to_str() if backend is not None else None
        self._ascii_shortcut = ascii_shortcut
        if backend is not None:
            self._tokenize = rust_tokenize(backend, ascii_shortcut)
        else:
            self._tokenize = transformers_tokenize(tokenizer)
        if workers and backend is None:
            warnings.warn("tokenizer workers need a fast (Rust) tokenizer; tokenising in this process", RuntimeWarning)
            workers = 0
        self.workers = workers
        self.threads_per_worker = threads_per_worker or max(1, (usable_cpus() - 1) // max(workers, 1))
        self.chunk = chunk or (WORKER_CHUNK if workers else TOKENIZE_CHUNK)
        self._pool: Optional[ProcessPoolExecutor] = None
        if workers:
            self._start_pool()

    def _start_pool(self) -> None:
        self._pool = ProcessPoolExecutor(
            max_workers=self.workers,
            # spawn, not fork: the parent may hold CUDA state and a busy Rust thread pool
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(self._tokenizer_json, self.rules, self.threads_per_worker, self._ascii_shortcut),
        )
        for ready in [self._pool.submit(_worker_ready) for _ in range(self.workers)]:
            if not ready.result():
                raise RuntimeError("a tokenizer worker started without its tokenizer")

    def _drop_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _hand_out(self, texts: list[str], starts: range) -> list[Optional[Future]]:
        """Every chunk submitted to the workers; a pool whose worker died since the last call is started anew
        once, and if workers cannot be had, Nones (this process cuts)."""
        for _ in range(2):
            try:
                if self._pool is None:
                    self._start_pool()
                return [self._pool.submit(_worker_pieces, texts[s : s + self.chunk]) for s in starts]
            except BrokenProcessPool:
                warnings.warn("a tokenizer worker died since the last call; starting new workers", RuntimeWarning)
                self._drop_pool()
            except (OSError, RuntimeError) as err:
                self._drop_pool()
                warnings.warn(f"cannot start tokenizer workers ({err}); tokenising in this process", RuntimeWarning)
                return [None] * len(starts)
        warnings.warn("tokenizer workers keep dying; tokenising in this process", RuntimeWarning)
        return [None] * len(starts)

    def pieces(self, texts: Sequence[str]) -> Pieces:
        """All pieces of ``texts``, cut in this process."""
        return cut_into_pieces(list(texts), self._tokenize, self.rules)

    def chunks(self, texts: Sequence[str]) -> Iterator[tuple[int, Pieces]]:
        """(first, pieces of texts[first : first + chunk]) in order; with workers, every chunk is handed out at
        once and each is yielded as soon as it and those before it are done."""
        texts = list(texts)
        starts = range(0, len(texts), self.chunk)
        futures = self._hand_out(texts, starts) if self.workers and texts else [None] * len(starts)
        broken = False
        for first, future in zip(starts, futures):
            part = None
            if future is not None and not broken:
                try:
                    part = future.result()
                except BrokenProcessPool:
                    warnings.warn(
                        "a tokenizer worker died; tokenising the rest of this call in this process", RuntimeWarning
                    )
                    self._drop_pool()
                    broken = True
            yield first, part if part is not None else self.pieces(texts[first : first + self.chunk])

    def close(self) -> None:
        """Stop the worker processes (a later call starts them again)."""
        self._drop_pool()

    def __del__(self) -> None:
        try:
            self._drop_pool()
        except Exception:  # interpreter shutdown
            pass
