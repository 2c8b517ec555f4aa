"""Figures for ``gcpo eval`` and ``gcpo report`` (matplotlib, no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def _save(fig, path: Path, tight: bool = True) -> Path:
    """``tight``: cropped to what was drawn (the size then depends on the content); else the figure's own size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight" if tight else None)
    plt.close(fig)
    return path


def pass_at_k_curves(results: Mapping[str, Mapping[str, Mapping[str, float]]], benchmark: str, path: Path) -> Path:
    """pass@k against k (log scale) for every run on one benchmark."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for run, benchmarks in results.items():
        metrics = benchmarks.get(benchmark)
        if not metrics:
            continue
        ks = sorted(int(key.split("@")[1]) for key in metrics if key.startswith("pass@"))
        ax.plot(ks, [100 * metrics[f"pass@{k}"] for k in ks], marker="o", label=run)
    ax.set_xscale("log", base=2)
    every_k = sorted(
        {int(key.split("@")[1]) for m in results.values() for key in m.get(benchmark, {}) if key.startswith("pass@")}
    ) or [1]
    largest = every_k[-1]
    # every k while there are few (k = 3 of three samples has a tick), else the powers of two and the largest
    ticks = every_k if len(every_k) <= 8 else sorted({2**i for i in range(int(math.log2(largest)) + 1)} | {largest})
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (%)")
    ax.set_title(f"{benchmark}: pass@k")
    ax.grid(alpha=0.3)
    if ax.lines:  # a legend of nothing is matplotlib's warning
        ax.legend()
    return _save(fig, path)


def accuracy_vs_diversity(
    results: Mapping[str, Mapping[str, Mapping[str, float]]], diversity_key: str, path: Path
) -> Path:
    """One point per (run, benchmark): accuracy (avg@k) against a diversity metric of the correct solutions."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    markers = "osD^vP*X"
    benchmarks = sorted({b for run in results.values() for b in run})
    for i, (run, per_benchmark) in enumerate(results.items()):
        for j, benchmark in enumerate(benchmarks):
            metrics = per_benchmark.get(benchmark)
            if not metrics or math.isnan(metrics.get(diversity_key, math.nan)):
                continue
            accuracy = next(v for k, v in metrics.items() if k.startswith("avg@"))
            ax.scatter(
                metrics[diversity_key],
                100 * accuracy,
                marker=markers[j % len(markers)],
                color=f"C{i}",
                label=f"{run} / {benchmark}",
            )
    ax.set_xlabel(diversity_key.replace("correct_", "diversity of correct solutions: "))
    ax.set_ylabel("accuracy, avg@k (%)")
    ax.grid(alpha=0.3)
    if ax.collections:
        ax.legend(fontsize=7)
    else:  # the diversity of correct solutions needs a problem with two or more of them
        ax.text(
            0.5,
            0.5,
            "no point: no run has a problem with\ntwo or more correct solutions",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="0.3",
        )
    return _save(fig, path)


def group_credit(
    kernel: np.ndarray,
    labels: Sequence[str],
    shapley: Sequence[float],
    gcpo: Sequence[float],
    grpo: Sequence[float],
    title: str,
    path: Path,
    all_wrong: bool = False,
    rows: Optional[int] = None,
) -> Path:
    """A group's kernel heatmap beside its Shapley credit and the GCPO vs GRPO advantages of each rollout. A zero
    advantage is drawn as a marker on the axis (a bar of length 0 would not show); an all-wrong group's credit and
    advantage panels say so instead of standing empty. ``rows``: a fixed size, that of a group of ``rows`` rollouts,
    so that the pictures of groups of different sizes line up (W&B shows the images of one key at one size)."""
    n = len(labels)
    fig, (left, middle, right) = plt.subplots(
        1,
        3,
        figsize=(13, 0.35 * max(n, rows or 0) + 2.5),
        gridspec_kw={"width_ratios": [1.1, 1, 1]},
        constrained_layout=True,
    )
    # colour range from the smallest similarity, so that near-copies stand out among similar solutions
    image = left.imshow(kernel, vmin=float(np.floor(np.min(kernel) * 10) / 10), vmax=1.0, cmap="viridis")
    if n <= 12:
        for i in range(n):
            for j in range(n):
                left.text(j, i, f"{kernel[i, j]:.2f}", ha="center", va="center", fontsize=6, color="white")
    left.set_xticks(range(n), [str(i) for i in range(n)], fontsize=7)
    left.set_yticks(range(n), labels, fontsize=7)
    left.set_title("similarity (kernel)")
    fig.colorbar(image, ax=left, fraction=0.046)
    y = np.arange(n)
    middle.barh(y, shapley, color="C2")
    middle.set_yticks(y, [str(i) for i in range(n)], fontsize=7)
    middle.invert_yaxis()
    middle.set_title("Shapley credit (nats)")
    right.barh(y - 0.2, grpo, height=0.4, color="C7", label="GRPO")
    right.barh(y + 0.2, gcpo, height=0.4, color="C0", label="GCPO")
    # the bars' ends as markers, so that an advantage of 0 (every GRPO bar of an all-correct group) still shows
    right.scatter(grpo, y - 0.2, marker="o", s=16, color="C7", zorder=3)
    right.scatter(gcpo, y + 0.2, marker="o", s=16, color="C0", zorder=3)
    right.axvline(0, color="black", linewidth=0.6)
    right.set_yticks(y, [str(i) for i in range(n)], fontsize=7)
    right.invert_yaxis()
    right.set_title("advantage")
    right.legend(fontsize=7)
    if all_wrong:
        for ax in (middle, right):
            ax.text(
                0.5,
                0.5,
                "all wrong: no credit",
                transform=ax.transAxes,
                ha="center",
                va="center",
                fontsize=10,
                color="0.3",
            )
    elif n and not np.any(np.asarray(grpo, dtype=float)):
        right.text(0.02, 0.02, "GRPO: 0 for every rollout", transform=right.transAxes, fontsize=7, color="C7")
    fig.suptitle(title, fontsize=9)
    return _save(fig, path, tight=rows is None)


def metrics_over_steps(series: Mapping[str, Mapping[int, float]], path: Path, title: Optional[str] = None) -> Path:
    """Small multiples: one panel per metric, value against training step."""
    names = list(series)
    cols = min(3, max(1, len(names)))
    rows = math.ceil(len(names) / cols) if names else 1
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False, constrained_layout=True)
    for ax, name in zip(axes.flat, names):
        steps = sorted(series[name])
        ax.plot(steps, [series[name][s] for s in steps], marker="o", markersize=3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.set_title(name, fontsize=8)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    return _save(fig, path)
