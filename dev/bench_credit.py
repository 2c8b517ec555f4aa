#!/usr/bin/env python
"""Benchmark of the GCPO credit engine against a naive baseline measured in the same run.

For B groups of G rollouts with realistic, highly similar embeddings (mean within-group cosine ~0.85, as
all-MiniLM-L6-v2 gives real solutions to one math problem), two reward patterns:

* ``all-correct``: the worst case (every rollout is a player of the Shapley game);
* ``mixed``: per-group accuracy drawn from Beta(1, 1) (a training batch's spread of easy and hard prompts).

Times the whole credit call (kernel -> Shapley -> advantages -> diagnostics) for ``exact``, ``mc`` and ``loo``
(leave-one-out credit, V(all) - V(all \\ i): the ablation's cheaper credit, not an estimate of Shapley; its
"rel. diff" column is how far its credit lies from the exact Shapley value), the naive baseline (one log-det per subset of all G rollouts, no null-player reduction, Shapley weights as in
the engine) on ``--naive-groups`` groups scaled linearly to B, and MC's error against exact. Prints a table
and checks the targets (on a 2-core CPU): exact G=8 <= 50 ms; MC G=16 M=64 <= 300 ms with mean relative
error <= 1 %; exact G=16 >= 10x faster than naive.

    python dev/bench_credit.py [--device cuda] [--groups 512] [--repeats 5]

Two more sections, each run on its own:

``--coverage``: are the Monte-Carlo standard errors honest? On groups of 8, 12 and 16 correct rollouts with
the same realistic embeddings, for M in {4, 8, 16, 64, 256}, the share of estimates whose nominal 95 %
interval (+- 1.96 stderr) covers the exact Shapley value, the mean relative error, and the same error for
plain permutation sampling (no control variate, no half-turns, no reverses). ``--baseline-module PATH`` also
measures another implementation of ``shapley_values``: a single module file defining it (e.g. an earlier commit's
``gcpo_core/credit/shapley.py``, from ``git show``, before it became the package ``gcpo_core/credit/shapley/``).
Target: coverage >= 93 % at every M.

``--memory``: peak resident memory and time of crediting one group of G distinct correct rollouts by Monte
Carlo (each G in a fresh process), for G up to 4096 (``max_group_size``'s cap).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch

from gcpo_core.credit.compute import compute_group_credit
from gcpo_core.credit.config import CreditConfig
from gcpo_core.credit.shapley.exact import shapley_from_subset_values

TARGETS = {
    ("exact", 8): ("time_ms", 50.0),
    ("mc", 16): ("time_ms", 300.0),
}


def realistic_embeddings(rng: np.random.Generator, groups: int, size: int, dim: int = 384) -> np.ndarray:
    """A shared direction per prompt, 4 solution 'strategies' and per-rollout noise."""
    centre = rng.normal(size=(groups, 1, dim))
    strategies = rng.normal(size=(groups, 4, dim)) * 0.4
    pick = rng.integers(0, 4, size=(groups, size))
    noise = rng.normal(size=(groups, size, dim)) * 0.3
    emb = centre + np.take_along_axis(strategies, pick[..., None], axis=1) + noise
    return (emb / np.linalg.norm(emb, axis=-1, keepdims=True)).astype(np.float32)


def rewards_for(pattern: str, rng: np.random.Generator, groups: int, size: int) -> np.ndarray:
    if pattern == "all-correct":
        return np.ones((groups, size))
    accuracy = rng.beta(1.0, 1.0, size=(groups, 1))
    return (rng.random((groups, size)) < accuracy).astype(float)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int) -> tuple[float, object]:
    result = fn()  # warm-up (allocator, caches, kernels)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        result = fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def naive_shapley(weighted_kernel: torch.Tensor) -> torch.Tensor:
    """One slogdet per subset of all G rollouts (wrong ones included), then the Shapley sums as in the engine."""
    groups, size, _ = weighted_kernel.shape
    members = (
        (
            torch.arange(2**size, device=weighted_kernel.device)[:, None]
            >> torch.arange(size, device=weighted_kernel.device)
        )
        & 1
    ).bool()
    select = (members[:, :, None] & members[:, None, :]).to(torch.float64)
    eye = torch.eye(size, dtype=torch.float64, device=weighted_kernel.device)
    out = []
    for g in range(groups):
        values = torch.linalg.slogdet(eye + weighted_kernel[g] * select)[1]
        out.append(shapley_from_subset_values(values[None])[0])
    return torch.stack(out)


def bench(args: argparse.Namespace) -> list[dict]:
    device = torch.device(args.device)
    rows = []
    for size in args.group_sizes:
        for pattern in ("all-correct", "mixed"):
            rng = np.random.default_rng(args.seed)
            emb = torch.from_numpy(realistic_embeddings(rng, args.groups, size)).to(device)
            rewards = torch.from_numpy(rewards_for(pattern, rng, args.groups, size)).to(device)
            mask = torch.ones(args.groups, size, dtype=torch.bool, device=device)
            results = {}
            for method in args.methods:
                config = CreditConfig(method=method, permutations=args.permutations, antithetic=True)
                seconds, credit = timed(lambda: compute_group_credit(rewards, emb, mask, config), device, args.repeats)
                results[method] = (seconds, credit)

            exact_credit = (
                results["exact"][1]
                if "exact" in results
                else compute_group_credit(rewards, emb, mask, CreditConfig(method="exact"))
            )
            sub = slice(0, min(args.naive_groups, args.groups))
            unit = torch.nn.functional.normalize(emb[sub].double(), dim=-1)
            kernel = unit @ unit.transpose(-1, -2)
            L = rewards[sub, :, None] * kernel * rewards[sub, None, :]
            naive_seconds, naive_phi = timed(lambda: naive_shapley(L), device, 1)
            naive_seconds *= args.groups / (sub.stop - sub.start)
            torch.testing.assert_close(naive_phi, exact_credit.shapley[sub], rtol=0, atol=1e-9)

            players = exact_credit.shapley > 0
            for method, (seconds, credit) in results.items():
                row = {
                    "G": size,
                    "rewards": pattern,
                    "method": f"mc M={args.permutations}" if method == "mc" else method,
                    "time_ms": 1000 * seconds,
                    "speedup": naive_seconds / seconds,
                    "naive_ms": 1000 * naive_seconds,
                    "key": (method, size),
                }
                if method != "exact":
                    rel = (credit.shapley - exact_credit.shapley).abs()[players] / exact_credit.shapley[players]
                    row["mean_rel_err"] = float(rel.mean())
                    row["max_rel_err"] = float(rel.max())
                rows.append(row)
    return rows


def report(rows: list[dict], args: argparse.Namespace) -> bool:
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"# GCPO credit benchmark: B={args.groups} groups, torch {torch.__version__}, {name}")
    print(f"# naive baseline measured on {args.naive_groups} groups, scaled to B; times are medians of {args.repeats}")
    print()
    print(
        "| G | rewards | method | credit call (ms) | naive (ms) | speed-up vs naive | mean rel. diff from exact "
        "Shapley | max rel. diff |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        err = f"{100 * r['mean_rel_err']:.2f} % | {100 * r['max_rel_err']:.1f} %" if "mean_rel_err" in r else "– | –"
        print(
            f"| {r['G']} | {r['rewards']} | {r['method']} | {r['time_ms']:.1f} | {r['naive_ms']:.0f} | "
            f"{r['speedup']:.0f}x | {err} |"
        )
    print()
    ok = True
    worst = {r["key"]: r for r in rows if r["rewards"] == "all-correct"}
    checks = []
    if ("exact", 8) in worst:
        checks.append(("exact G=8 credit call <= 50 ms", worst[("exact", 8)]["time_ms"] <= 50.0))
    if ("mc", 16) in worst:
        r = worst[("mc", 16)]
        checks.append((f"MC G=16 M={args.permutations} credit call <= 300 ms", r["time_ms"] <= 300.0))
        checks.append((f"MC G=16 M={args.permutations} mean relative error <= 1 %", r["mean_rel_err"] <= 0.01))
    if ("exact", 16) in worst:
        checks.append(("exact G=16 >= 10x faster than naive", worst[("exact", 16)]["speedup"] >= 10.0))
    for label, passed in checks:
        print(f"{'PASS' if passed else 'FAIL'}  {label}  (worst case: all correct)")
        ok &= passed
    return ok


def load_shapley_module(path: str | None):
    """The module of ``shapley_values`` (gcpo_core.credit.shapley.dispatch), or another implementation of it loaded
    from a file (for a before/after table)."""
    if path is None:
        import gcpo_core.credit.shapley.dispatch as module

        return module
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_shapley", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_shapley"] = module
    spec.loader.exec_module(module)
    return module


def coverage(args: argparse.Namespace) -> bool:
    """Coverage of +-1.96 stderr against exact Shapley, and MC error, per budget M."""
    from gcpo_core.credit.shapley.exact import exact_shapley
    from gcpo_core.credit.shapley.monte_carlo import monte_carlo_shapley

    engines = {"this engine": load_shapley_module(None)}
    if args.baseline_module:
        engines["baseline"] = load_shapley_module(args.baseline_module)
    rng = np.random.default_rng(args.seed)
    games = []
    for size in (8, 12, 16):
        unit = torch.from_numpy(realistic_embeddings(rng, args.coverage_groups, size).astype(np.float64))
        unit = unit / unit.norm(dim=-1, keepdim=True)
        L = unit @ unit.transpose(-1, -2)
        games.append((L, exact_shapley(L)[0]))
    cosine = float(
        np.mean(
            [
                (L.sum((1, 2)) - L.diagonal(dim1=1, dim2=2).sum(1)).mean() / (L.shape[1] * (L.shape[1] - 1))
                for L, _ in games
            ]
        )
    )
    print(
        f"# MC standard errors: {args.coverage_groups} groups each of 8, 12 and 16 correct rollouts (mean cosine "
        f"{cosine:.2f}), {args.coverage_seeds} seeds; coverage = share of estimates within +-1.96 stderr of the "
        "exact value"
    )
    print()
    header = "| M | " + " | ".join(f"{name}: coverage | {name}: mean rel. err | {name}: se = 0" for name in engines)
    print(header + " | plain sampling: mean rel. err |")
    print("|---:|" + "---:|" * (3 * len(engines) + 1))
    ok = True
    for permutations in (4, 8, 16, 64, 256):
        cells = []
        for name, module in engines.items():
            inside = total = zero = 0
            error = 0.0
            for seed in range(args.coverage_seeds):
                for L, exact in games:
                    result = module.shapley_values(
                        L, torch.ones(L.shape[:2], dtype=torch.bool), method="mc", permutations=permutations, seed=seed
                    )
                    inside += int(((result.values - exact).abs() <= 1.96 * result.stderr).sum())
                    zero += int((result.stderr == 0).sum())
                    error += float(((result.values - exact).abs() / exact).sum())
                    total += exact.numel()
            cells.append(f"{100 * inside / total:.1f} % | {100 * error / total:.2f} % | {100 * zero / total:.1f} %")
            if name == "this engine":
                ok &= inside / total >= 0.93
        plain = 0.0
        count = 0
        for seed in range(args.coverage_seeds):
            for L, exact in games:
                estimate, _ = monte_carlo_shapley(
                    L,
                    permutations=permutations,
                    antithetic=False,
                    stratified=False,
                    control_variate=False,
                    generator=torch.Generator().manual_seed(seed),
                )
                plain += float(((estimate - exact).abs() / exact).sum())
                count += exact.numel()
        print(f"| {permutations} | " + " | ".join(cells) + f" | {100 * plain / count:.2f} % |")
    print()
    print(f"{'PASS' if ok else 'FAIL'}  coverage of +-1.96 stderr >= 93 % at every M (this engine)")
    return ok


MEMORY_SCRIPT = """
import resource, sys, time, torch
from gcpo_core.credit.shapley.dispatch import shapley_values
size, permutations = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(0)
unit = torch.nn.functional.normalize(torch.randn(1, size, 384, generator=g, dtype=torch.float64), dim=-1)
L = unit @ unit.transpose(-1, -2)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
shapley_values(L, torch.ones(1, size, dtype=torch.bool), method="mc", permutations=permutations)
print(size, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**10, time.perf_counter() - start)
"""


def memory(args: argparse.Namespace) -> bool:
    """Peak memory of one Monte-Carlo group of G rollouts, each in a fresh process."""
    import subprocess

    print(
        f"# Monte-Carlo credit of one group of G distinct correct rollouts, M = {args.permutations}; extra peak "
        "resident memory over the process before the call (the group's kernel L itself is G^2 x 8 bytes)"
    )
    print()
    print("| G | L itself (MB) | extra peak memory (MB) | time (s) | all M permuted systems at once (MB) |")
    print("|---:|---:|---:|---:|---:|")
    for size in args.memory_sizes:
        proc = subprocess.run(
            [sys.executable, "-c", MEMORY_SCRIPT, str(size), str(args.permutations)],
            capture_output=True,
            text=True,
            check=True,
        )
        _, extra, seconds = proc.stdout.split()
        print(
            f"| {size} | {size * size * 8 / 2**20:.0f} | {float(extra):.0f} | {float(seconds):.1f} | "
            f"{args.permutations * size * size * 8 / 2**20:.0f} |"
        )
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--groups", type=int, default=512)
    parser.add_argument("--group-sizes", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--permutations", type=int, default=64)
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["exact", "mc", "loo"],
        choices=["exact", "mc", "loo"],
        help="credit methods to time (default all three)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--naive-groups", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--coverage", action="store_true", help="measure the MC standard errors' coverage instead")
    parser.add_argument("--coverage-groups", type=int, default=40)
    parser.add_argument("--coverage-seeds", type=int, default=3)
    parser.add_argument(
        "--baseline-module",
        help="a module file with another shapley_values to measure beside this "
        "one (e.g. gcpo_core/credit/shapley.py of a commit before the package)",
    )
    parser.add_argument("--memory", action="store_true", help="measure one big MC group's peak memory instead")
    parser.add_argument("--memory-sizes", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096])
    args = parser.parse_args(argv)
    if args.coverage:
        return 0 if coverage(args) else 1
    if args.memory:
        return 0 if memory(args) else 1
    rows = bench(args)
    return 0 if report(rows, args) else 1


if __name__ == "__main__":
    sys.exit(main())
