import numpy as np
import pytest
import torch

from gcpo_core.kernels import compute_kernel, cosine_kernel, median_bandwidth, rbf_kernel


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
