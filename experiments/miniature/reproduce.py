"""Does a run of the miniature reproduce a documented one (``docs/miniature/results.json``)?

A seed does not repeat a run (verl's asynchronous rollout makes vLLM's sampling depend on timing), so a
reproduction is a new draw from the same distribution, and "within the error bars" needs saying exactly. For each
cell of the table (an arm's mean over seeds, or its mean difference from GRPO over the seeds both ran), with the
reference's mean and sd over ``n`` seeds and the new run's mean over ``m``:

* within the reference's mean ± sd, the table's error bars. Even when both runs come from one distribution, only
  a share ``P(|t_{n-1}| < 1 / sqrt(1/n + 1/m))`` of cells lands there (81 % for 5 and 5 seeds): the bar is the
  spread of one seed, and the difference of two means has its own;
* within the 95 % reproduction interval, ``mean ± t_{n-1, 0.975} sd sqrt(1/n + 1/m)``: the prediction interval of
  a new ``m``-seed mean under the reference's normal model, which holds 95 % of cells when nothing has changed.

The start row (step 0) is left out: its runs share starts, so they are not independent draws; so is pass@1, which
is accuracy again (unbiased pass@1 is the share correct) and would count each accuracy cell twice.

The verdict is the criterion ``docs/miniature.md`` fixed before its reproduction ran: at most
``allowed_outside(cells)`` cells outside the reproduction interval (3 of the 2026-11-25 reference's 35), and none
of the headline cells (``headline_cells``: each arm both ran minus GRPO in distinct
correct answers and answer entropy). A reproduction also
adds data: ``pool`` averages each (arm, seed)'s runs, for paired tests over both experiments.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Mapping, Optional

import numpy as np
from scipy import stats

from experiments.miniature.report import TABLE_KEYS

COMPARED_KEYS = tuple(k for k in TABLE_KEYS if k != "pass@1")
# Each arm of the reference against GRPO in what GCPO and its ablations claim to change: the diversity of correct
# answers (the documented reference of 2026-11-25 had gcpo_batch and gcpo_group: these four cells).
HEADLINE_KEYS = ("distinct_correct", "answer_entropy")


def headline_cells(reference: Mapping[str, Mapping[int, dict]], baseline: str = "grpo") -> tuple[tuple[str, str], ...]:
    """The cells a reproduction of ``reference`` must hold: every other arm of it minus ``baseline``, per
    ``HEADLINE_KEYS``."""
    return tuple((f"{arm} − {baseline}", key) for arm in sorted(reference) if arm != baseline for key in HEADLINE_KEYS)


# The share of reproductions of an unchanged run that may fail on the count of cells outside alone: 3 of 35 cells
# (the 2026-11-25 criterion) is the fewest with P(4 or more of 35 outside) = 9.6 % <= 10 %.
CHANCE_OF_FAILING_BY_COUNT = 0.10


def allowed_outside(cells: int, confidence: float = 0.95, chance: float = CHANCE_OF_FAILING_BY_COUNT) -> int:
    """The most cells of ``cells`` that may lie outside their ``confidence`` reproduction interval: the fewest ``k``
    with P(more than k outside) <= ``chance`` when nothing has changed (independent cells, each outside with
    probability ``1 - confidence``). 3 for the 35 cells of a 3-arm table, 4 for the 49 of the ablation's 4 arms."""
    if cells < 0 or not 0 < confidence < 1 or not 0 < chance < 1:
        raise ValueError(
            f"allowed_outside needs cells >= 0 and confidence, chance in (0, 1), got {cells}, {confidence}, {chance}"
        )
    return int(stats.binom.isf(chance, cells, 1 - confidence))


