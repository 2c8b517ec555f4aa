#!/usr/bin/env python
"""Benchmark of DIVER's textual diversity (pairwise sentence BLEU within a group) against the way DIVER's code
computes it, measured in the same run.

DIVER (NJU-RL/DIVER@5870b47, ``verl/div_src/diversity_metric.py``) calls nltk's ``sentence_bleu`` twice per pair
of responses: G(G-1) calls per group, each recounting both texts' n-grams. ``gcpo_core.baselines.diver`` counts every
text's n-grams once and gets all pairs' clipped matches from one vectorised pass per n-gram order. This script
times, per group of G responses of W words (random words over a small vocabulary, each response a perturbed copy
of a shared one, so that pairs share long n-grams as solutions to one problem do):

* ``nltk``: DIVER's loop (only when nltk is installed: ``pip install nltk``), and the largest difference from it;
* ``counter``: the same loop written with one ``Counter`` per text and order (no nltk);
* ``gcpo_core``: :func:`gcpo_core.baselines.diver.textual_similarity`;
* the equation metric, for scale.

It prints a table and the time per training step for ``--groups`` prompts (the metric runs on the driver in the
advantage step, for groups with a correct response).

    python dev/bench_diver.py [--group-size 16] [--words 150 1500] [--groups 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import time
import warnings
from collections import Counter

import numpy as np

from gcpo_core.baselines.diver import DIVER_BLEU_WEIGHTS, _bleu, equation_diversity, textual_similarity


def synthetic_group(rng: random.Random, size: int, words: int, vocabulary: int = 300) -> list[str]:
    vocab = [f"w{i}" for i in range(vocabulary)] + ["$x=1$", "$y=2$", "$x+y=3$"]
    base = [rng.choice(vocab) for _ in range(words)]
    group = []
    for _ in range(size):
        text = list(base)
        for _ in range(words // 5):
            text[rng.randrange(words)] = rng.choice(vocab)
        group.append(" ".join(text))
    return group


def counter_similarity(texts: list[str], weights=DIVER_BLEU_WEIGHTS) -> np.ndarray:
    tokens = [t.split() for t in texts]
    counts = [[Counter(zip(*(t[k:] for k in range(n)))) for n in range(1, len(weights) + 1)] for t in tokens]
    size = len(texts)
    sim = np.zeros((size, size))
    for i in range(size):
        for j in range(i + 1, size):
            overlap = [sum((a & b).values()) for a, b in zip(counts[i], counts[j])]
            li, lj = len(tokens[i]), len(tokens[j])
            sim[i, j] = sim[j, i] = 0.5 * (_bleu(overlap, lj, li, weights) + _bleu(overlap, li, lj, weights))
    return sim.sum(axis=1) / (size - 1)


def nltk_similarity(texts: list[str], weights=DIVER_BLEU_WEIGHTS) -> np.ndarray:
    from nltk.translate.bleu_score import sentence_bleu

    size = len(texts)
    sim = np.zeros((size, size))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nltk warns on every order without matches
        for i in range(size):
            for j in range(i + 1, size):
                a, b = texts[i].split(), texts[j].split()
                sim[i, j] = sim[j, i] = (
                    sentence_bleu([a], b, weights=weights) + sentence_bleu([b], a, weights=weights)
                ) / 2
    return sim.sum(axis=1) / (size - 1)


def best_time(fn, texts, repeats: int) -> tuple[float, np.ndarray]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(texts)
        times.append(time.perf_counter() - start)
    return min(times), out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--words", type=int, nargs="+", default=[150, 1500])
    parser.add_argument("--groups", type=int, default=256, help="prompts per step, for the per-step estimate")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    try:
        import nltk  # noqa: F401

        have_nltk = True
    except ImportError:
        have_nltk = False
        print("nltk is not installed: the nltk column is skipped (pip install nltk to compare with DIVER's code)")

    rng = random.Random(args.seed)
    print(f"\nG = {args.group_size}, best of {args.repeats}; ms per group")
    print(
        "| words | nltk (DIVER's loop) | counter | gcpo_core | speed-up vs nltk | vs counter | max abs diff | equation |"
    )
    print("|---|---|---|---|---|---|---|---|")
    failed = False
    for words in args.words:
        texts = synthetic_group(rng, args.group_size, words)
        ours_s, ours = best_time(textual_similarity, texts, args.repeats)
        counter_s, counter = best_time(counter_similarity, texts, args.repeats)
        equation_s, _ = best_time(equation_diversity, texts, args.repeats)
        diff = float(np.max(np.abs(ours - counter)))
        nltk_cell = speedup_cell = "-"
        if have_nltk:
            nltk_s, reference = best_time(nltk_similarity, texts, 1)
            diff = max(diff, float(np.max(np.abs(ours - reference))))
            nltk_cell, speedup_cell = f"{1e3 * nltk_s:.1f}", f"{nltk_s / ours_s:.1f}x"
        failed |= not diff <= 1e-12
        print(
            f"| {words} | {nltk_cell} | {1e3 * counter_s:.1f} | {1e3 * ours_s:.1f} | {speedup_cell} | "
            f"{counter_s / ours_s:.1f}x | {diff:.1e} | {1e3 * equation_s:.2f} |"
        )
        print(
            f"  per step ({args.groups} groups of {words} words): textual {args.groups * ours_s:.1f} s, "
            f"equation {args.groups * equation_s:.2f} s"
        )
    if failed:
        print("FAIL: the implementations disagree")
        return 1
    print("all implementations agree (max abs diff <= 1e-12)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
