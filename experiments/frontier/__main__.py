"""``python -m experiments.frontier [--out DIR] [--tiny] ...``: simulate every arm at every group size, then write
``DIR/results.json`` (every run's exact metrics per seed, the summaries, the gaps at matched accuracy, the paired
accuracy-adjusted gaps) and ``DIR/frontier.png`` and ``DIR/table.md``. The documented run is ``python -m experiments.frontier --out
docs/frontier`` (``docs/frontier.md``); ``--tiny`` is the tests' configuration (seconds)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

from experiments.frontier.arms import Arm
from experiments.frontier.frontier import markdown, matched_gap, paired, plot, summarize, within_seed_slope
from experiments.frontier.simulate import SimSpec, simulate
from experiments.frontier.task import EMBEDDINGS, TaskSpec, build_task

DOSES = (0.25, 0.5, 1.0, 2.0, 4.0, None)
ALPHAS = (0.5, 1.0, 2.0, 4.0, 8.0)
# credit.advantage=blend's weights (issue 72); blend-1 is shapley-pure bit for bit, run as a check of that
BLEND_WEIGHTS = (0.1, 0.25, 0.5, 0.75, 1.0)
# mix at lambda = 0.01: the floor a review found (docs/method.md, section 6)
FLOOR_DOSE = 0.01
DEFAULT_ARMS = (
    "grpo",
    *(Arm("shapley", d).name for d in (FLOOR_DOSE, *DOSES)),
    *(Arm("loo", d).name for d in DOSES),
    *(Arm("dqo", a).name for a in ALPHAS),
    *(Arm("blend", w).name for w in BLEND_WEIGHTS),
)
TINY_ARMS = ("grpo", "shapley-1", "shapley-pure", "loo-1", "loo-pure", "dqo-2")
# the real path's known result: gcpo_group - grpo on the five-start reference (docs/miniature.md), G = 8, step 40
REAL_PATH = {
    "pair": "shapley-pure - grpo",
    "group_size": 8,
    "step": 40,
    "distinct_correct": 0.738,
    "distinct_correct_ci95": [0.402, 1.073],
    "accuracy": -0.042,
    "accuracy_ci95": [-0.078, -0.006],
    "source": "docs/miniature/five_starts/results.json",
}


def _run(job: tuple[str, SimSpec, TaskSpec]) -> dict:
    import torch

    torch.set_num_threads(1)
    arm, spec, task_spec = job
    return simulate(Arm.parse(arm), spec, build_task(task_spec))


def run_all(arms, group_sizes, spec: SimSpec, task_spec: TaskSpec, jobs: int) -> dict[int, dict[str, dict]]:
    work = [(arm, replace(spec, group_size=g), task_spec) for g in group_sizes for arm in arms]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_run, work))
    else:
        results = [_run(job) for job in work]
    out: dict[int, dict[str, dict]] = {g: {} for g in group_sizes}
    for (arm, s, _), result in zip(work, results):
        out[s.group_size][arm] = result
    return out


def analyse(runs: dict[int, dict[str, dict]], horizons) -> dict:
    """Summaries, matched-accuracy gaps, slopes and paired gaps of every (group size, horizon)."""
    panels = []
    for g, by_arm in runs.items():
        for step in horizons:
            slope = within_seed_slope(by_arm, step)
            shapes = {r["shape"] for r in by_arm.values()}
            gaps = [
                gap
                for a, b in (("shapley", "loo"), ("shapley", "dqo"), ("loo", "dqo"), ("blend", "shapley"))
                if a in shapes and b in shapes
                for gap in [matched_gap(by_arm, a, b, step)]
                if gap is not None
            ]
            pairs = [
                paired(by_arm, a, b, step, slope)
                for a, b in (
                    ("shapley-pure", "grpo"),
                    ("loo-pure", "grpo"),
                    ("shapley-pure", "loo-pure"),
                    ("dqo-2", "grpo"),
                    ("shapley-pure", "dqo-2"),
                    ("shapley-1", "loo-1"),
                    (Arm("shapley", FLOOR_DOSE).name, "grpo"),
                    *((Arm("blend", w).name, "grpo") for w in BLEND_WEIGHTS),
                    *(("shapley-pure", Arm("blend", w).name) for w in BLEND_WEIGHTS),
                )
                if a in by_arm and b in by_arm
            ]
            panels.append(
                {
                    "group_size": g,
                    "step": step,
                    "slope_distinct_per_accuracy": slope,
                    "arms": summarize(by_arm, step),
                    "matched_accuracy": gaps,
                    "paired": pairs,
                }
            )
    return {"panels": panels}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.frontier", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/frontier"))
    parser.add_argument("--tiny", action="store_true", help="the tests' configuration: seconds")
    parser.add_argument("--arms", default=None, help="comma-separated (grpo, shapley-0.5, loo-pure, dqo-2, ...)")
    parser.add_argument("--group-sizes", default=None, help="comma-separated G (default 8,16)")
    parser.add_argument("--horizons", default=None, help="comma-separated steps to report (default 40,100)")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--lr", type=float, default=SimSpec.lr)
    parser.add_argument("--optimizer", default=SimSpec.optimizer, choices=("adam", "sgd"))
    parser.add_argument("--start-jitter", type=float, default=SimSpec.start_jitter)
    parser.add_argument(
        "--embedding",
        default=TaskSpec.embedding,
        choices=EMBEDDINGS,
        help="the answers' embeddings: the stand-in (default) or all-MiniLM-L6-v2's (the miniature's encoder)",
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--no-figure", action="store_true")
    parser.add_argument(
        "--from-results", type=Path, default=None, help="redo the analysis, table and figure of a results.json"
    )
    args = parser.parse_args(argv)

    if args.tiny:
        arms, group_sizes, horizons = TINY_ARMS, (4,), (2, 4)
        spec = SimSpec(steps=4, eval_every=2, seeds=3, prompts_per_step=8)
    else:
        arms, group_sizes, horizons = DEFAULT_ARMS, (8, 16), (40, 100)
        spec = SimSpec()
    arms = tuple(args.arms.split(",")) if args.arms else arms
    if "grpo" not in arms:
        parser.error("the arms must include grpo (every frontier starts there)")
    for arm in arms:
        try:
            Arm.parse(arm)
        except ValueError as err:
            parser.error(str(err))
    group_sizes = tuple(int(g) for g in args.group_sizes.split(",")) if args.group_sizes else group_sizes
    horizons = tuple(int(h) for h in args.horizons.split(",")) if args.horizons else horizons
    spec = replace(
        spec,
        steps=max(horizons),
        lr=args.lr,
        optimizer=args.optimizer,
        start_jitter=args.start_jitter,
        seeds=args.seeds or spec.seeds,
    )
    if any(h % spec.eval_every and h != spec.steps for h in horizons):
        parser.error(f"every horizon must be a multiple of {spec.eval_every} or the last step")
    task_spec = TaskSpec(embedding=args.embedding)
    began = time.monotonic()
    if args.from_results:
        earlier = json.loads(args.from_results.read_text())
        runs = {int(g): by_arm for g, by_arm in earlier["runs"].items()}
        group_sizes, horizons = tuple(runs), tuple(earlier["horizons"])
        spec, task_spec = SimSpec(**earlier["spec"]), TaskSpec(**earlier["task"])
        arms = tuple(next(iter(runs.values())))
    else:
        runs = run_all(arms, group_sizes, spec, task_spec, max(1, args.jobs))
    result = {
        "spec": asdict(spec),
        "task": asdict(task_spec),
        "group_sizes": list(group_sizes),
        "horizons": list(horizons),
        "real_path": REAL_PATH,
        **analyse(runs, horizons),
        "runs": {str(g): by_arm for g, by_arm in runs.items()},
        "wall_s": earlier["wall_s"] if args.from_results else time.monotonic() - began,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "table.md").write_text(markdown(result) + "\n")
    if not args.no_figure:
        plot({(g, h): runs[g] for g in group_sizes for h in horizons}, args.out / "frontier.png")
    print(
        f"frontier: {len(arms)} arms x {len(group_sizes)} group sizes x {spec.seeds} seeds in {result['wall_s']:.0f} s"
    )
    for panel in result["panels"]:
        for gap in panel["matched_accuracy"]:
            s = gap["gap"]
            print(
                f"  G={panel['group_size']} step {panel['step']}: {gap['pair']} at matched accuracy "
                f"({gap['accuracy_range'][0]:.3f}-{gap['accuracy_range'][1]:.3f}): {s['mean']:+.3f} "
                f"[{s['ci95'][0]:+.3f}, {s['ci95'][1]:+.3f}], {gap['seeds_higher']}/{s['n']} seeds higher"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
