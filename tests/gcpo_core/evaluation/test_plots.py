"""The figures' details a reader depends on: every k ticked, whole-number steps, zero advantages drawn, all-wrong
groups said."""

import numpy as np
import pytest

from gcpo_core.evaluation import plots


@pytest.fixture
def figures(monkeypatch):
    """The figures the plotting functions make, kept open instead of saved."""
    kept = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, tight=True: kept.append(fig) or path)
    yield kept
    for fig in kept:
        plots.plt.close(fig)


def _texts(ax):
    return [text.get_text() for text in ax.texts]


def test_pass_at_k_ticks_every_k_of_a_few_samples(figures, tmp_path):
    results = {"gcpo": {"aime": {"pass@1": 0.2, "pass@2": 0.3, "pass@3": 0.35, "pass@4": 0.4, "avg@4": 0.2}}}
    plots.pass_at_k_curves(results, "aime", tmp_path / "p.png")
    (ax,) = figures[0].axes
    assert list(ax.get_xticks()) == [1, 2, 3, 4]  # k = 3 had no tick (the powers of two and the largest only)
    many = {"gcpo": {"aime": {f"pass@{k}": k / 32 for k in range(1, 33)}}}
    plots.pass_at_k_curves(many, "aime", tmp_path / "q.png")
    assert list(figures[1].axes[0].get_xticks()) == [1, 2, 4, 8, 16, 32]


def test_steps_are_ticked_in_whole_numbers(figures, tmp_path):
    plots.metrics_over_steps({"gcpo/groups": {1: 3.0, 2: 3.0, 3: 2.0}}, tmp_path / "s.png")
    ticks = figures[0].axes[0].get_xticks()
    assert len(ticks) and all(float(t).is_integer() for t in ticks)


def test_zero_advantages_are_drawn_and_an_all_correct_group_says_grpo_is_zero(figures, tmp_path):
    kernel = np.array([[1.0, 0.3], [0.3, 1.0]])
    plots.group_credit(kernel, ["0", "1"], [0.5, 0.4], [0.1, -0.1], [0.0, 0.0], "all correct", tmp_path / "g.png")
    right = figures[0].axes[2]
    grpo_markers = right.collections[0].get_offsets()
    assert np.allclose(np.asarray(grpo_markers)[:, 0], 0.0) and len(grpo_markers) == 2  # visible at 0
    assert "GRPO: 0 for every rollout" in _texts(right)


def test_an_all_wrong_group_says_so_instead_of_empty_axes(figures, tmp_path):
    kernel = np.eye(3)
    plots.group_credit(
        kernel, ["0", "1", "2"], [0.0] * 3, [0.0] * 3, [0.0] * 3, "all wrong", tmp_path / "w.png", all_wrong=True
    )
    _, middle, right = figures[0].axes[:3]
    assert "all wrong: no credit" in _texts(middle) and "all wrong: no credit" in _texts(right)
    assert "GRPO: 0 for every rollout" not in _texts(right)
