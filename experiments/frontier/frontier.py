"""From simulated runs to the frontier: per-arm summaries, gaps at matched accuracy, the figure.

A *frontier* here is, for one credit shape, the curve its doses trace in (accuracy, distinct correct answers),
starting at GRPO (dose 0) and ending at the credit alone (``pure``). Two shapes are compared **at matched
accuracy**: for each seed, each curve is interpolated linearly in accuracy (points sorted by accuracy) on a grid
spanning the accuracies both curves reach in the seeds' means, the gap in distinct correct answers is averaged over
the grid, and the seeds' gaps give a mean and a Student-t interval (a seed is paired across arms: the same start
and prompt order).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
from scipy import stats

SHAPE_ORDER = ("grpo", "shapley", "loo", "dqo", "blend")
SHAPE_LABELS = {
    "grpo": "GRPO",
    "shapley": "Shapley (r + λφ)",
    "loo": "leave-one-out (r + λ·LOO)",
    "dqo": "dqo bonus (α)",
    "blend": "blend ((1 − w)·A_GRPO + w·A_Shapley)",
}
SHAPE_COLOURS = {"grpo": "black", "shapley": "tab:blue", "loo": "tab:orange", "dqo": "tab:green", "blend": "tab:purple"}


def _t975(df: int) -> float:
    """Student-t 97.5 % quantile with ``df`` degrees of freedom."""
    return float(stats.t.ppf(0.975, df))


def mean_interval(values) -> dict:
    """Mean, sd, standard error and 95 % Student-t interval of per-seed values."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    mean = float(x.mean())
    sd = float(x.std(ddof=1)) if n > 1 else float("nan")
    se = sd / math.sqrt(n) if n > 1 else float("nan")
    half = _t975(n - 1) * se if n > 1 else float("nan")
    return {"mean": mean, "sd": sd, "se": se, "ci95": [mean - half, mean + half], "n": n}


