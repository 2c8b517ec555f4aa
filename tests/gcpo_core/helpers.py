"""Reference implementations written straight from the definitions, independent of gcpo_core's algorithms."""

import itertools
import math

import numpy as np


def team_value_np(L: np.ndarray, members) -> float:
    members = list(members)
    if not members:
        return 0.0
    sub = L[np.ix_(members, members)]
    sign, logdet = np.linalg.slogdet(np.eye(len(members)) + sub)
    assert sign > 0
    return float(logdet)


def brute_force_shapley(L: np.ndarray) -> np.ndarray:
    """phi_i = sum over coalitions S without i of |S|! (n-|S|-1)! / n! * (V(S + i) - V(S))."""
    n = L.shape[0]
    phi = np.zeros(n)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            for coalition in itertools.combinations(others, size):
                phi[i] += weight * (team_value_np(L, coalition + (i,)) - team_value_np(L, coalition))
    return phi


def clustered_embeddings(rng: np.random.Generator, groups: int, size: int, dim: int = 32, spread: float = 0.4):
    """Unit embeddings: a shared centre per group, a few sub-clusters, small noise (realistic redundancy)."""
    centre = rng.normal(size=(groups, 1, dim))
    clusters = rng.normal(size=(groups, 3, dim)) * spread
    pick = rng.integers(0, 3, size=(groups, size))
    noise = rng.normal(size=(groups, size, dim)) * spread * 0.5
    emb = centre + np.take_along_axis(clusters, pick[..., None], axis=1) + noise
    return emb / np.linalg.norm(emb, axis=-1, keepdims=True)


def one_cluster_embeddings(rng: np.random.Generator, groups: int, size: int, dim: int = 384, cosine: float = 0.85):
    """Unit embeddings of a group whose rollouts all sit in one tight cluster: a shared centre plus independent
    noise sized for a mean pairwise cosine of ``cosine`` (every rollout a near-duplicate of the others; no outlier,
    no exact copy)."""
    sigma = np.sqrt((1.0 / cosine - 1.0) / dim)
    centre = rng.normal(size=(groups, 1, dim))
    centre /= np.linalg.norm(centre, axis=-1, keepdims=True)
    emb = centre + rng.normal(size=(groups, size, dim)) * sigma
    return emb / np.linalg.norm(emb, axis=-1, keepdims=True)


def real_like_embeddings(rng: np.random.Generator, groups: int, size: int, dim: int = 64):
    """Unit embeddings like a group of real rollouts of one problem (mean pairwise cosine about 0.88): two or
    three tight clusters around a shared centre, a near-duplicate of the first rollout, and one outlier."""
    out = []
    for _ in range(groups):
        centre = rng.normal(size=dim)
        centre /= np.linalg.norm(centre)
        clusters = centre + rng.normal(size=(int(rng.integers(2, 4)), dim)) * 0.045
        emb = clusters[rng.integers(0, len(clusters), size=size)] + rng.normal(size=(size, dim)) * 0.02
        emb[rng.integers(1, size - 1)] = emb[0] + rng.normal(size=dim) * 0.01
        emb[-1] = centre + rng.normal(size=dim) * 0.1
        out.append(emb / np.linalg.norm(emb, axis=-1, keepdims=True))
    return np.stack(out)
