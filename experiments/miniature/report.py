"""Held-out metrics of the miniature's runs, from verl's validation dumps (``trainer.validation_data_dir``: one
JSON line per sampled answer, with its prompt, answer and ground truth) and its metrics file.

Per run and evaluation step: accuracy (avg@n), unbiased pass@k for k = 1, ..., n, distinct correct answers
per prompt **among 16 samples** (``DISTINCT_AMONG``: the plain count when a prompt has 16 or fewer, the unbiased
estimate of :func:`expected_distinct` from more, so tables stay comparable whatever ``--eval-samples``), coverage
(those distinct correct answers / the prompt's answer set), the entropy of the
sampled answers (nats, per prompt; the policy's entropy over whole answers) and of the correct ones alone (how
evenly the correct samples spread over distinct answers, whatever the accuracy; 0 when fewer than two differ). Per run: the mean step time (steps
after the first) and the training metrics over steps (``actor/entropy``, ``gcpo/*``).
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np
from scipy import stats

from experiments.miniature.arms import CREDIT_SHAPE_ARMS, DIAL_ARMS, ROLLOUTS
from experiments.miniature.task import answer_set, is_correct, parse_answer
from gcpo_core.evaluation.evaluate import pass_at_k


def _entropy(counts: Counter) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log(c / total) for c in counts.values()) if total else 0.0


# distinct correct answers (and coverage) are counted among this many samples of a prompt, however many were drawn
DISTINCT_AMONG = 16


def expected_distinct(counts: Mapping[str, int], n: int, k: int = DISTINCT_AMONG) -> float:
    """The expected number of distinct answers among ``k`` of a prompt's ``n`` samples drawn without replacement,
    where answer a occurs ``counts[a]`` times among the ``n``: sum over a of 1 - C(n - c_a, k) / C(n, k) (a is
    missed only when all k draws come from the other n - c_a samples). Unbiased for the count among k fresh samples;
    the plain count ``len(counts)`` when ``n <= k`` (all of them drawn)."""
    if any(c < 0 for c in counts.values()) or sum(counts.values()) > n:
        raise ValueError(f"counts {dict(counts)} do not fit in {n} samples")
    if n <= k:
        return float(sum(1 for c in counts.values() if c > 0))
    total = math.comb(n, k)
    return float(sum(1 - math.comb(n - c, k) / total for c in counts.values() if c > 0))


def prompt_metrics(category: str, responses: list[str]) -> dict[str, float]:
    """The metrics of one prompt's ``n`` sampled responses (distinct correct answers among ``DISTINCT_AMONG``)."""
    n = len(responses)
    if n == 0:
        raise ValueError("a prompt without responses")
    correct = [r for r in responses if is_correct(r, category)]
    distinct = expected_distinct(Counter(parse_answer(r) for r in correct), n)
    metrics = {
        "accuracy": len(correct) / n,
        "distinct_correct": distinct,
        "coverage": distinct / len(answer_set(category)),
        "answer_entropy": _entropy(Counter(parse_answer(r) or "<malformed>" for r in responses)),
        "correct_entropy": _entropy(Counter(parse_answer(r) for r in correct)),
    }
    for k in range(1, n + 1):
        metrics[f"pass@{k}"] = pass_at_k(n, len(correct), k)
    return metrics


def eval_metrics(dump: Path) -> dict[str, float]:
    """Mean over prompts of :func:`prompt_metrics`, for one validation dump (``<step>.jsonl``)."""
    groups: dict[str, list[str]] = defaultdict(list)
    categories: dict[str, str] = {}
    for line in dump.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        groups[row["input"]].append(row["output"])
        categories[row["input"]] = str(row["gts"])
    if not groups:
        raise ValueError(f"{dump} holds no samples")
    sizes = {len(v) for v in groups.values()}
    if len(sizes) != 1:
        raise ValueError(f"{dump}: prompts have different numbers of samples {sorted(sizes)}")
    per_prompt = [prompt_metrics(categories[p], r) for p, r in groups.items()]
    return {key: float(np.mean([m[key] for m in per_prompt])) for key in per_prompt[0]} | {
        "prompts": len(groups),
        "samples": sizes.pop(),
    }


def read_metrics(path: Path) -> dict[int, dict[str, float]]:
    """verl's file logger lines, by step."""
    steps: dict[int, dict[str, float]] = {}
    if not path.is_file():
        return steps
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a run stopped mid-line
        steps.setdefault(int(row["step"]), {}).update(row.get("data", {}))
    return steps


TRAINING_KEYS = (
    "actor/entropy",
    "critic/score/mean",
    "gcpo/effective_solutions/mean",
    "gcpo/all_correct_groups",
    "gcpo/all_correct_adv_abs",
    "gcpo/mixed_adv_abs",
)


# a training series of every run that has it: the share of a step's groups whose rollouts are all correct
ALL_CORRECT_SHARE = "all_correct_share"


def dumped_all_correct_share(folder: Path) -> dict[int, float]:
    """Per training step, the share of groups whose rollouts all scored > 0, from verl's dumps of the step's training
    rollouts (``rollouts/<step>.jsonl``, written with ``run --dump-rollouts``: a line per rollout with its ``score``
    and its ``uid`` key ``<prompt uid>_<session>_<output>``, so a group is the key's prompt part; the prompt's text
    where a line has no such key). {} when the run dumped none."""
    shares = {}
    for path in sorted((folder / ROLLOUTS).glob("*.jsonl")):
        groups: dict[str, list[bool]] = defaultdict(list)
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a run stopped mid-line
            key = row.get("uid")
            group = key.rsplit("_", 2)[0] if isinstance(key, str) and key.count("_") >= 2 else str(row["input"])
            groups[group].append(float(row["score"]) > 0)
        if groups:
            shares[int(path.stem)] = sum(all(g) for g in groups.values()) / len(groups)
    return shares


def all_correct_share(folder: Path, metrics: Mapping[int, Mapping[str, float]]) -> dict[int, float]:
    """Per training step, the share of all-correct groups: from the run's rollout dumps (every arm, GRPO's included),
    else from GCPO's own ``gcpo/all_correct_groups`` / ``gcpo/groups`` (the arms that compute credit)."""
    dumped = dumped_all_correct_share(folder)
    if dumped:
        return dumped
    return {
        s: m["gcpo/all_correct_groups"] / m["gcpo/groups"]
        for s, m in metrics.items()
        if m.get("gcpo/groups") and "gcpo/all_correct_groups" in m
    }


