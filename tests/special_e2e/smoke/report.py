"""What the smoke run reports: wall time per phase and step, the steps' main metrics, peak GPU memory per
process, and GCPO's step time next to GRPO's (markdown tables, ready for ``docs/benchmarks.md``)."""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

# (label, verl timing key) in the order a step runs them; "credit" and "credit report" are inside "advantage"
PHASES = (
    ("generation", "timing_s/gen"),
    ("reward", "timing_s/reward"),
    ("old log-prob", "timing_s/old_log_prob"),
    ("credit (in advantage)", "timing_s/gcpo_total"),
    # the dump with its W&B table and figures: a diagnostic, every step in the smoke (a run's every_n_steps)
    ("credit report (in advantage)", "timing_s/gcpo_report"),
    ("advantage", "timing_s/adv"),
    ("actor update", "timing_s/update_actor"),
    ("checkpoint", "timing_s/save_checkpoint"),
    ("weight sync", "timing_s/update_weights"),
    ("step", "timing_s/step"),
    ("embedding prefetch (overlapped)", "timing_s/gcpo_embed_prefetch"),
)
KEY_METRICS = (
    "critic/score/mean",
    "critic/advantages/mean",
    "critic/advantages/max",
    "critic/advantages/min",
    "response_length/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
    "gcpo/groups",
    "gcpo/team_value/mean",
    "gcpo/contributing/mean",
    "gcpo/all_correct_groups",
    "gcpo/rescued_groups",
    "gcpo/mean_credit_score",
    "gcpo/encoder/prefetched_frac",
    "perf/max_memory_allocated_gb",
    "perf/max_memory_reserved_gb",
    "perf/throughput",
    "perf/mfu/actor",
)


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def phase_table(metrics: Mapping[int, Mapping[str, float]]) -> str:
    """Seconds per phase (rows) and step (columns); phases no step has are left out."""
    steps = sorted(metrics)
    rows = [
        [label] + [_cell(metrics[s].get(key)) for s in steps]
        for label, key in PHASES
        if any(key in metrics[s] for s in steps)
    ]
    return _table(["phase (s)"] + [f"step {s}" for s in steps], rows)


def metrics_table(metrics: Mapping[int, Mapping[str, float]], keys: Sequence[str] = KEY_METRICS) -> str:
    steps = sorted(metrics)
    rows = [
        [key] + [_cell(metrics[s].get(key)) for s in steps] for key in keys if any(key in metrics[s] for s in steps)
    ]
    return _table(["metric"] + [f"step {s}" for s in steps], rows)


def startup_seconds(wall_s: Optional[float], metrics: Mapping[int, Mapping[str, float]]) -> Optional[float]:
    """A run's wall time outside its steps: start-up (Ray, workers, vLLM, encoder) plus shutdown."""
    if wall_s is None:
        return None
    return wall_s - sum(m.get("timing_s/step", 0.0) for m in metrics.values())


def startup_table(phases_by_run: Mapping[str, Sequence]) -> str:
    """Start-up phases (rows) of each run (columns: when the phase ended, in seconds since the run started, and
    how long it took); ``{run label: [startup.Phase, ...]}``, every run with the same phases in the same order."""
    runs = list(phases_by_run)
    if not runs:
        return _table(["start-up phase"], [])
    labels = [phase.label for phase in phases_by_run[runs[0]]]
    rows = []
    for i, label in enumerate(labels):
        row = [label]
        for run in runs:
            phase = phases_by_run[run][i]
            row += ["not seen", "—"] if phase.at_s is None else [f"{phase.at_s:.1f}", f"{phase.took_s:.1f}"]
        rows.append(row)
    header = ["start-up phase"] + [f"{run} {what}" for run in runs for what in ("at (s)", "took (s)")]
    return _table(header, rows)


def run_table(runs: Mapping[int, tuple[Optional[float], Mapping[int, Mapping[str, float]]]]) -> str:
    """Each run's steps, wall time and start-up + shutdown time (``{run: (wall_s, metrics by step)}``)."""
    rows = [
        [str(n), ", ".join(map(str, sorted(metrics))), _cell(wall), _cell(startup_seconds(wall, metrics))]
        for n, (wall, metrics) in sorted(runs.items())
    ]
    return _table(["run", "steps", "wall (s)", "start-up + shutdown (s)"], rows)


def memory_table(gpu_memory: Mapping[str, Mapping]) -> str:
    """Peak MiB per process of each run (``{run: gpu_memory.sample_until_stopped summary}``)."""
    rows = []
    for run, summary in gpu_memory.items():
        if summary.get("error"):
            rows.append([run, "—", "—", f"not sampled: {summary['error']}"])
        for process in summary.get("processes", []):
            rows.append([run, str(process["pid"]), f"{process['peak_mib']:.0f}", process["name"]])
    return _table(["run", "pid", "peak MiB", "process"], rows)


