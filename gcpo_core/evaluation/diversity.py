"""Diversity of a set of solutions (e.g. the correct solutions of one problem).

Embedding-level: Vendi score (= effective rank: ``exp`` of the entropy of the normalised eigenvalues of the
cosine kernel; n identical solutions give 1, n orthogonal ones n), mean pairwise cosine, and the number of
solution clusters (average-linkage at a cosine threshold). Surface-level: distinct-n and self-BLEU (sacrebleu).
Surface and embedding metrics can disagree with approach-level diversity; report several.

The Vendi score is computed here (``torch.linalg.eigvalsh``) rather than with the ``vendi-score`` package: the
package is a 2022 source release around the same three-line formula.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from gcpo_core.credit.diagnostics import _exp_entropy


def _unit(embeddings) -> torch.Tensor:
    emb = torch.as_tensor(np.asarray(embeddings, dtype=np.float64))
    if emb.ndim != 2:
        raise ValueError(f"embeddings must be (n, d), got shape {tuple(emb.shape)}")
    return torch.nn.functional.normalize(emb, dim=-1)


def vendi_score(embeddings) -> float:
    """Effective number of distinct solutions: ``exp(H(eig(K / n)))`` with K the cosine kernel; 0 for none."""
    emb = _unit(embeddings)
    if emb.shape[0] == 0:
        return 0.0
    eigenvalues = torch.linalg.eigvalsh(emb @ emb.T / emb.shape[0]).clamp_min(0.0)
    return float(_exp_entropy(eigenvalues[None])[0])


def mean_pairwise_cosine(embeddings) -> float:
    """Mean cosine similarity over distinct pairs; NaN with fewer than two solutions."""
    emb = _unit(embeddings)
    n = emb.shape[0]
    if n < 2:
        return math.nan
    cos = emb @ emb.T
    return float((cos.sum() - cos.diagonal().sum()) / (n * (n - 1)))


def solution_clusters(embeddings, threshold: float = 0.9) -> int:
    """Clusters of solutions whose average cosine similarity is at least ``threshold`` (average linkage)."""
    emb = _unit(embeddings).numpy()
    n = emb.shape[0]
    if n <= 1:
        return n
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import pdist

    distances = np.clip(pdist(emb, metric="cosine"), 0.0, 2.0)
    return int(fcluster(linkage(distances, method="average"), t=1.0 - threshold, criterion="distance").max())


def distinct_n(texts: Sequence[str], n: int = 2) -> float:
    """Distinct n-grams over all n-grams of the texts (lower-cased whitespace tokens); NaN without n-grams."""
    grams = []
    for text in texts:
        tokens = text.lower().split()
        grams += [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else math.nan


def self_bleu(texts: Sequence[str]) -> float:
    """Mean sentence BLEU (0-100) of each text against all the others; NaN with fewer than two texts."""
    if len(texts) < 2:
        return math.nan
    from sacrebleu.metrics import BLEU

    bleu = BLEU(effective_order=True)
    scores = [
        bleu.sentence_score(texts[i], [t for j, t in enumerate(texts) if j != i]).score for i in range(len(texts))
    ]
    return float(np.mean(scores))


def diversity_metrics(texts: Sequence[str], embeddings=None, cluster_threshold: float = 0.9) -> dict[str, float]:
    """All of the above for one set of solutions (the embedding metrics only when ``embeddings`` are given)."""
    metrics = {}
    if embeddings is not None:
        metrics["vendi"] = vendi_score(embeddings)
        metrics["mean_cosine"] = mean_pairwise_cosine(embeddings)
        metrics["clusters"] = float(solution_clusters(embeddings, cluster_threshold))
    metrics["distinct_1"] = distinct_n(texts, 1)
    metrics["distinct_2"] = distinct_n(texts, 2)
    metrics["distinct_4"] = distinct_n(texts, 4)
    metrics["self_bleu"] = self_bleu(texts)
    return metrics