def run_summary(folder: Path) -> dict:
    """One run: its evaluation curve, step time and training curves (with the all-correct share where known)."""
    evals = {int(p.stem): eval_metrics(p) for p in sorted((folder / "heldout").glob("*.jsonl"))}
    metrics = read_metrics(folder / "metrics.jsonl")
    step_times = [m["timing_s/step"] for s, m in sorted(metrics.items()) if s > 1 and "timing_s/step" in m]
    training = {
        key: {s: m[key] for s, m in metrics.items() if key in m}
        for key in TRAINING_KEYS
        if any(key in m for m in metrics.values())
    }
    share = all_correct_share(folder, metrics)
    if share:
        training[ALL_CORRECT_SHARE] = share
    return {"evals": evals, "step_s": float(np.mean(step_times)) if step_times else float("nan"), "training": training}


def _series(run: Mapping, key: str) -> dict[int, float]:
    """A run's training series by integer step (results read back from JSON have string keys)."""
    return {int(s): float(v) for s, v in run.get("training", {}).get(key, {}).items()}


def all_correct_table(runs: Mapping[str, Mapping[int, dict]], every: int = 10) -> str:
    """Markdown: each arm's share of all-correct groups (mean over its seeds) at step 1 and every ``every`` steps,
    and over the last 20 steps; "" when no run has the series (runs without rollout dumps or GCPO's metrics)."""
    series = {arm: [_series(r, ALL_CORRECT_SHARE) for r in seeds.values()] for arm, seeds in runs.items()}
    series = {arm: [x for x in runs_ if x] for arm, runs_ in series.items()}
    series = {arm: runs_ for arm, runs_ in series.items() if runs_}
    if not series:
        return ""
    last = max(max(x) for runs_ in series.values() for x in runs_)
    steps = sorted({1, *range(every, last + 1, every)})
    lines = [
        "Share of all-correct groups in training (mean over seeds; GRPO's advantage is 0 there):",
        "",
        "| arm | runs | " + " | ".join(f"step {s}" for s in steps) + f" | steps {max(1, last - 19)}-{last} |",
        "|---" * (len(steps) + 3) + "|",
    ]
    for arm, runs_ in series.items():
        cells = []
        for s in steps:
            values = [x[s] for x in runs_ if s in x]
            cells.append(f"{np.mean(values):.2f}" if values else "-")
        # the last 20 steps of the longest runs (an arm that stopped earlier, as gcpo_loo at 40, shows "-")
        tail = [np.mean([v for t, v in x.items() if t > last - 20]) for x in runs_ if max(x) == last]
        cells.append(f"{np.mean(tail):.2f}" if tail else "-")
        lines.append(f"| {arm} | {len(runs_)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def collect(out: Path) -> dict[str, dict[int, dict]]:
    """Every finished run under ``out/runs`` (``<arm>-seed<seed>`` with a ``done.json``), by arm and seed, with its
    wall time, warm start and budget from ``done.json``."""
    runs: dict[str, dict[int, dict]] = defaultdict(dict)
    for done in sorted((out / "runs").glob("*/done.json")):
        record = json.loads(done.read_text())
        runs[record["arm"]][int(record["seed"])] = run_summary(done.parent) | {
            "wall_s": record["wall_s"],
            "warm_seed": record.get("warm_seed"),
            "warm_start_sha256": record.get("warm_start_sha256"),
            "started_at": record.get("started_at"),
            "spec": record.get("spec"),
        }
    return dict(runs)


def mean_sd(values: Iterable[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return float("nan"), float("nan")
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


TABLE_KEYS = (
    "accuracy",
    "pass@1",
    "pass@4",
    "pass@16",
    "distinct_correct",
    "coverage",
    "correct_entropy",
    "answer_entropy",
)


def _shared_step_and_keys(runs: Mapping[str, Mapping[int, dict]], step: Optional[int]) -> tuple[int, list[str]]:
    """``step`` (default: the last evaluation every run has) and the table's metrics every run has there."""
    if not runs:
        raise ValueError("no finished runs")
    common = set.intersection(*(set(r["evals"]) for seeds in runs.values() for r in seeds.values()))
    if not common:
        raise ValueError("the runs share no evaluation step")
    step = max(common) if step is None else step
    return step, [
        k for k in TABLE_KEYS if all(k in r["evals"][step] for seeds in runs.values() for r in seeds.values())
    ]


def final_table(runs: Mapping[str, Mapping[int, dict]], step: Optional[int] = None) -> str:
    """Markdown: one row per arm, mean ± sd over seeds at ``step`` (default: the last evaluation all runs have),
    the start (step 0, every run's) in the first row: one start for all, or one per seed."""
    step, keys = _shared_step_and_keys(runs, step)
    lines = ["| arm | seeds | " + " | ".join(keys) + " | s/step |", "|---" * (len(keys) + 3) + "|"]
    # every run evaluates its start before training (with its own sampling seed): all of them make the start's row,
    # whose spread is the evaluation's sampling noise for a shared start, and includes the starts' own for several
    start = [r["evals"][0] for seeds in runs.values() for r in seeds.values() if 0 in r["evals"]]
    if start:
        lines.append(
            f"| start (step 0) | {len(start)} | "
            + " | ".join("%.3f ± %.3f" % mean_sd(e[k] for e in start) for k in keys)
            + " | |"
        )
    for arm, seeds in runs.items():
        cells = ["%.3f ± %.3f" % mean_sd(r["evals"][step][k] for r in seeds.values()) for k in keys]
        lines.append(
            f"| {arm} (step {step}) | {len(seeds)} | "
            + " | ".join(cells)
            + " | %.1f ± %.1f |" % mean_sd(r["step_s"] for r in seeds.values())
        )
    note = distinct_note(runs)
    return "\n".join(lines) + (f"\n\n{note}" if note else "")


def distinct_note(runs: Mapping[str, Mapping[int, dict]]) -> str:
    """What ``distinct_correct`` and ``coverage`` count: among 16 samples a prompt, estimated without bias where the
    runs drew more; "" where the evaluations do not say how many they drew (results from before they did)."""
    drawn = {e.get("samples") for seeds in runs.values() for r in seeds.values() for e in r["evals"].values()}
    if None in drawn or not drawn:
        return ""
    counts = "/".join(str(n) for n in sorted(drawn))
    if max(drawn) <= DISTINCT_AMONG:
        among = "16" if drawn == {DISTINCT_AMONG} else f"the {counts} drawn (fewer than 16)"
        return f"distinct_correct and coverage: among {among} samples a prompt."
    return (
        f"distinct_correct and coverage: among {DISTINCT_AMONG} samples a prompt, estimated without bias from the "
        f"{counts} drawn (Σ over correct answers a of 1 − C(n − c_a, 16) / C(n, 16))."
    )


def warm_starts_line(runs: Mapping[str, Mapping[int, dict]]) -> str:
    """Which warm start each seed trained from, e.g. ``Warm starts: seed 1 from start 1, seed 2 from start 2.``"""
    by_seed: dict[int, set] = defaultdict(set)
    for seeds in runs.values():
        for seed, run in seeds.items():
            by_seed[seed].add(run.get("warm_seed"))
    named = ", ".join(
        f"seed {seed} from start {'/'.join(str(w) for w in sorted(starts, key=str))}"
        for seed, starts in sorted(by_seed.items())
    )
    return f"Warm starts: {named}."


def _seed_pairs(
    arm: Mapping[int, dict], baseline: Mapping[int, dict], step: int, key: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``key`` at ``step`` of the seeds both arms ran, in seed order: the arm's, the baseline's, their difference."""
    shared = sorted(set(arm) & set(baseline))
    ours = np.array([arm[s]["evals"][step][key] for s in shared], dtype=np.float64)
    theirs = np.array([baseline[s]["evals"][step][key] for s in shared], dtype=np.float64)
    return ours, theirs, ours - theirs


def paired_table(runs: Mapping[str, Mapping[int, dict]], baseline: str = "grpo", step: Optional[int] = None) -> str:
    """Markdown: each other arm minus ``baseline`` at ``step``, seed by seed (a seed fixes the data order, so the
    arms of one seed saw the same prompts): mean ± sd of the differences and the seeds where the arm is higher."""
    if baseline not in runs:
        raise ValueError(f"no {baseline} runs to compare with")
    step, keys = _shared_step_and_keys(runs, step)
    lines = [f"| arm − {baseline} (step {step}) | seeds | " + " | ".join(keys) + " |", "|---" * (len(keys) + 2) + "|"]
    for arm, seeds in runs.items():
        if arm == baseline:
            continue
        cells = []
        for key in keys:
            _, _, diffs = _seed_pairs(seeds, runs[baseline], step, key)
            mean, sd = mean_sd(diffs)
            cells.append(f"{mean:+.3f} ± {sd:.3f} ({int(np.sum(diffs > 0))}/{len(diffs)} higher)")
        lines.append(f"| {arm} | {len(set(seeds) & set(runs[baseline]))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


TEST_KEYS = ("accuracy", "pass@16", "distinct_correct", "answer_entropy")


def _p(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.3f}"


def paired_tests(
    runs: Mapping[str, Mapping[int, dict]],
    baseline: str = "grpo",
    step: Optional[int] = None,
    keys: Iterable[str] = TEST_KEYS,
    confidence: float = 0.95,
) -> str:
    """Markdown: is each other arm different from ``baseline`` at ``step``? Over the seeds both arms ran (a seed
    fixes the start and the data order, so the runs pair up), per metric: the mean difference, its Student-t
    confidence interval, the two-sided p of the paired t-test and of the Wilcoxon signed-rank test (exact when the
    differences are untied and non-zero), and the seeds where the arm is higher. "n/a" where a test is undefined:
    fewer than two pairs, or every difference zero."""
    if baseline not in runs:
        raise ValueError(f"no {baseline} runs to compare with")
    pairs = [(arm, baseline) for arm in runs if arm != baseline]
    return _tests_table(runs, pairs, f"arm − {baseline}", lambda arm, _: arm, step, keys, confidence)


# The ablation's questions (issue 47), each arm against the arm it is tested against: does Shapley credit beat
# leave-one-out credit, and does either beat the additive diversity bonus?
ABLATION_PAIRS = (("gcpo_group", "gcpo_loo"), ("gcpo_group", "dqo"), ("gcpo_loo", "dqo"))


def ablation_tests(
    runs: Mapping[str, Mapping[int, dict]],
    step: Optional[int] = None,
    keys: Iterable[str] = TEST_KEYS,
    confidence: float = 0.95,
) -> str:
    """Markdown: :func:`paired_tests`' columns for each pair of ``ABLATION_PAIRS`` whose arms both ran, a row per
    pair and metric (``gcpo_group − gcpo_loo``); "" when no pair ran."""
    pairs = [(arm, baseline) for arm, baseline in ABLATION_PAIRS if arm in runs and baseline in runs]
    if not pairs:
        return ""
    return _tests_table(runs, pairs, "pair", lambda arm, baseline: f"{arm} − {baseline}", step, keys, confidence)


def _tests_table(runs, pairs, title, label, step, keys, confidence) -> str:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    step, shared_keys = _shared_step_and_keys(runs, step)
    level = f"{confidence:.0%}".replace("%", " %")
    lines = [
        f"| {title} (step {step}) | metric | seeds | mean | {level} CI | paired t p | Wilcoxon p | higher |",
        "|---" * 8 + "|",
    ]
    for arm, baseline in pairs:
        for key in (k for k in keys if k in shared_keys):
            ours, theirs, diffs = _seed_pairs(runs[arm], runs[baseline], step, key)
            low = high = t_p = w_p = float("nan")
            if len(diffs) >= 2 and np.any(diffs != 0):
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # a constant difference: t is infinite
                    ttest = stats.ttest_rel(ours, theirs)
                    low, high = (float(x) for x in ttest.confidence_interval(confidence))
                    t_p, w_p = float(ttest.pvalue), float(stats.wilcoxon(diffs).pvalue)
            ci = "n/a" if not math.isfinite(low) else f"[{low:+.3f}, {high:+.3f}]"
            mean = "n/a" if not len(diffs) else f"{diffs.mean():+.3f}"
            lines.append(
                f"| {label(arm, baseline)} | {key} | {len(diffs)} | {mean} | {ci} | {_p(t_p)} | {_p(w_p)} | "
                f"{int(np.sum(diffs > 0))}/{len(diffs)} |"
            )
    return "\n".join(lines)


# The credit-shape run (issue 56), pre-registered in docs/miniature.md on 2026-11-27 before any run: four arms,
# seeds 101-116, step 40; the constants below are the criterion's and are not to change once a run has started.
SHAPE_ARMS = CREDIT_SHAPE_ARMS
SHAPE_SEEDS: tuple[int, ...] = tuple(range(101, 117))
SHAPE_STEP = 40
ACCURACY_MARGIN = 0.05  # matched accuracy: the 90 % paired-t interval of the accuracy difference inside ±0.05
DISTINCT_MARGIN = 0.5  # "the same frontier within half an answer": the 90 % interval of D_adj inside ±0.5
ADJUST_SLOPE = 5.5  # D_adj = ΔD − 5.5 · ΔAcc (issue 47's within-seed slope, answers per unit of accuracy)
SENSITIVITY_SLOPE = -2.7  # the simulator's slope along the doses: reported, decides nothing
TOST_ALPHA = 0.05  # each one-sided test of a TOST
FAMILY_ALPHA = 0.05  # Holm-Bonferroni over H1-H3
ADJUSTED = "distinct_adj"  # the metric name of D_adj
SHAPE_SECONDARY_KEYS = ("distinct_correct", "answer_entropy", "correct_entropy", "coverage", "pass@16")


@dataclass(frozen=True)
class Hypothesis:
    name: str
    arm: str
    baseline: str
    metric: str  # ADJUSTED or a key of the evaluations
    what: str


SHAPE_HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis("H1", "gcpo_group", "gcpo_loo_mix4", ADJUSTED, "shape at matched strength"),
    Hypothesis("H2", "gcpo_loo", "gcpo_group", "distinct_correct", "strength at one dose"),
    Hypothesis("H3", "gcpo_group", "grpo", "distinct_correct", "replication"),
)


def paired_differences(
    runs: Mapping[str, Mapping[int, dict]],
    arm: str,
    baseline: str,
    step: int,
    metric: str,
    seeds: Optional[Iterable[int]] = None,
    slope: float = ADJUST_SLOPE,
) -> np.ndarray:
    """``arm − baseline`` in ``metric`` at ``step``, seed by seed over the seeds both ran (of ``seeds`` when given),
    in seed order. ``ADJUSTED`` is D_adj = Δ distinct_correct − ``slope`` · Δ accuracy."""
    shared = sorted(set(runs[arm]) & set(runs[baseline]) & (set(seeds) if seeds is not None else set(runs[arm])))

    def delta(key):
        return np.array(
            [runs[arm][s]["evals"][step][key] - runs[baseline][s]["evals"][step][key] for s in shared],
            dtype=np.float64,
        )

    if metric == ADJUSTED:
        return delta("distinct_correct") - slope * delta("accuracy")
    return delta(metric)


def paired_t(diffs: Sequence[float], confidence: float = 0.95) -> dict[str, float]:
    """Mean, ``confidence`` Student-t interval and two-sided p of the one-sample t test of paired ``diffs`` against 0
    (scipy's ``ttest_1samp``). Differences all equal: the interval is that value, p is 0 (all non-zero) or 1 (all
    zero). Fewer than two: NaN."""
    d = np.asarray(diffs, dtype=np.float64)
    nan = float("nan")
    if len(d) < 2:
        return {"n": len(d), "mean": float(d.mean()) if len(d) else nan, "low": nan, "high": nan, "p": nan}
    mean = float(d.mean())
    if np.all(d == d[0]):
        return {"n": len(d), "mean": mean, "low": mean, "high": mean, "p": 0.0 if mean != 0 else 1.0}
    test = stats.ttest_1samp(d, 0.0)
    low, high = (float(x) for x in test.confidence_interval(confidence))
    return {"n": len(d), "mean": mean, "low": low, "high": high, "p": float(test.pvalue)}


def tost(diffs: Sequence[float], margin: float, alpha: float = TOST_ALPHA) -> dict:
    """Two one-sided paired t tests of equivalence within ±``margin``: H0 μ ≤ −margin and H0 μ ≥ +margin, each at
    ``alpha``. ``p`` is the larger one-sided p; ``equivalent`` when it is below ``alpha``, the same as the
    (1 − 2 alpha) paired-t interval (``low``, ``high``) lying inside (−margin, +margin)."""
    if not margin > 0 or not 0 < alpha < 0.5:
        raise ValueError(f"a TOST needs margin > 0 and 0 < alpha < 0.5, got {margin}, {alpha}")
    d = np.asarray(diffs, dtype=np.float64)
    t = paired_t(d, confidence=1 - 2 * alpha)
    if len(d) < 2:
        p = float("nan")
    elif np.all(d == d[0]):
        p = 0.0 if abs(t["mean"]) < margin else 1.0
    else:
        above = stats.ttest_1samp(d, -margin, alternative="greater").pvalue
        below = stats.ttest_1samp(d, margin, alternative="less").pvalue
        p = float(max(above, below))
    return {**t, "p": p, "margin": margin, "equivalent": bool(math.isfinite(p) and p < alpha)}


def holm(pvalues: Mapping[str, float], alpha: float = FAMILY_ALPHA) -> dict[str, dict]:
    """Holm-Bonferroni over ``pvalues`` (by name): with p sorted ascending, p_(i) is adjusted to
    max_{j ≤ i} min(1, (m − j + 1) · p_(j)) and its hypothesis rejected when that is at most ``alpha`` (the step-down
    procedure, family-wise error ``alpha``). An undefined p (NaN) counts as 1."""
    m = len(pvalues)
    order = sorted(pvalues, key=lambda k: 1.0 if not math.isfinite(pvalues[k]) else pvalues[k])
    result, running = {}, 0.0
    for i, name in enumerate(order):
        p = pvalues[name] if math.isfinite(pvalues[name]) else 1.0
        running = max(running, min(1.0, (m - i) * p))
        result[name] = {"p": pvalues[name], "p_holm": running, "rejected": running <= alpha}
    return {name: result[name] for name in pvalues}


def shape_verdict(accuracy: Mapping, h1_rejected: bool, adjusted: Mapping, adjusted_tost: Mapping) -> str:
    """The pre-registered verdict on H1 (docs/miniature.md, "The credit-shape run"), from the accuracy TOST of
    ``gcpo_group − gcpo_loo_mix4``, whether H1 is rejected after Holm, D_adj's paired t (``adjusted``) and the TOST of
    D_adj within ±0.5 answers (``adjusted_tost``, its 90 % interval)."""
    interval = f"[{adjusted_tost['low']:+.3f}, {adjusted_tost['high']:+.3f}]"
    if not accuracy["equivalent"]:
        return (
            f"**The dose match failed**: the accuracy difference's 90 % interval [{accuracy['low']:+.3f}, "
            f"{accuracy['high']:+.3f}] is not inside ±{accuracy['margin']}. The pair is reported as a trade "
            f"(D_adj {adjusted['mean']:+.3f}, 90 % {interval}); no shape verdict is given."
        )
    if h1_rejected:
        side = "above" if adjusted["mean"] > 0 else "below"
        return (
            f"**Shapley's frontier lies {side} leave-one-out's** on the real path: D_adj {adjusted['mean']:+.3f} "
            f"[{adjusted['low']:+.3f}, {adjusted['high']:+.3f}] (95 %), rejected after Holm, at matched accuracy."
        )
    if adjusted_tost["equivalent"]:
        return (
            f"**The same frontier within half an answer** (the simulator's prediction): H1 not rejected, D_adj "
            f"{adjusted['mean']:+.3f}, 90 % interval {interval} inside ±{adjusted_tost['margin']}."
        )
    return (
        f"**Not distinguishable at this resolution**: H1 not rejected, D_adj {adjusted['mean']:+.3f}, 90 % interval "
        f"{interval}, not inside ±{adjusted_tost['margin']}."
    )


def credit_shape_analysis(
    runs: Mapping[str, Mapping[int, dict]], step: int = SHAPE_STEP, seeds: Sequence[int] = SHAPE_SEEDS
) -> dict:
    """The pre-registered analysis of the credit-shape run at ``step`` over ``seeds`` (the seeds all four arms ran):
    each hypothesis's paired t and Holm's adjustment, each pair's accuracy TOST (±0.05), D_adj's TOST (±0.5) and its
    sensitivity slope, and the verdicts, which are given (``complete``) only when every arm has every seed."""
    have = {arm: sorted(set(runs.get(arm, {})) & set(seeds)) for arm in SHAPE_ARMS}
    # the verdict is the pre-registered step's, over every seed of every arm
    complete = step == SHAPE_STEP and all(len(have[arm]) == len(seeds) for arm in SHAPE_ARMS)
    shared = sorted(set(seeds).intersection(*(set(v) for v in have.values())))
    missing_step = [f"{a} seed {s}" for a in SHAPE_ARMS for s in shared if step not in runs[a][s]["evals"]]
    if missing_step:
        raise ValueError(f"no evaluation at step {step} for {', '.join(missing_step)}")
    result = {"step": step, "seeds": shared, "runs_in": have, "expected": len(seeds), "complete": complete}
    tests = {}
    for h in SHAPE_HYPOTHESES:
        diffs = paired_differences(runs, h.arm, h.baseline, step, h.metric, shared)
        accuracy = paired_differences(runs, h.arm, h.baseline, step, "accuracy", shared)
        tests[h.name] = {
            "hypothesis": h,
            "t": paired_t(diffs),
            "accuracy": paired_t(accuracy),
            "accuracy_tost": tost(accuracy, ACCURACY_MARGIN),
        }
    for name, adjusted in holm({name: t["t"]["p"] for name, t in tests.items()}).items():
        tests[name]["holm"] = adjusted
    h1 = SHAPE_HYPOTHESES[0]
    adjusted = paired_differences(runs, h1.arm, h1.baseline, step, ADJUSTED, shared)
    result["adjusted_tost"] = tost(adjusted, DISTINCT_MARGIN)
    result["sensitivity"] = paired_t(
        paired_differences(runs, h1.arm, h1.baseline, step, ADJUSTED, shared, slope=SENSITIVITY_SLOPE)
    )
    result["raw_h1"] = paired_t(paired_differences(runs, h1.arm, h1.baseline, step, "distinct_correct", shared))
    result["tests"] = tests
    if complete:
        t1 = tests["H1"]
        result["verdict"] = shape_verdict(t1["accuracy_tost"], t1["holm"]["rejected"], t1["t"], result["adjusted_tost"])
        result["verdicts_h2_h3"] = [_judged_like_the_ablation(tests[n]) for n in ("H2", "H3")]
    return result


def _interval(t: Mapping) -> str:
    return "n/a" if not math.isfinite(t["low"]) else f"[{t['low']:+.3f}, {t['high']:+.3f}]"


def _judged_like_the_ablation(test: Mapping) -> str:
    h, t, acc = test["hypothesis"], test["t"], test["accuracy"]
    outcome = "rejected" if test["holm"]["rejected"] else "not rejected"
    return (
        f"{h.name} ({h.what}, {h.arm} − {h.baseline}, raw distinct correct among 16): **{outcome}** after Holm "
        f"(p {_p(t['p'])}, Holm p {_p(test['holm']['p_holm'])}): {t['mean']:+.3f} {_interval(t)}, at accuracy "
        f"{acc['mean']:+.3f} {_interval(acc)} (95 % intervals)."
    )


def credit_shape_tests(runs: Mapping[str, Mapping[int, dict]], step: Optional[int] = None) -> str:
    """Markdown of :func:`credit_shape_analysis` when the run's dose-matched arm ran ("" otherwise): the tests
    table, then the verdicts, or how many runs are in."""
    if "gcpo_loo_mix4" not in runs:
        return ""
    if step is None:  # the pre-registered step 40; a shorter budget (a trial) its last shared evaluation
        steps = [set(runs[a][s]["evals"]) for a in SHAPE_ARMS if a in runs for s in runs[a] if s in SHAPE_SEEDS]
        common = set.intersection(*steps) if steps else set()
        step = SHAPE_STEP if SHAPE_STEP in common or not common else max(common)
    a = credit_shape_analysis(runs, step)
    in_so_far = ", ".join(f"{arm} {len(a['runs_in'][arm])}/{a['expected']}" for arm in SHAPE_ARMS)
    total = sum(len(v) for v in a["runs_in"].values())
    title = f"The credit-shape run (issue 56, pre-registered), step {step}, seeds {SHAPE_SEEDS[0]}-{SHAPE_SEEDS[-1]}"
    lines = [f"{title}: {total} of {a['expected'] * len(SHAPE_ARMS)} runs in ({in_so_far})."]
    if len(a["seeds"]) < 2:
        return "\n".join(lines + ["", "No verdict: fewer than two seeds have all four arms."])
    lines += [
        "",
        "| hypothesis | pair | metric | seeds | mean | 95 % CI | paired t p | Holm p | rejected (FWER 0.05) | "
        "accuracy difference [90 % CI] | accuracy matched (±0.05) |",
        "|---" * 11 + "|",
    ]
    for name, t in a["tests"].items():
        h, acc = t["hypothesis"], t["accuracy_tost"]
        metric = "D_adj (5.5)" if h.metric == ADJUSTED else f"{h.metric} (among 16)"
        lines.append(
            f"| {name} | {h.arm} − {h.baseline} | {metric} | {t['t']['n']} | {t['t']['mean']:+.3f} | "
            f"{_interval(t['t'])} | {_p(t['t']['p'])} | {_p(t['holm']['p_holm'])} | "
            f"{'yes' if t['holm']['rejected'] else 'no'} | {acc['mean']:+.3f} {_interval(acc)} | "
            f"{'yes' if acc['equivalent'] else 'no'} |"
        )
    d, sens, raw = a["adjusted_tost"], a["sensitivity"], a["raw_h1"]
    lines += [
        "",
        f"H1's D_adj within ±{DISTINCT_MARGIN} answers (TOST): 90 % interval {_interval(d)}, "
        f"{'inside' if d['equivalent'] else 'not inside'} (p {_p(d['p'])}). Outside the family: raw distinct correct "
        f"among 16 {raw['mean']:+.3f} {_interval(raw)} (p {_p(raw['p'])}); D_adj with the simulator's slope "
        f"{SENSITIVITY_SLOPE} (sensitivity, decides nothing) {sens['mean']:+.3f} {_interval(sens)} (p {_p(sens['p'])}).",
        "",
    ]
    secondary = [
        k for k in SHAPE_SECONDARY_KEYS if all(k in runs[x][s]["evals"][step] for x in SHAPE_ARMS for s in a["seeds"])
    ]
    if secondary:
        shape_runs = {arm: {s: runs[arm][s] for s in a["seeds"]} for arm in SHAPE_ARMS}
        pairs = [(h.arm, h.baseline) for h in SHAPE_HYPOTHESES]
        table = _tests_table(shape_runs, pairs, "pair", lambda x, y: f"{x} − {y}", step, secondary, 0.95)
        lines += ["Secondary, outside the family (decides nothing):", "", table, ""]
    if step != SHAPE_STEP:
        lines.append(f"**No verdict**: the pre-registered step is {SHAPE_STEP}, these runs end at step {step}.")
    elif not a["complete"]:
        lines.append(
            f"**No verdict yet**: it is given only when all {a['expected']} seeds of all {len(SHAPE_ARMS)} arms are in "
            f"({total} of {a['expected'] * len(SHAPE_ARMS)}); the numbers above are interim and decide nothing."
        )
    else:
        lines += [f"Verdict, H1: {a['verdict']}", ""] + [f"Verdict, {v}" for v in a["verdicts_h2_h3"]]
    return "\n".join(lines)


# Issue 72's confirmation, pre-registered in docs/miniature.md ("The dial's confirmation (issue 72)") before any of its
# runs: the dial's four arms (DIAL_ARMS) for 80 steps on seeds 201-208; gcpo_loo for 40 steps on seeds 201-216, against
# gcpo_group's step 40 (of its 80-step runs on 201-208, of 40-step runs on 209-216); held-out evaluations at steps 0, 40
# and 80 with 64 samples a prompt; every run's training rollouts dumped. The constants are the criterion's and are not
# to change once a run has started.
DIAL_SEEDS: tuple[int, ...] = tuple(range(201, 209))
LOO_SEEDS: tuple[int, ...] = tuple(range(201, 217))
DIAL_STEP = 80  # B1-B3 are read here, where all-correct groups are expected to dominate
LOO_STEP = 40  # A1 where the exploratory result was measured (issue 56's step)
DOMINANCE_FROM = 61  # all-correct groups "dominate" when their share over steps 61-80 (the dial's arms, pooled) ...
DOMINANCE_SHARE = 0.5  # ... is above one half
DIAL_WEIGHTS = {"grpo": 0.0, "gcpo_blend25": 0.25, "gcpo_blend75": 0.75, "gcpo_group": 1.0}
# the simulator's share of Shapley alone's gain over GRPO that each blend keeps (docs/frontier.md, G = 8, step 100)
SIMULATED_FRACTION = {"gcpo_blend25": 0.18, "gcpo_blend75": 0.69}
LOO_HYPOTHESIS = Hypothesis("A1", "gcpo_loo", "gcpo_group", ADJUSTED, "leave-one-out alone against Shapley alone")
DIAL_HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis("B1", "gcpo_group", "gcpo_blend25", "distinct_correct", "the dial turned down gives diversity back"),
    Hypothesis("B2", "gcpo_blend75", "grpo", "distinct_correct", "the dial turned up gives diversity"),
    Hypothesis("B3", "gcpo_blend75", "gcpo_blend25", "distinct_correct", "more dose, more diversity"),
)
# every run the verdict needs: (arm, its seeds, the step it must reach)
DIAL_RUNS: tuple[tuple[str, tuple[int, ...], int], ...] = (
    *((arm, DIAL_SEEDS, DIAL_STEP) for arm in DIAL_ARMS),
    ("gcpo_group", tuple(s for s in LOO_SEEDS if s not in DIAL_SEEDS), LOO_STEP),
    ("gcpo_loo", LOO_SEEDS, LOO_STEP),
)


def _has(runs: Mapping[str, Mapping[int, dict]], arm: str, seed: int, step: int) -> bool:
    return seed in runs.get(arm, {}) and step in runs[arm][seed]["evals"]


def dial_analysis(runs: Mapping[str, Mapping[int, dict]]) -> dict:
    """The pre-registered analysis of issue 72's confirmation (docs/miniature.md, "The dial's confirmation (issue 72)").

    Family A, one test at 0.05: A1, ``gcpo_loo − gcpo_group`` in D_adj at step 40 over seeds 201-216, read only where
    the pair's accuracy is equivalent within ±0.05 (TOST). Family B, Holm at 0.05: B1-B3 in raw distinct correct
    answers at step 80 over seeds 201-208, each with its accuracy difference and TOST beside it. The all-correct share
    over steps 61-80 says whether those groups dominated. Verdicts (``complete``) only when every run of
    ``DIAL_RUNS`` is in at its step. A seed's arms must share one warm start (``warm_start_sha256``), or the analysis
    refuses."""
    for seed in LOO_SEEDS:
        hashes = {runs[a][seed].get("warm_start_sha256") for a in runs if seed in runs[a]} - {None}
        if len(hashes) > 1:
            raise ValueError(f"seed {seed}'s arms trained from different warm starts: {sorted(hashes)}")
    have = [(arm, [s for s in seeds if _has(runs, arm, s, step)], len(seeds)) for arm, seeds, step in DIAL_RUNS]
    expected = sum(n for *_, n in have)
    result: dict = {
        "have": have,
        "in": sum(len(got) for _, got, _ in have),
        "expected": expected,
        "complete": all(len(got) == n for _, got, n in have),
    }

    def pair(h: Hypothesis, step: int, seeds: Sequence[int]) -> Optional[dict]:
        shared = [s for s in seeds if _has(runs, h.arm, s, step) and _has(runs, h.baseline, s, step)]
        if len(shared) < 2:
            return None
        accuracy = paired_differences(runs, h.arm, h.baseline, step, "accuracy", shared)
        return {
            "hypothesis": h,
            "step": step,
            "seeds": shared,
            "t": paired_t(paired_differences(runs, h.arm, h.baseline, step, h.metric, shared)),
            "raw": paired_t(paired_differences(runs, h.arm, h.baseline, step, "distinct_correct", shared)),
            "accuracy": paired_t(accuracy),
            "accuracy_tost": tost(accuracy, ACCURACY_MARGIN),
        }

    result["A1"] = pair(LOO_HYPOTHESIS, LOO_STEP, LOO_SEEDS)
    tests = {h.name: pair(h, DIAL_STEP, DIAL_SEEDS) for h in DIAL_HYPOTHESES}
    tests = {name: t for name, t in tests.items() if t is not None}
    for name, adjusted in holm({name: t["t"]["p"] for name, t in tests.items()}).items():
        tests[name]["holm"] = adjusted
    result["B"] = tests
    # the dose-response, outside the families: per seed, distinct correct on the weight (0, 0.25, 0.75, 1)
    trend_seeds = [s for s in DIAL_SEEDS if all(_has(runs, a, s, DIAL_STEP) for a in DIAL_ARMS)]
    weights = np.array([DIAL_WEIGHTS[a] for a in DIAL_ARMS])
    slopes = [
        float(np.polyfit(weights, [runs[a][s]["evals"][DIAL_STEP]["distinct_correct"] for a in DIAL_ARMS], 1)[0])
        for s in trend_seeds
    ]
    result["trend"] = paired_t(slopes)
    shares = [
        v
        for arm in DIAL_ARMS
        for s in DIAL_SEEDS
        if s in runs.get(arm, {})
        for step, v in _series(runs[arm][s], ALL_CORRECT_SHARE).items()
        if DOMINANCE_FROM <= step <= DIAL_STEP
    ]
    result["late_all_correct_share"] = float(np.mean(shares)) if shares else float("nan")
    result["fractions"] = {}
    for arm in SIMULATED_FRACTION:  # each blend's share of Shapley alone's gain over GRPO
        shared = [s for s in DIAL_SEEDS if all(_has(runs, x, s, DIAL_STEP) for x in (arm, "grpo", "gcpo_group"))]
        if len(shared) >= 2:
            gain = paired_differences(runs, "gcpo_group", "grpo", DIAL_STEP, "distinct_correct", shared).mean()
            part = paired_differences(runs, arm, "grpo", DIAL_STEP, "distinct_correct", shared).mean()
            result["fractions"][arm] = float(part / gain) if gain else float("nan")
    if result["complete"]:
        result["verdict_a"] = _loo_verdict(result["A1"])
        result["verdicts_b"] = [_dial_verdict(tests[h.name]) for h in DIAL_HYPOTHESES]
        share = result["late_all_correct_share"]
        result["dominated"] = (
            "not measured (no rollout dumps)"
            if not math.isfinite(share)
            else f"{'yes' if share > DOMINANCE_SHARE else 'no'}: {share:.2f} of the groups over steps "
            f"{DOMINANCE_FROM}-{DIAL_STEP}"
        )
    return result


def _loo_verdict(test: Mapping) -> str:
    t, acc = test["t"], test["accuracy_tost"]
    if not acc["equivalent"]:
        return (
            f"**Accuracy not matched** (90 % interval [{acc['low']:+.3f}, {acc['high']:+.3f}] not inside "
            f"±{acc['margin']}): A1 is reported as a trade (D_adj {t['mean']:+.3f} {_interval(t)}), with no verdict."
        )
    if math.isfinite(t["p"]) and t["p"] < FAMILY_ALPHA:
        side = "above" if t["mean"] > 0 else "below"
        return (
            f"**Leave-one-out alone lies {side} Shapley alone** at matched accuracy: D_adj {t['mean']:+.3f} "
            f"{_interval(t)} (p {_p(t['p'])})."
        )
    return (
        f"**Not distinguishable at this resolution**: D_adj {t['mean']:+.3f} {_interval(t)} (p {_p(t['p'])}); the "
        "exploratory +0.25 is not confirmed."
    )


def _dial_verdict(test: Mapping) -> str:
    h, t, acc = test["hypothesis"], test["t"], test["accuracy"]
    matched = "matched" if test["accuracy_tost"]["equivalent"] else "not matched"
    if test["holm"]["rejected"]:
        outcome = "**confirmed**" if t["mean"] > 0 else "**rejected, the other way**"
    else:
        outcome = "**not rejected**"
    return (
        f"{h.name} ({h.what}, {h.arm} − {h.baseline}, raw distinct correct among 16): {outcome} after Holm "
        f"(p {_p(t['p'])}, Holm p {_p(test['holm']['p_holm'])}): {t['mean']:+.3f} {_interval(t)}, at accuracy "
        f"{acc['mean']:+.3f} {_interval(acc)} (95 %; ±{ACCURACY_MARGIN} TOST: {matched})."
    )


def dial_tests(runs: Mapping[str, Mapping[int, dict]]) -> str:
    """Markdown of :func:`dial_analysis` when a blend arm ran ("" otherwise): the tests, the all-correct share, and the
    verdicts or how many runs are in."""
    if not any(arm in runs for arm in ("gcpo_blend25", "gcpo_blend75")):
        return ""
    a = dial_analysis(runs)
    arms = (*DIAL_ARMS, "gcpo_loo")
    in_so_far = ", ".join(
        f"{arm} to step {step} {len(got)}/{n}" for (arm, got, n), (*_, step) in zip(a["have"], DIAL_RUNS)
    )
    lines = [
        f"The dial's confirmation (issue 72, pre-registered): {a['in']} of {a['expected']} runs in at their steps "
        f"({in_so_far}).",
        "",
        "| hypothesis | pair | step | metric | seeds | mean | 95 % CI | p | Holm p | rejected (FWER 0.05) | "
        "accuracy difference [90 % CI] | accuracy matched (±0.05) |",
        "|---" * 12 + "|",
    ]
    rows = ([("A1", a["A1"])] if a["A1"] else []) + list(a["B"].items())
    for name, t in rows:
        h, acc = t["hypothesis"], t["accuracy_tost"]
        metric = "D_adj (5.5)" if h.metric == ADJUSTED else f"{h.metric} (among 16)"
        holm_p, rejected = (
            (t["holm"]["p_holm"], t["holm"]["rejected"])
            if "holm" in t
            else (t["t"]["p"], math.isfinite(t["t"]["p"]) and t["t"]["p"] < FAMILY_ALPHA)
        )
        lines.append(
            f"| {name} | {h.arm} − {h.baseline} | {t['step']} | {metric} | {t['t']['n']} | {t['t']['mean']:+.3f} | "
            f"{_interval(t['t'])} | {_p(t['t']['p'])} | {_p(holm_p)} | {'yes' if rejected else 'no'} | "
            f"{acc['mean']:+.3f} {_interval(acc)} | {'yes' if acc['equivalent'] else 'no'} |"
        )
    trend = a["trend"]
    lines += [
        "",
        "A1 is a family of one (α 0.05); B1-B3 are Holm's family. Outside both, deciding nothing: the per-seed slope "
        f"of distinct correct on the weight (0, 0.25, 0.75, 1) {trend['mean']:+.3f} {_interval(trend)} "
        f"({trend['n']} seeds); the all-correct share over steps {DOMINANCE_FROM}-{DIAL_STEP}, the dial's arms "
        f"pooled, {a['late_all_correct_share']:.2f}.",
    ]
    if a["A1"]:
        raw = a["A1"]["raw"]
        lines.append(f"A1's raw distinct correct among 16 (outside the family): {raw['mean']:+.3f} {_interval(raw)}.")
    if a["fractions"]:
        lines.append(
            f"Each blend's share of Shapley alone's gain over GRPO in distinct correct at step {DIAL_STEP} (means over "
            "the seeds with the three arms; outside both families): "
            + ", ".join(
                f"{arm} {f:.2f} (the simulator's {SIMULATED_FRACTION[arm]:.2f})" for arm, f in a["fractions"].items()
            )
            + "."
        )
    table = all_correct_table({arm: runs[arm] for arm in arms if arm in runs})
    if table:
        lines += ["", table]
    if not a["complete"]:
        lines += [
            "",
            f"**No verdict yet**: it is given only when all {a['expected']} runs are in ({a['in']} so far); the numbers "
            "above are interim and decide nothing.",
        ]
    else:
        lines += ["", f"Verdict, A1: {a['verdict_a']}", ""]
        lines += [f"Verdict, {v}" for v in a["verdicts_b"]]
        lines += ["", f"All-correct groups dominated steps {DOMINANCE_FROM}-{DIAL_STEP}: {a['dominated']}."]
    return "\n".join(lines)


def plot(runs: Mapping[str, Mapping[int, dict]], out_dir: Path) -> list[Path]:
    """PNG figures: held-out accuracy, distinct correct answers and coverage over steps (mean ± sd band), pass@k
    at the last evaluation, where each arm ends in (accuracy, distinct correct answers), and every run's training
    curves (entropy, reward, GCPO's effective solutions and all-correct push)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key in zip(axes, ("accuracy", "distinct_correct", "coverage")):
        for arm, seeds in runs.items():
            steps = sorted(set.intersection(*(set(r["evals"]) for r in seeds.values())))
            values = np.array([[r["evals"][s][key] for s in steps] for r in seeds.values()])
            mean, sd = values.mean(0), values.std(0)
            ax.plot(steps, mean, marker="o", label=arm)
            ax.fill_between(steps, mean - sd, mean + sd, alpha=0.2)
        ax.set_xlabel("step")
        ax.set_title(f"held-out {key.replace('_', ' ')}")
    axes[0].legend()
    fig.tight_layout()
    paths.append(out_dir / "heldout_over_steps.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for arm, seeds in runs.items():
        last = max(set.intersection(*(set(r["evals"]) for r in seeds.values())))
        ks = sorted(int(k.split("@")[1]) for k in next(iter(seeds.values()))["evals"][last] if k.startswith("pass@"))
        values = np.array([[r["evals"][last][f"pass@{k}"] for k in ks] for r in seeds.values()])
        ax.errorbar(ks, values.mean(0), yerr=values.std(0), marker="o", capsize=3, label=f"{arm} (step {last})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_title("held-out pass@k")
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "heldout_pass_at_k.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    # the real path's counterpart of the simulator's frontier (docs/frontier.md): where each arm ends, in
    # (accuracy, distinct correct answers), each run a faint dot and the arm's mean with its 95 % t interval
    fig, ax = plt.subplots(figsize=(5.2, 4))
    for i, (arm, seeds) in enumerate(runs.items()):
        last = max(set.intersection(*(set(r["evals"]) for r in seeds.values())))
        points = np.array(
            [[r["evals"][last]["accuracy"], r["evals"][last]["distinct_correct"]] for r in seeds.values()]
        )
        ax.scatter(points[:, 0], points[:, 1], color=f"C{i}", alpha=0.25, s=12)
        intervals = [paired_t(points[:, j]) for j in (0, 1)]  # one seed: no interval, a bare point
        mean = [t["mean"] for t in intervals]
        half = [t["high"] - t["mean"] if math.isfinite(t["high"]) else 0.0 for t in intervals]
        label = f"{arm} (step {last}, {len(points)} seeds)"
        ax.errorbar(*mean, xerr=half[0], yerr=half[1], color=f"C{i}", marker="o", capsize=3, label=label)
    ax.set_xlabel("held-out accuracy")
    ax.set_ylabel(f"distinct correct answers among {DISTINCT_AMONG}")
    ax.set_title("where each arm ends (mean, 95 % CI over seeds)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / "heldout_frontier.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    for ax, key in zip(
        axes, ("actor/entropy", "critic/score/mean", "gcpo/effective_solutions/mean", "gcpo/all_correct_adv_abs")
    ):
        for arm, seeds in runs.items():
            for i, r in enumerate(seeds.values()):
                series = r["training"].get(key, {})
                if series:
                    steps = sorted(series)
                    ax.plot(
                        steps,
                        [series[s] for s in steps],
                        color=f"C{list(runs).index(arm)}",
                        alpha=0.6,
                        label=arm if i == 0 else None,
                    )
        ax.set_xlabel("step")
        ax.set_title(f"training: {key}", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / "training_curves.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