def at_step(run: dict, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-seed (accuracy, distinct correct) of a run at ``step``."""
    row = run["evaluations"][str(step)]
    return np.asarray(row["accuracy"]), np.asarray(row["distinct_correct"])


def shape_curve(runs: dict[str, dict], shape: str) -> list[dict]:
    """GRPO, then ``shape``'s doses in increasing order (``pure`` last)."""
    doses = [r for r in runs.values() if r["shape"] == shape]
    doses.sort(key=lambda r: math.inf if r["dose"] is None else r["dose"])
    return [runs["grpo"], *doses] if shape != "grpo" else [runs["grpo"]]


def _interpolate(acc: np.ndarray, dist: np.ndarray, grid: np.ndarray) -> np.ndarray:
    order = np.argsort(acc, kind="stable")
    return np.interp(grid, acc[order], dist[order])


def matched_gap(runs: dict[str, dict], a: str, b: str, step: int, points: int = 21) -> Optional[dict]:
    """Shape ``a`` minus shape ``b`` in distinct correct answers at matched accuracy (module docstring); None
    when their curves share no accuracy range."""
    curves = {}
    for shape in (a, b):
        per_run = [at_step(r, step) for r in shape_curve(runs, shape)]
        curves[shape] = (np.stack([p[0] for p in per_run], 1), np.stack([p[1] for p in per_run], 1))  # (S, doses)
    lo = max(curves[s][0].mean(0).min() for s in (a, b))
    hi = min(curves[s][0].mean(0).max() for s in (a, b))
    if not hi > lo:
        return None
    grid = np.linspace(lo, hi, points)
    seeds = curves[a][0].shape[0]
    gaps = np.stack(
        [
            _interpolate(curves[a][0][s], curves[a][1][s], grid) - _interpolate(curves[b][0][s], curves[b][1][s], grid)
            for s in range(seeds)
        ]
    )  # (S, points)
    per_seed = gaps.mean(1)
    return {
        "pair": f"{a} - {b}",
        "step": step,
        "accuracy_range": [float(lo), float(hi)],
        "gap": mean_interval(per_seed),
        "seeds_higher": int((per_seed > 0).sum()),
        "gap_along_grid": {f"{g:.3f}": float(v) for g, v in zip(grid, gaps.mean(0))},
    }


def within_seed_slope(runs: dict[str, dict], step: int) -> float:
    """Distinct correct answers per unit of accuracy across arms within a seed (least squares with a seed's own
    intercept): the slope an accuracy adjustment uses."""
    acc = np.stack([at_step(r, step)[0] for r in runs.values()], 1)  # (S, arms)
    dist = np.stack([at_step(r, step)[1] for r in runs.values()], 1)
    x = acc - acc.mean(1, keepdims=True)
    y = dist - dist.mean(1, keepdims=True)
    return float((x * y).sum() / (x * x).sum())


def paired(runs: dict[str, dict], a: str, b: str, step: int, slope: float) -> dict:
    """Arm ``a`` minus arm ``b`` per seed: accuracy, distinct correct, and distinct correct adjusted to equal
    accuracy with ``slope`` (``Δdistinct − slope·Δaccuracy``), each with :func:`mean_interval`; and the seeds a
    two-sided paired t test at 5 % would need for 80 % power to see the adjusted gap's mean at its sd."""
    acc_a, dist_a = at_step(runs[a], step)
    acc_b, dist_b = at_step(runs[b], step)
    adjusted = (dist_a - dist_b) - slope * (acc_a - acc_b)
    gap = mean_interval(adjusted)
    need = ((1.96 + 0.8416) * gap["sd"] / abs(gap["mean"])) ** 2 + 1 if gap["mean"] else math.inf
    return {
        "pair": f"{a} - {b}",
        "step": step,
        "accuracy": mean_interval(acc_a - acc_b),
        "distinct_correct": mean_interval(dist_a - dist_b),
        "adjusted_distinct_correct": gap,
        "seeds_for_80pct_power": float(math.ceil(need)) if math.isfinite(need) else None,
    }


def summarize(runs: dict[str, dict], step: int) -> list[dict]:
    rows = []
    for name, run in runs.items():
        acc, dist = at_step(run, step)
        row = {
            "arm": name,
            "shape": run["shape"],
            "dose": run["dose"],
            "step": step,
            "accuracy": mean_interval(acc),
            "distinct_correct": mean_interval(dist),
        }
        share = run["evaluations"][str(step)].get("all_correct_share")
        if share is not None:  # results written before issue 72 do not have it
            row["all_correct_share"] = mean_interval(share)
        rows.append(row)
    return rows


def plot(panels: dict[tuple[int, int], dict[str, dict]], path) -> None:
    """One panel per (group size, step): accuracy against distinct correct answers, a curve per credit shape from
    GRPO through its doses, ±1 standard error over seeds both ways."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted(panels)
    cols = len({k[1] for k in keys})
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    for ax, (group_size, step) in zip(axes.flat, keys):
        runs = panels[(group_size, step)]
        for shape in ("dqo", "loo", "blend", "shapley"):  # Shapley drawn last, on top
            curve = shape_curve(runs, shape)
            if len(curve) < 2:
                continue
            acc = [mean_interval(at_step(r, step)[0]) for r in curve]
            dist = [mean_interval(at_step(r, step)[1]) for r in curve]
            ax.errorbar(
                [a["mean"] for a in acc],
                [d["mean"] for d in dist],
                xerr=[a["se"] for a in acc],
                yerr=[d["se"] for d in dist],
                marker="o",
                ms=3.5,
                lw=1.2,
                capsize=2,
                alpha=0.9,
                color=SHAPE_COLOURS[shape],
                label=SHAPE_LABELS[shape],
            )
            for r, a, d in zip(curve[1:], acc[1:], dist[1:]):
                label = "pure" if r["dose"] is None else f"{r['dose']:g}"
                ax.annotate(label, (a["mean"], d["mean"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
        g = [mean_interval(v) for v in at_step(runs["grpo"], step)]
        ax.plot(g[0]["mean"], g[1]["mean"], "k*", ms=11, label="GRPO", zorder=5)
        start = runs["grpo"]["evaluations"]["0"]
        ax.plot(np.mean(start["accuracy"]), np.mean(start["distinct_correct"]), "kx", ms=8, label="start")
        ax.set_title(f"G = {group_size}, step {step}")
        ax.set_xlabel("accuracy (exact)")
        ax.set_ylabel("distinct correct answers of 16 (exact)")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _fmt(value: dict, digits: int = 3) -> str:
    return f"{value['mean']:+.{digits}f} [{value['ci95'][0]:+.{digits}f}, {value['ci95'][1]:+.{digits}f}]"


def markdown(result: dict) -> str:
    """The results' tables (``DIR/table.md``): each arm's mean ± se at every (G, step), the gaps at matched
    accuracy, and the paired gaps (raw and accuracy-adjusted with the panel's own slope)."""
    lines = []
    for panel in result["panels"]:
        g, step = panel["group_size"], panel["step"]
        lines += [
            f"### G = {g}, step {step}",
            "",
            f"Within-seed slope: {panel['slope_distinct_per_accuracy']:.2f} distinct correct answers per unit of "
            "accuracy.",
            "",
            "| arm | accuracy (mean ± se) | distinct correct of 16 (mean ± se) | all-correct groups (share) |",
            "|---|---:|---:|---:|",
        ]
        for row in panel["arms"]:
            a, d = row["accuracy"], row["distinct_correct"]
            share = row.get("all_correct_share")
            shown = "-" if share is None else f"{share['mean']:.3f}"
            lines.append(
                f"| {row['arm']} | {a['mean']:.3f} ± {a['se']:.3f} | {d['mean']:.2f} ± {d['se']:.2f} | {shown} |"
            )
        lines += ["", "| at matched accuracy | accuracy range | distinct correct gap (95 % CI) | seeds higher |"]
        lines.append("|---|---|---:|---:|")
        for gap in panel["matched_accuracy"]:
            lo, hi = gap["accuracy_range"]
            lines.append(
                f"| {gap['pair']} | {lo:.3f}-{hi:.3f} | {_fmt(gap['gap'])} | {gap['seeds_higher']}/{gap['gap']['n']} |"
            )
        lines += [
            "",
            "| paired (per seed) | accuracy | distinct correct | adjusted (slope above) | seeds for 80 % power |",
        ]
        lines.append("|---|---:|---:|---:|---:|")
        for pair in panel["paired"]:
            need = pair["seeds_for_80pct_power"]
            lines.append(
                f"| {pair['pair']} | {_fmt(pair['accuracy'])} | {_fmt(pair['distinct_correct'])} | "
                f"{_fmt(pair['adjusted_distinct_correct'])} | {'-' if need is None else int(need)} |"
            )
        lines.append("")
    return "\n".join(lines)
