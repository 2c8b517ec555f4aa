"""Rollout texts cut into the encoder's word pieces, as flat arrays.

A sentence encoder reads one piece of at most ``piece_length`` word pieces (254 for all-MiniLM-L6-v2, after
[CLS] and [SEP]). How a longer text becomes pieces is the long-text policy:

* ``chunk``: consecutive pieces over the whole text (the caller mean-pools them); beyond ``max_chunks`` pieces,
  evenly spaced ones;
* ``truncate``: the first piece;
* ``head_tail``: the first and last half-pieces joined.

Tokenising is the tokenizers library's own batch encoding (Rust, parallel, the GIL released). A process pool
of tokenizer workers and a Python copy of the BERT normaliser for ASCII text were measured against it and removed
(docs/benchmarks.md, "Tokenising"): they were no faster on the GPU machine's 16 cores, and a pool of spawned
processes broke scripts that build an encoder at module top level.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

LONG_TEXT_POLICIES = ("chunk", "truncate", "head_tail")
# Characters read per wanted token: word pieces average ~4 characters, so 8 per token keeps enough text
# while never tokenizing a whole 100k-character response for one 256-token piece.
CHARS_PER_TOKEN = 8
# Distinct texts tokenised per chunk: the first chunk's latency is not overlapped with the GPU's forward passes.
TOKENIZE_CHUNK = 1024

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


def cut(
    token_lists: list[list[int]], mode: str, text_length: int, rules: PieceRules
) -> tuple[list[list[int]], bool, bool]:
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


def padded_rows(
    pieces: Pieces, rows: np.ndarray, prefix: Sequence[int], suffix: Sequence[int], pad_id: int
) -> tuple[np.ndarray, np.ndarray]:
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


def rust_tokenize(backend) -> Tokenize:
    """Token ids from a ``tokenizers.Tokenizer``: its own batch encoding, in Rust threads with the GIL released
    (``RAYON_NUM_THREADS`` of them; the credit actor sets it from the CPUs Ray reserved for it), on a private copy
    with truncation and padding off (texts are cut here), without offsets when the library can skip them."""
    from tokenizers import Tokenizer

    own = Tokenizer.from_str(backend.to_str())
    own.no_truncation()
    own.no_padding()
    encode = getattr(own, "encode_batch_fast", own.encode_batch)

    def tokenize(windows: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in encode(windows, add_special_tokens=False)]

    return tokenize


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


class PieceTokenizer:
    """Cuts texts into pieces, all at once or chunk by chunk, with a ``tokenizers`` Rust tokenizer (its batch
    encoding is parallel) or, failing one, a transformers tokenizer."""

    def __init__(self, tokenizer, rules: PieceRules, chunk: Optional[int] = None):
        if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
            raise ValueError(f"chunk must be an integer >= 1, got {chunk!r}")
        self.rules = rules
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None and hasattr(tokenizer, "encode_batch"):
            backend = tokenizer  # a tokenizers.Tokenizer itself
        self._tokenize = rust_tokenize(backend) if backend is not None else transformers_tokenize(tokenizer)
        self.chunk = chunk or TOKENIZE_CHUNK

    def pieces(self, texts: Sequence[str]) -> Pieces:
        """All pieces of ``texts``."""
        return cut_into_pieces(list(texts), self._tokenize, self.rules)

    def chunks(self, texts: Sequence[str]) -> Iterator[tuple[int, Pieces]]:
        """(first, pieces of texts[first : first + chunk]) in order, each cut when it is asked for (so that a
        caller can queue a chunk's forward passes on the GPU before the next one is cut)."""
        texts = list(texts)
        for first in range(0, len(texts), self.chunk):
            yield first, self.pieces(texts[first : first + self.chunk])