def load_results(path: Path) -> dict[str, dict[int, dict]]:
    """``results.json`` (what ``report`` writes) with its integer keys back: seeds, evaluation steps and the
    training curves' steps."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read the reference results {path}: {err}") from err
    runs: dict[str, dict[int, dict]] = {}
    for arm, seeds in raw.items():
        runs[arm] = {}
        for seed, run in seeds.items():
            if not isinstance(run, dict) or "evals" not in run:
                raise ValueError(f"{path}: {arm} seed {seed} has no evaluations; is it a miniature results.json?")
            run = dict(run)
            run["evals"] = {int(step): metrics for step, metrics in run["evals"].items()}
            run["training"] = {
                key: {int(s): v for s, v in series.items()} for key, series in run.get("training", {}).items()
            }
            runs[arm][int(seed)] = run
    return runs


def _budgets(runs: Mapping[str, Mapping[int, dict]]) -> set[str]:
    return {
        json.dumps(r.get("spec"), sort_keys=True)
        for seeds in runs.values()
        for r in seeds.values()
        if r.get("spec") is not None
    }


def _warm_starts(runs: Mapping[str, Mapping[int, dict]]) -> dict[int, set]:
    starts: dict[int, set] = {}
    for seeds in runs.values():
        for seed, run in seeds.items():
            starts.setdefault(seed, set()).add(run.get("warm_seed"))
    return starts


def check_comparable(reference: Mapping[str, Mapping[int, dict]], runs: Mapping[str, Mapping[int, dict]]) -> None:
    """Refuse to compare runs of other budgets (steps, batch, lr...) or of other warm starts for a seed."""
    if not reference or not runs:
        raise ValueError(
            "nothing to compare: " + ("the reference" if not reference else "the runs") + " hold no finished run"
        )
    ours, theirs = _budgets(runs), _budgets(reference)
    if ours and theirs and ours != theirs:
        raise ValueError(f"the runs' budgets differ from the reference's: {sorted(ours)} against {sorted(theirs)}")
    ref_starts = _warm_starts(reference)
    for seed, starts in _warm_starts(runs).items():
        if seed in ref_starts and starts != ref_starts[seed] and None not in starts | ref_starts[seed]:
            raise ValueError(
                f"seed {seed} trained from warm start {sorted(starts)}, the reference's from {sorted(ref_starts[seed])}"
            )


def _shared_step(*sides: Mapping[str, Mapping[int, dict]]) -> int:
    steps = [set(r["evals"]) for side in sides for seeds in side.values() for r in seeds.values()]
    common = set.intersection(*steps) - {0}
    if not common:
        raise ValueError("the runs and the reference share no evaluation step after the start")
    return max(common)


def table_cells(
    runs: Mapping[str, Mapping[int, dict]], step: int, keys: Iterable[str], baseline: str = "grpo"
) -> dict[tuple[str, str], np.ndarray]:
    """The values behind each cell of the table at ``step``: per arm its seeds' values, per ``arm − baseline`` the
    differences of the seeds both ran, in seed order."""
    cells: dict[tuple[str, str], np.ndarray] = {}
    for arm in sorted(runs):
        for key in keys:
            cells[(arm, key)] = np.array([runs[arm][s]["evals"][step][key] for s in sorted(runs[arm])])
    if baseline in runs:
        for arm in sorted(a for a in runs if a != baseline):
            shared = sorted(set(runs[arm]) & set(runs[baseline]))
            for key in keys:
                cells[(f"{arm} − {baseline}", key)] = np.array(
                    [runs[arm][s]["evals"][step][key] - runs[baseline][s]["evals"][step][key] for s in shared]
                )
    return cells


def reproduction_interval(reference: np.ndarray, new_count: int, confidence: float = 0.95) -> tuple[float, float]:
    """Where the mean of ``new_count`` new draws falls with probability ``confidence``, given the reference's
    draws (normal model, Student-t prediction interval); NaNs below two reference draws."""
    n = len(reference)
    if n < 2 or new_count < 1:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * np.std(reference, ddof=1) * math.sqrt(1 / n + 1 / new_count)
    return float(np.mean(reference) - half), float(np.mean(reference) + half)


def expected_share_within_sd(n: int, m: int) -> float:
    """The share of cells whose new ``m``-seed mean lies within the ``n``-seed reference's mean ± sd when both come
    from one normal distribution."""
    if n < 2 or m < 1:
        return float("nan")
    return float(2 * stats.t.cdf(1 / math.sqrt(1 / n + 1 / m), n - 1) - 1)


def compare(
    reference: Mapping[str, Mapping[int, dict]],
    runs: Mapping[str, Mapping[int, dict]],
    step: Optional[int] = None,
    keys: Iterable[str] = COMPARED_KEYS,
    confidence: float = 0.95,
) -> tuple[str, dict]:
    """Markdown, cell by cell, and a summary: is each cell of ``runs``' table within the reference's mean ± sd and
    within the reproduction interval? Cells only one side has are listed apart."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    check_comparable(reference, runs)
    step = _shared_step(reference, runs) if step is None else step
    for side, name in ((reference, "the reference"), (runs, "the runs")):
        missing = [f"{arm} seed {s}" for arm, seeds in side.items() for s, r in seeds.items() if step not in r["evals"]]
        if missing:
            raise ValueError(f"{name} have no evaluation at step {step}: {', '.join(missing)}")
    keys = [
        k
        for k in keys
        if all(k in r["evals"][step] for side in (reference, runs) for seeds in side.values() for r in seeds.values())
    ]
    ours, theirs = table_cells(runs, step, keys), table_cells(reference, step, keys)
    level = _percent(confidence)
    lines = [
        f"| row (step {step}) | metric | reference | this run | within ± sd | {level} reproduction interval | within |",
        "|---" * 7 + "|",
    ]
    within_sd = 0
    shares, judged, outside = [], [], []
    for cell in (c for c in theirs if c in ours):
        ref, new = theirs[cell], ours[cell]
        if len(ref) < 2 or len(new) < 1:
            lines.append(f"| {cell[0]} | {cell[1]} | {len(ref)} seeds | {len(new)} seeds | n/a | n/a | n/a |")
            continue
        ref_mean, ref_sd, new_mean = float(np.mean(ref)), float(np.std(ref, ddof=1)), float(np.mean(new))
        low, high = reproduction_interval(ref, len(new), confidence)
        in_sd, in_interval = abs(new_mean - ref_mean) <= ref_sd, low <= new_mean <= high
        within_sd += in_sd
        judged.append(cell)
        if not in_interval:
            outside.append(cell)
        shares.append(expected_share_within_sd(len(ref), len(new)))
        lines.append(
            f"| {cell[0]} | {cell[1]} | {ref_mean:+.3f} ± {ref_sd:.3f} ({len(ref)}) | {new_mean:+.3f} "
            f"({len(new)}) | {'yes' if in_sd else 'no'} | [{low:+.3f}, {high:+.3f}] | "
            f"{'yes' if in_interval else '**no**'} |"
        )
    unmatched = sorted(set(ours) ^ set(theirs))
    summary = {
        "step": step,
        "cells": len(judged),
        "within_sd": within_sd,
        "within_interval": len(judged) - len(outside),
        "expected_within_sd": float(np.mean(shares)) if shares else float("nan"),
        "confidence": confidence,
        "unmatched": [" ".join(c) for c in unmatched],
        "judged": judged,
        "outside": outside,
    }
    # the arms both ran: a run of the default arms is judged against a reference of other arms on those they share
    summary["verdict"] = verdict(summary, headline_cells({arm: s for arm, s in reference.items() if arm in runs}))
    text = "\n".join(lines) + "\n\n" + summary_line(summary) + "\n" + summary["verdict"]
    if unmatched:
        text += f"\nOnly one side has: {', '.join(summary['unmatched'])}."
    return text, summary


