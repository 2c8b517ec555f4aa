#!/usr/bin/env python
"""What the time bound on answer checking costs: the bounded scorer against math-verify in this process.

    python dev/bench_scorer.py [--data-dir ../shared/data] [--answers 400] [--workers 2]

On real responses (the rollouts and reference solutions in the data folder, else built-in examples), each
timed in the same run:

* ``in process``: ``verdict_unbounded`` on this thread (no bound: the old way, and the baseline);
* ``bounded, one call per answer``: ``score_answer`` from one thread (the reward function's path);
* ``bounded, batched``: ``score_answers`` (``gcpo eval``'s path), batches over ``--workers`` processes;
* the protocol alone (a worker applying ``len``), and, when the ``pebble`` package is importable, pebble's
  ProcessPool (spawn) doing the same, for comparison.

Then the cost of one pathological answer: the bound, plus the worker's replacement starting up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
BUILT_IN = [
    ("Work.\nAnswer: 18", "18"),
    ("So $\\boxed{\\frac{14}{3}}$.", "\\frac{14}{3}"),
    ("Answer: (3, \\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("#### 72", "72"),
    ("The share is $\\boxed{25}$.", "25\\%"),
    ("Answer: The answer is $6 - 5i$.", "6 - 5i"),
]


def load_pairs(data_dir: Path, limit: int) -> list[tuple[str, str]]:
    pairs = []
    if (data_dir / "rollout_groups.jsonl").is_file():
        for line in (data_dir / "rollout_groups.jsonl").read_text().splitlines():
            row = json.loads(line)
            pairs += [(text, row["answer"]) for text in row["responses"]]
        for line in (data_dir / "math500.jsonl").read_text().splitlines():
            row = json.loads(line)
            pairs.append((row["solution"], row["answer"]))
    else:
        pairs = BUILT_IN * 20
    # alternate GSM8K rollouts and MATH solutions so any prefix has both
    half = len(pairs) // 2
    mixed = [p for pair in zip(pairs[:half], pairs[half:]) for p in pair]
    return mixed[:limit]


def per_answer_ms(seconds: float, count: int) -> float:
    return 1e3 * seconds / count


def timed(fn, repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--answers", type=int, default=400)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--round-trips", type=int, default=2000, help="calls for the protocol-only timing")
    parser.add_argument("--skip-pathological", action="store_true")
    args = parser.parse_args(argv)

    import os

    os.environ["GCPO_SCORER_WORKERS"] = str(args.workers)
    from gcpo_core.rewards import math_reward
    from gcpo_core.rewards.deadline_pool import DeadlinePool

    pairs = load_pairs(args.data_dir, args.answers)
    n = len(pairs)
    print(
        f"{n} answers ({'real responses' if args.data_dir.is_dir() else 'built-in examples'}), "
        f"{args.workers} workers, median of {args.repeats}"
    )

    math_reward.warm_up_worker()  # the same imports and caches the workers have
    math_reward.scoring_pool().warm_up()
    reference = [math_reward.verdict_unbounded(p) for p in pairs]
    bounded = [math_reward.score_answer(r, g) for r, g in pairs]
    assert [v.correct for v in bounded] == [c for c, _ in reference], "bounded and in-process verdicts differ"

    rows = []
    base = timed(lambda: [math_reward.verdict_unbounded(p) for p in pairs], args.repeats)
    rows.append(("in process (unbounded, baseline)", per_answer_ms(base, n), 1.0))
    one = timed(lambda: [math_reward.score_answer(r, g) for r, g in pairs], args.repeats)
    rows.append(("bounded, one call per answer", per_answer_ms(one, n), one / base))
    batched = timed(lambda: math_reward.score_answers(pairs), args.repeats)
    rows.append(
        (
            f"bounded, batched ({math_reward.BATCH_SIZE} per call, {args.workers} workers)",
            per_answer_ms(batched, n),
            batched / base,
        )
    )

    print("\n| scoring | ms per answer | x in-process |\n|---|---:|---:|")
    for name, ms, ratio in rows:
        print(f"| {name} | {ms:.2f} | {ratio:.2f} |")
    print(f"\nbound's overhead per call (one call per answer): {per_answer_ms(one - base, n):.2f} ms")

    trips = args.round_trips
    with DeadlinePool("builtins:len", workers=1) as pool:
        pool.warm_up()
        ours = timed(lambda: [pool.map(["x"], 5.0) for _ in range(trips)], 1)
    print(
        f"\n| one round trip (a worker applies len) | us per call |\n|---|---:|\n| DeadlinePool | {1e6 * ours / trips:.0f} |"
    )
    try:
        import multiprocessing

        from pebble import ProcessPool
    except ImportError:
        print("| pebble ProcessPool | (pebble not installed) |")
    else:
        with ProcessPool(max_workers=1, context=multiprocessing.get_context("spawn")) as pebble_pool:
            pebble_pool.schedule(len, args=("x",), timeout=5).result()
            theirs = timed(
                lambda: [pebble_pool.schedule(len, args=("x",), timeout=5).result() for _ in range(trips)], 1
            )
        print(f"| pebble ProcessPool (spawn) | {1e6 * theirs / trips:.0f} |")

    if not args.skip_pathological:
        pool = math_reward.scoring_pool()
        start = time.perf_counter()
        verdict = math_reward.score_answer("\\boxed{9^{9^{9^{9^{9}}}}}", "3", timeout_s=1.0)
        hit = time.perf_counter() - start
        start = time.perf_counter()
        after = math_reward.score_answer("Answer: 3", "3")
        recovery = time.perf_counter() - start
        print(
            f"\npathological answer, bound 1 s: returned in {hit:.2f} s (timed_out={verdict.timed_out}); the next "
            f"answer took {recovery:.2f} s (the replacement worker's start-up); restarts so far {pool.restarts}"
        )
        assert verdict.timed_out and not verdict.correct and after.correct
    return 0


if __name__ == "__main__":
    sys.exit(main())
