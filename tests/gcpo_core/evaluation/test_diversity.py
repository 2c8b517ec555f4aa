import math

import numpy as np
import pytest

from gcpo_core.evaluation.diversity import (
    distinct_n,
    diversity_metrics,
    mean_pairwise_cosine,
    self_bleu,
    solution_clusters,
    vendi_score,
)


def test_identical_solutions_have_minimum_diversity():
    texts = ["add 3 and 4 to get 7"] * 4
    emb = np.tile(np.array([[0.3, 0.4, 0.5]]), (4, 1))
    metrics = diversity_metrics(texts, emb)
    assert metrics["vendi"] == pytest.approx(1.0)
    assert metrics["mean_cosine"] == pytest.approx(1.0)
    assert metrics["clusters"] == 1
    assert metrics["self_bleu"] == pytest.approx(100.0)
    assert metrics["distinct_2"] == pytest.approx(0.25)  # the same 6 bigrams four times


def test_orthogonal_solutions_have_maximum_diversity():
    emb = np.eye(5)
    assert vendi_score(emb) == pytest.approx(5.0)
    assert mean_pairwise_cosine(emb) == pytest.approx(0.0)
    assert solution_clusters(emb) == 5
    texts = ["alpha beta gamma", "delta epsilon zeta", "eta theta iota"]
    assert distinct_n(texts, 1) == 1.0 and self_bleu(texts) == pytest.approx(0.0)


def test_two_clusters_of_copies():
    a, b = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    emb = np.stack([a, a, a, b])
    assert solution_clusters(emb) == 2
    # eigenvalues of K/4 are 3/4 and 1/4
    expected = math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert vendi_score(emb) == pytest.approx(expected)


def test_degenerate_inputs_give_defined_results():
    assert vendi_score(np.zeros((0, 3))) == 0.0
    assert vendi_score(np.ones((1, 3))) == pytest.approx(1.0)
    assert math.isnan(mean_pairwise_cosine(np.ones((1, 3))))
    assert math.isnan(self_bleu(["only one"]))
    assert math.isnan(distinct_n(["one"], 2))
    assert solution_clusters(np.zeros((0, 2))) == 0
    with pytest.raises(ValueError, match=r"\(n, d\)"):
        vendi_score(np.ones(3))