def overhead(metrics: Mapping[int, Mapping[str, float]], warmup: Sequence[int] = ()) -> dict:
    """GCPO's critical-path overhead per step: ``timing_s/gcpo_total`` (everything the credit adds to verl's
    advantage step: waiting for the background decode, the credit actor's call with whatever embedding the
    log-prob pass did not hide, the Shapley credit), in seconds and as a share of the step without it (what the
    same step takes where GRPO computes its advantage); and whether the prefetched embedding stayed inside the
    old log-prob pass it overlaps. ``mean`` is over the steps not in ``warmup``."""
    rows = {}
    for step, m in sorted(metrics.items()):
        if "timing_s/gcpo_total" not in m or "timing_s/step" not in m:
            continue
        added, total = m["timing_s/gcpo_total"], m["timing_s/step"]
        prefetch, log_prob = m.get("timing_s/gcpo_embed_prefetch"), m.get("timing_s/old_log_prob")
        rows[step] = {
            "step_s": total,
            "added_s": added,
            "share": _ratio(added, total - added),
            "prefetch_s": prefetch,
            "old_log_prob_s": log_prob,
            "prefetch_hidden": None if prefetch is None or log_prob is None else prefetch <= log_prob,
        }
    steady = [s for s in rows if s not in warmup] or list(rows)
    mean = None
    if steady:
        added = sum(rows[s]["added_s"] for s in steady) / len(steady)
        total = sum(rows[s]["step_s"] for s in steady) / len(steady)
        mean = {"steps": steady, "step_s": total, "added_s": added, "share": _ratio(added, total - added)}
    return {"steps": rows, "mean": mean}


def overhead_table(metrics: Mapping[int, Mapping[str, float]], warmup: Sequence[int] = ()) -> str:
    """:func:`overhead` as a table: one row per step and the mean over the steady steps."""
    result = overhead(metrics, warmup)

    def share(value) -> str:
        return "—" if value is None else f"{100 * value:.2f} %"

    rows = [
        [
            f"step {s}" + (" (warm-up)" if s in warmup else ""),
            _cell(r["step_s"]),
            _cell(r["added_s"]),
            share(r["share"]),
            _cell(r["prefetch_s"]),
            _cell(r["old_log_prob_s"]),
            {None: "—", True: "yes", False: "NO"}[r["prefetch_hidden"]],
        ]
        for s, r in result["steps"].items()
    ]
    if result["mean"] is not None:
        m = result["mean"]
        label = f"mean of steps {', '.join(map(str, m['steps']))}"
        rows.append([label, _cell(m["step_s"]), _cell(m["added_s"]), share(m["share"]), "", "", ""])
    header = [
        "",
        "step (s)",
        "GCPO on the critical path (s)",
        "share of the step without it",
        "embedding prefetched (s)",
        "old log-prob (s)",
        "prefetch inside the log-prob pass",
    ]
    return _table(header, rows)


def step_times(metrics: Mapping[int, Mapping[str, float]]) -> dict[int, float]:
    return {s: m["timing_s/step"] for s, m in metrics.items() if "timing_s/step" in m}


def _ratio(a: float, b: float) -> Optional[float]:
    return a / b if b > 0 else None


def comparison_table(gcpo: Mapping[int, float], grpo: Mapping[int, float], warmup: Sequence[int] = ()) -> str:
    """Step time of GCPO and GRPO per step and their ratio, plus the mean over the steady-state steps both have
    (``warmup``: each process's first step, which pays for lazy initialisation, marked and left out of the mean;
    all steps when none is steady)."""
    common = sorted(set(gcpo) & set(grpo))
    rows = [
        [
            f"step {s}" + (" (warm-up)" if s in warmup else ""),
            _cell(gcpo[s]),
            _cell(grpo[s]),
            _cell(_ratio(gcpo[s], grpo[s])),
        ]
        for s in common
    ]
    steady = [s for s in common if s not in warmup] or common
    if steady:
        mean_gcpo = sum(gcpo[s] for s in steady) / len(steady)
        mean_grpo = sum(grpo[s] for s in steady) / len(steady)
        label = "mean" if len(steady) == len(common) else f"mean of steps {', '.join(map(str, steady))}"
        rows.append([label, _cell(mean_gcpo), _cell(mean_grpo), _cell(_ratio(mean_gcpo, mean_grpo))])
    return _table(["", "GCPO step (s)", "GRPO step (s)", "GCPO / GRPO"], rows)