def _percent(share: float) -> str:
    return f"{share:.0%}".replace("%", " %")


def summary_line(summary: Mapping) -> str:
    cells = summary["cells"]
    if not cells:
        return "No cell has two reference seeds to compare with."
    level = _percent(summary["confidence"])
    return (
        f"Within the reference's mean ± sd: {summary['within_sd']} of {cells} cells (about "
        f"{_percent(summary['expected_within_sd'])} are when both runs come from one distribution). Within the "
        f"{level} reproduction interval: {summary['within_interval']} of {cells} (about {level} are)."
    )


def verdict(summary: Mapping, headline: Iterable[tuple[str, str]], max_outside: Optional[int] = None) -> str:
    """Does the run reproduce the reference under the documented criterion (``compare``'s summary: the cells judged
    and those outside the reproduction interval; at most ``max_outside`` of them, by default ``allowed_outside``
    of the cells judged)? Undecided unless every headline cell was judged."""
    headline = list(headline)
    if max_outside is None:
        max_outside = allowed_outside(summary["cells"], summary["confidence"])
    if not headline:
        return "Reproduction: not judged, the reference and the runs share no arm to compare with GRPO."
    missing = [" ".join(c) for c in headline if c not in summary["judged"]]
    if missing:
        return f"Reproduction: not judged, the criterion needs {', '.join(missing)}."
    outside = [" ".join(c) for c in summary["outside"]]
    headline_out = [" ".join(c) for c in headline if c in summary["outside"]]
    held = len(outside) <= max_outside and not headline_out
    named = f" ({', '.join(outside)})" if outside else ""
    return (
        f"Reproduction: {'holds' if held else 'fails'}: {len(outside)} of {summary['cells']} cells outside the "
        f"{_percent(summary['confidence'])} interval{named}, at most {max_outside} allowed; headline cells "
        f"outside: {', '.join(headline_out) if headline_out else 'none'} (of {len(headline)}: each shared arm − grpo "
        "in distinct_correct and answer_entropy)."
    )


