"""``gcpo eval``: accuracy (avg@k), unbiased pass@k and diversity of the correct solutions, per benchmark,
for one or several runs side by side (e.g. GCPO vs GRPO checkpoints).

    gcpo eval --run gcpo=gens_gcpo.jsonl --run grpo=gens_grpo.jsonl --out-dir eval/
    gcpo eval --generate /ckpt/merged --benchmark val_aime24.parquet -k 16 --out-dir eval/   # GPU, vLLM

Generations: JSONL, one line per problem ({"benchmark", "id", "problem", "answer", "responses": [...]}) or
verl's validation dumps (one line per sample: input, output, gts); gold answers may come from --benchmark
files instead. Writes results.md / .csv / .json, pass@k curves and an accuracy-vs-diversity plot.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from gcpo_core.cli.common import (
    FLAG_RULES,
    CommandError,
    add_config_argument,
    add_encoder_arguments,
    load_encoder,
    one_line,
    path_argument,
)
from gcpo_core.cli.jsonl import read_jsonl
from gcpo_core.rewards.prompts import INSTRUCTIONS

TABLE_COLUMNS = (
    ("problems", "problems", "{:.0f}"),
    ("samples_per_problem", "k", "{:.0f}"),
    ("avg", "avg@k", "{:.1%}"),
    ("pass@1", "pass@1", "{:.1%}"),
    ("pass_max", "pass@k", "{:.1%}"),
    ("distinct_answers", "answers/problem", "{:.2f}"),
    ("correct_vendi", "Vendi", "{:.2f}"),
    ("correct_mean_cosine", "mean cos", "{:.3f}"),
    ("correct_clusters", "clusters", "{:.2f}"),
    ("correct_distinct_4", "distinct-4", "{:.3f}"),
    ("correct_self_bleu", "self-BLEU", "{:.1f}"),
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="accuracy, pass@k and diversity of sampled solutions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("generations", nargs="*", metavar="GENERATIONS.jsonl", help="a run each (named by file)")
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="NAME=GENERATIONS.jsonl",
        help="a run under a name of your choice (repeatable)",
    )
    parser.add_argument(
        "--benchmark",
        action="append",
        default=[],
        metavar="FILE",
        help="gold answers (and prompts for --generate): prepared verl parquet or JSONL",
    )
    parser.add_argument(
        "--out-dir",
        type=path_argument,
        default=Path("eval_results"),
        help="where the tables and plots go (default %(default)s)",
    )
    parser.add_argument("--ks", type=int, nargs="+", default=None, help="k values of pass@k (default: powers of 2)")
    parser.add_argument("--no-embeddings", action="store_true", help="skip the embedding-based diversity metrics")
    parser.add_argument(
        "--cluster-threshold",
        type=float,
        default=0.9,
        help="cosine at which two correct solutions are one cluster (default %(default)s)",
    )
    gen = parser.add_argument_group("generation with vLLM (GPU)")
    gen.add_argument("--generate", metavar="MODEL", help="sample the --benchmark problems with this model first")
    gen.add_argument("--name", help="run name of the generated samples (default: the model's folder name)")
    gen.add_argument("-k", "--samples", type=int, default=16, help="samples per problem (default %(default)s)")
    gen.add_argument("--temperature", type=float, default=0.6, help="(default %(default)s)")
    gen.add_argument("--top-p", type=float, default=0.95, help="(default %(default)s)")
    gen.add_argument("--max-tokens", type=int, default=8192, help="most tokens per sample (default %(default)s)")
    gen.add_argument("--tp", type=int, default=1, help="tensor parallel size (default %(default)s)")
    gen.add_argument("--seed", type=int, default=0, help="sampling seed (default %(default)s)")
    gen.add_argument(
        "--instruction",
        choices=sorted(INSTRUCTIONS),
        default="dapo",
        help="wraps bare problems (verl parquet prompts are used as they are) (default %(default)s)",
    )
    add_encoder_arguments(parser)
    add_config_argument(parser)
    parser.set_defaults(handler=run)


def _rows(path: str):
    """(where, row) of a JSONL file through the commands' reader (UTF-8, one object a line: a bad line is one error
    naming it), or of a parquet file."""
    from gcpo_core.evaluation.evaluate import read_rows

    if Path(path).suffix == ".parquet":
        yield from read_rows(path)
        return
    for number, record in read_jsonl(path):
        yield f"{path}:{number}", record


def _runs(args, benchmarks) -> dict[str, list]:
    from gcpo_core.evaluation.evaluate import generations_from_rows

    specs = [(Path(p).stem, p, None) for p in args.generations]
    for item in args.run:
        name, equals, path = item.partition("=")
        if not equals:
            raise CommandError(f"--run needs NAME=GENERATIONS.jsonl, got {item!r}")
        if not name or not path:
            missing = "no name before" if not name else "no file after"
            raise CommandError(f"--run {item}: {missing} '=' (NAME=GENERATIONS.jsonl)")
        specs.append((name, path, f"--run {name}="))
    runs = {}
    for name, path, flag in specs:
        if name in runs:
            raise CommandError(f"two runs are named {name!r}")
        problem = FLAG_RULES["generations"].problem(path) if flag is not None else None  # --run's file
        if problem:
            raise CommandError(f"{flag}{path}: {problem}")
        try:
            runs[name] = generations_from_rows(_rows(path), path, benchmarks)
        except ValueError as err:
            raise CommandError(one_line(err)) from None
    return runs


def _check_ks(ks, runs: dict[str, list]) -> None:
    """Every k of --ks at most the samples per problem of every run and benchmark (pass@k of more samples than
    were drawn is not defined)."""
    if not ks:
        return
    for name, problems in runs.items():
        fewest: dict[str, int] = {}
        for problem in problems:
            fewest[problem.benchmark] = min(
                fewest.get(problem.benchmark, len(problem.responses)), len(problem.responses)
            )
        for benchmark, samples in fewest.items():
            if max(ks) > samples:
                raise CommandError(
                    f"--ks {max(ks)}: run {name!r} has {samples} sample(s) per problem on {benchmark} (its fewest); "
                    f"pass@k needs 1 <= k <= {samples}"
                )


def run(args: argparse.Namespace) -> int:
    from gcpo_core.evaluation.evaluate import (
        benchmark_from_rows,
        benchmark_metrics,
        generate_with_vllm,
        score_generations,
        write_generations,
    )

    benchmarks = []  # every flag, --benchmark and generation file included, was checked by main (FLAG_RULES)
    for path in args.benchmark:
        try:
            benchmarks += benchmark_from_rows(_rows(path), path)
        except ValueError as err:
            raise CommandError(one_line(err)) from None
    runs = _runs(args, benchmarks)
    if not runs and not args.generate:
        raise CommandError("nothing to evaluate: give generation files, --run NAME=FILE or --generate MODEL")
    _check_ks(args.ks, runs)  # before sampling: a mistake is found before the GPU's minutes are spent
    if args.generate:
        if not benchmarks:
            raise CommandError("--generate needs --benchmark files with the problems to sample")
        if args.ks and max(args.ks) > args.samples:
            raise CommandError(
                f"--ks {max(args.ks)}: -k/--samples {args.samples} samples per problem; pass@k needs k <= {args.samples}"
            )
        name = args.name or Path(args.generate.rstrip("/")).name
        try:
            generated = generate_with_vllm(
                args.generate,
                benchmarks,
                args.samples,
                args.temperature,
                args.top_p,
                args.max_tokens,
                args.tp,
                args.seed,
                args.instruction,
            )
        except RuntimeError as err:
            raise CommandError(str(err)) from None
        write_generations(generated, args.out_dir / f"generations_{name}.jsonl")
        runs[name] = generated

    embed = None
    if not args.no_embeddings:
        encoder = load_encoder(args)
        embed = lambda texts: encoder.encode(texts).embeddings.cpu().numpy()  # noqa: E731

    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, problems in runs.items():
        by_benchmark = defaultdict(list)
        for scored in score_generations(problems):
            by_benchmark[scored.generations.benchmark].append(scored)
        results[name] = {
            b: benchmark_metrics(s, embed, args.ks, args.cluster_threshold) for b, s in by_benchmark.items()
        }
    write_results(results, args.out_dir)
    print(markdown_table(results))
    print(f"\nresults and plots in {args.out_dir}/", file=sys.stderr)
    return 0


def _row(metrics: dict[str, float]) -> dict[str, float]:
    row = dict(metrics)
    row["avg"] = next(v for k, v in metrics.items() if k.startswith("avg@"))
    passes = sorted((int(k.split("@")[1]), v) for k, v in metrics.items() if k.startswith("pass@"))
    row["pass_max"] = passes[-1][1] if passes else math.nan
    return row


def markdown_table(results: dict) -> str:
    lines = [
        "| run | benchmark | " + " | ".join(label for _, label, _ in TABLE_COLUMNS) + " |",
        "|---|---|" + "---:|" * len(TABLE_COLUMNS),
    ]
    for run_name, per_benchmark in results.items():
        for benchmark, metrics in sorted(per_benchmark.items()):
            row = _row(metrics)
            cells = [
                fmt.format(row[key]) if key in row and not math.isnan(row[key]) else "–"
                for key, _, fmt in TABLE_COLUMNS
            ]
            lines.append(f"| {run_name} | {benchmark} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_results(results: dict, out_dir: Path) -> None:
    from gcpo_core.evaluation.plots import accuracy_vs_diversity, pass_at_k_curves

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, allow_nan=True), encoding="utf-8")
    (out_dir / "results.md").write_text(markdown_table(results) + "\n", encoding="utf-8")
    keys = sorted({k for per in results.values() for m in per.values() for k in m})
    with open(out_dir / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "benchmark", *keys])
        for run_name, per_benchmark in results.items():
            for benchmark, metrics in sorted(per_benchmark.items()):
                writer.writerow([run_name, benchmark, *[metrics.get(k, "") for k in keys]])
    for benchmark in sorted({b for per in results.values() for b in per}):
        pass_at_k_curves(results, benchmark, out_dir / f"pass_at_k_{benchmark}.png")
    has_vendi = any("correct_vendi" in m for per in results.values() for m in per.values())
    accuracy_vs_diversity(
        results, "correct_vendi" if has_vendi else "correct_distinct_4", out_dir / "accuracy_vs_diversity.png"
    )