def share_of_grpo(
    gcpo: Mapping[int, Mapping[str, float]], grpo: Mapping[int, float], warmup: Sequence[int] = ()
) -> Optional[dict]:
    """GCPO's critical-path seconds (``timing_s/gcpo_total``, mean over its steady steps) as a share of GRPO's
    measured steady step (``grpo``: step seconds by step); None where either run has no steady step to use.
    Unlike :func:`overhead`, which divides by GCPO's own step less its credit, this divides by a GRPO run's step."""
    added = {s: m["timing_s/gcpo_total"] for s, m in gcpo.items() if s not in warmup and "timing_s/gcpo_total" in m}
    steps = {s: t for s, t in grpo.items() if s not in warmup}
    grpo_step = sum(steps.values()) / len(steps) if steps else 0.0
    if not added or grpo_step <= 0:
        return None
    mean_added = sum(added.values()) / len(added)
    return {
        "added_s": mean_added,
        "gcpo_steps": sorted(added),
        "grpo_step_s": grpo_step,
        "grpo_steps": sorted(steps),
        "share": _ratio(mean_added, grpo_step),
    }


def phase_comparison_table(
    gcpo: Mapping[int, Mapping[str, float]], grpo: Mapping[int, Mapping[str, float]], warmup: Sequence[int] = ()
) -> str:
    """Mean seconds per phase over the steady-state steps both runs have, GCPO next to GRPO: where a
    difference in step time comes from."""
    common = sorted(set(gcpo) & set(grpo))
    steady = [s for s in common if s not in warmup] or common
    rows = []
    for label, key in PHASES:
        a = [gcpo[s][key] for s in steady if key in gcpo[s]]
        b = [grpo[s][key] for s in steady if key in grpo[s]]
        if not a and not b:
            continue
        mean_a = sum(a) / len(a) if a else None
        mean_b = sum(b) / len(b) if b else None
        ratio = _ratio(mean_a, mean_b) if mean_a is not None and mean_b else None
        rows.append([label, _cell(mean_a), _cell(mean_b), _cell(ratio)])
    # verl's replay buffer looks for finished rollouts every 2 s (poll_interval), so timing_s/gen comes in steps of
    # about 2 s: on a small smoke that rounding, not the estimator, decides most of a difference in generation
    off_gen = [
        [m[s]["timing_s/step"] - m[s].get("timing_s/gen", 0.0) for s in steady if "timing_s/step" in m[s]]
        for m in (gcpo, grpo)
    ]
    if all(off_gen):
        a, b = (sum(v) / len(v) for v in off_gen)
        rows.append(["step without generation", _cell(a), _cell(b), _cell(_ratio(a, b))])
    return _table([f"phase, mean of steps {', '.join(map(str, steady))} (s)", "GCPO", "GRPO", "GCPO / GRPO"], rows)


def host_memory_table(host_memory: Mapping[str, Mapping]) -> str:
    """Peak GiB per kind of process of each run, largest first, and the peak total
    (``{run: processes.sample_memory_until_stopped summary}``)."""
    rows = []
    for run, summary in host_memory.items():
        rows.append([run, "all", "—", _cell(summary.get("peak_total_gib"))])
        counts = summary.get("processes_by_kind", {})
        for kind, gib in summary.get("peak_by_kind_gib", {}).items():
            rows.append([run, kind, str(counts.get(kind, "—")), _cell(gib)])
    return _table(["run", "process", "processes", "peak GiB"], rows)


def job_table(jobs: Sequence[tuple]) -> str:
    """One row per Slurm job: ``(name, job id, state, exit code, wall s, metrics by step, attempts)``; the mean
    step time leaves out each job's first step (lazy initialisation)."""
    rows = []
    for name, job_id, state, exit_code, wall, metrics, attempts in jobs:
        times = step_times(metrics)
        steady = [t for s, t in sorted(times.items())[1:]]
        rows.append(
            [
                name,
                job_id or "—",
                state,
                exit_code or "—",
                _cell(wall),
                ", ".join(map(str, sorted(metrics))) or "—",
                _cell(sum(steady) / len(steady) if steady else None),
                str(attempts),
            ]
        )
    return _table(
        ["job", "id", "state", "exit", "wall (s)", "steps", "mean step (s), first left out", "submissions"], rows
    )


def placement_table(peak: Mapping[str, Mapping[str, int]]) -> str:
    """Actors of each role per node (``{role: {node: count}}``)."""
    nodes = sorted({node for by_node in peak.values() for node in by_node})
    rows = [[role, *(str(peak[role].get(node, 0)) for node in nodes)] for role in sorted(peak)]
    return _table(["role", *nodes], rows)