def pooling_refusal(*sides: Mapping[str, Mapping[int, dict]]) -> Optional[str]:
    """Why the runs of ``sides`` may not be paired seed by seed over the experiments (None if they may): every seed
    that more than one side ran must have trained from the same warm-start weights there, recorded on each run
    (``warm_start_sha256``: the same seed builds other weights on another CPU model)."""
    hashes: dict[int, list[set]] = {}
    for side in sides:
        by_seed: dict[int, set] = {}
        for seeds in side.values():
            for seed, run in seeds.items():
                by_seed.setdefault(seed, set()).add(run.get("warm_start_sha256"))
        for seed, found in by_seed.items():
            hashes.setdefault(seed, []).append(found)
    for seed, found in sorted(hashes.items()):
        if len(found) < 2:
            continue
        every = set().union(*found)
        if None in every:
            return f"seed {seed}'s warm-start weights are not recorded on every run (warm_start_sha256)"
        if len(every) > 1:
            return (
                f"seed {seed} trained from other warm-start weights (sha256 {', '.join(sorted(h[:12] for h in every))})"
            )
    return None


def pool(*sides: Mapping[str, Mapping[int, dict]], step: int) -> dict[str, dict[int, dict]]:
    """Each (arm, seed)'s evaluation at ``step`` averaged over the sides that ran it, as ``collect`` shapes runs
    (``runs`` counts them), so that ``report.paired_tests`` pairs the starts over several experiments."""
    pooled: dict[str, dict[int, dict]] = {}
    for arm in sorted({a for side in sides for a in side}):
        for seed in sorted({s for side in sides for s in side.get(arm, {})}):
            evals = [side[arm][seed]["evals"][step] for side in sides if seed in side.get(arm, {})]
            keys = set.intersection(*(set(e) for e in evals))
            pooled.setdefault(arm, {})[seed] = {
                "evals": {step: {k: float(np.mean([e[k] for e in evals])) for k in sorted(keys)}},
                "runs": len(evals),
            }
    return pooled
