import numpy as np
import pytest
import torch

from gcpo_core.credit.kernels import compute_kernel, cosine_kernel, median_bandwidth, rbf_kernel


def _random(groups=3, size=5, dim=8, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(groups, size, dim)))


@pytest.mark.parametrize("name", ["cosine", "rbf"])
def test_kernels_are_psd_symmetric_with_unit_diagonal(name):
    emb = _random()
    mask = torch.ones(3, 5, dtype=torch.bool)
    K = compute_kernel(name, emb, mask)
    assert K.dtype == torch.float64
    torch.testing.assert_close(K, K.transpose(-1, -2))
    torch.testing.assert_close(torch.diagonal(K, dim1=-2, dim2=-1), torch.ones(3, 5, dtype=torch.float64))
    assert torch.linalg.eigvalsh(K).min() > -1e-10


def test_cosine_ignores_scale_and_matches_normalised_dot_products():
    emb = _random()
    mask = torch.ones(3, 5, dtype=torch.bool)
    K = cosine_kernel(emb * 7.5, mask)
    unit = emb / emb.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(K, unit @ unit.transpose(-1, -2))


def test_padding_slots_are_ignored_even_when_garbage():
    emb = _random()
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False
    emb[1, 3:] = float("nan")
    for name in ("cosine", "rbf"):
        K = compute_kernel(name, emb, mask)
        assert torch.isfinite(K).all()
        assert torch.all(K[1, 3:] == 0) and torch.all(K[1, :, 3:] == 0)


@pytest.mark.parametrize("name", ["cosine", "rbf"])
def test_non_finite_and_zero_embeddings_are_rejected(name):
    mask = torch.ones(1, 3, dtype=torch.bool)
    emb = _random(1, 3)
    emb[0, 1, 2] = float("inf")
    with pytest.raises(ValueError, match="NaN or inf in 1 rollout"):
        compute_kernel(name, emb, mask)
    emb = _random(1, 3)
    emb[0, 2] = 0.0
    with pytest.raises(ValueError, match="zero norm in 1 rollout"):
        compute_kernel(name, emb, mask)


def test_rbf_median_heuristic_and_explicit_bandwidth():
    emb = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    # distances: sqrt(2), 2, sqrt(2) -> median sqrt(2)
    K = rbf_kernel(emb, mask)
    assert float(K[0, 0, 1]) == pytest.approx(np.exp(-2 / (2 * 2)))
    K = rbf_kernel(emb, mask, bandwidth=1.0)
    assert float(K[0, 0, 2]) == pytest.approx(np.exp(-4 / 2))
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        rbf_kernel(emb, mask, bandwidth=0.0)


def test_median_bandwidth_of_duplicates_only_falls_back_to_one():
    sq = torch.zeros(1, 3, 3, dtype=torch.float64)
    assert median_bandwidth(sq, torch.ones(1, 3, dtype=torch.bool)) == 1.0
    assert median_bandwidth(sq, torch.tensor([[True, False, False]])) == 1.0


def test_shape_mismatch_is_rejected():
    with pytest.raises(ValueError, match=r"\(B, G, d\)"):
        cosine_kernel(torch.ones(3, 4), torch.ones(3, dtype=torch.bool))


def test_rbf_median_bandwidth_ignores_duplicate_pairs_in_a_mostly_duplicate_batch():
    # 80 % of the rollouts are copies: the median over all pairs is a duplicate's rounding noise (~1e-8), which
    # makes every distinct pair look orthogonal; the median over distinct pairs is the real spread
    rng = np.random.default_rng(0)
    groups, size = 4, 10
    centres = rng.normal(size=(groups, 1, 16))
    distinct = centres + 0.5 * rng.normal(size=(groups, 3, 16))
    emb = torch.from_numpy(np.concatenate([np.repeat(distinct[:, :1], 8, axis=1), distinct[:, 1:]], axis=1))
    mask = torch.ones(groups, size, dtype=torch.bool)
    unit = emb / emb.norm(dim=-1, keepdim=True)
    pairs = [(g, i, j) for g in range(groups) for i, j in [(0, 8), (0, 9), (8, 9)]]
    distances = torch.stack([(unit[g, i] - unit[g, j]).norm() for g, i, j in pairs])
    K = rbf_kernel(emb, mask)
    sigma = float(distances.median())
    assert float(K[0, 0, 8]) == pytest.approx(
        float(torch.exp(-((unit[0, 0] - unit[0, 8]).norm() ** 2) / (2 * sigma**2)))
    )
    assert float(K[0, 0, 8]) > 0.2  # not "orthogonal"
    assert torch.all(K[:, :8, :8] == 1.0)  # copies are identical to each other


def test_rbf_with_a_vanishing_bandwidth_gives_the_identity_not_a_linalg_error():
    from gcpo_core.credit.compute import compute_credit
    from gcpo_core.credit.config import CreditConfig

    emb = _random(1, 5).reshape(5, -1)
    emb[3] = emb[1]
    K = rbf_kernel(emb[None], torch.ones(1, 5, dtype=torch.bool), bandwidth=1e-300)
    expected = torch.eye(5, dtype=torch.float64)
    expected[1, 3] = expected[3, 1] = 1.0
    torch.testing.assert_close(K[0], expected, rtol=0, atol=0)
    result = compute_credit([1.0] * 5, emb, ["g"] * 5, CreditConfig(kernel="rbf", rbf_bandwidth=1e-300))
    assert torch.isfinite(result.advantage).all()


@pytest.mark.parametrize("scale", [1e154, 1e300, 1e-12, 1e-200, 1e-310])
@pytest.mark.parametrize("name", ["cosine", "rbf"])
def test_embedding_scale_does_not_matter_huge_or_tiny(name, scale):
    emb = _random()
    mask = torch.ones(3, 5, dtype=torch.bool)
    reference = compute_kernel(name, emb, mask)
    torch.testing.assert_close(compute_kernel(name, emb * scale, mask), reference, rtol=0, atol=1e-12)


def test_only_true_zero_rows_are_rejected_as_zero():
    emb = _random(1, 3)
    emb[0, 1] = 0.0
    emb[0, 1, 0] = 5e-324  # the smallest subnormal: a direction, however tiny
    K = cosine_kernel(emb, torch.ones(1, 3, dtype=torch.bool))
    assert float(K[0, 1, 1]) == 1.0
