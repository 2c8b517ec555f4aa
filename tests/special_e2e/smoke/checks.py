"""What the smoke run checks, on the files the trainer wrote.

* metrics: verl's ``file`` logger (``verl/utils/tracking.py``: one JSON line ``{"step": s, "data": {...}}`` per
  logged step, at ``VERL_FILE_LOGGER_PATH``); every training step is there, and under GCPO the ``gcpo/*`` and
  ``timing_s/gcpo_*`` metrics are present and finite;
* credit: the trainer's credit dumps (``algorithm.gcpo.dump``, ``gcpo_core/evaluation/dump.py``): every all-wrong group
  got zero advantage (its credit scores are all equal, so any group normalisation gives 0, and the engine's
  advantage is 0), wrong rollouts of mixed groups got zero Shapley credit, and all-wrong, mixed and all-correct
  groups all occurred (else the credit path was not really exercised);
* resume: the first run logged steps 1..S and saved ``global_step_S``; the resumed run's first step is S + 1.

Each check returns :class:`Check` results instead of raising, so that one run reports everything that failed.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from gcpo_core.evaluation.dump import read_credit_dump

# written every GCPO step by the trainer (recipe/gcpo/gcpo_trainer.py) and the credit engine
REQUIRED_GCPO_METRICS = (
    "gcpo/groups",
    "gcpo/team_value/mean",
    "gcpo/contributing/mean",
    "gcpo/all_correct_groups",
    "gcpo/mean_credit_score",
    "timing_s/gcpo_total",
    "timing_s/gcpo_embed",
    "timing_s/gcpo_shapley",
)
STEP_KEY = "training/global_step"  # verl logs it on every training step (not on validation-only records)
ZERO_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"[{'PASS' if self.ok else 'FAIL'}] {self.name}: {self.detail}"


def read_metrics(path: str | os.PathLike) -> dict[int, dict[str, float]]:
    """Training steps' metrics from a file-logger JSONL, by step (records without ``training/global_step``,
    e.g. validation before training, are left out). A line that is not a logger record is an error."""
    steps: dict[int, dict[str, float]] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                step, data = int(record["step"]), dict(record["data"])
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{number}: not a verl file-logger record ({err})") from None
            if STEP_KEY in data:
                steps.setdefault(step, {}).update(data)
    return steps


def _is_finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_metrics(
    metrics: Mapping[int, Mapping[str, float]], steps: Sequence[int], gcpo: bool, groups_per_step: int | None = None
) -> list[Check]:
    """Every expected step logged with a finite step time; under GCPO the required ``gcpo/*`` and
    ``timing_s/gcpo_*`` metrics present and every one of them finite (and ``gcpo/groups`` = the prompts of a
    step, when given)."""
    results = []
    missing_steps = [s for s in steps if s not in metrics]
    results.append(
        Check(
            "steps logged",
            not missing_steps and sorted(metrics) == sorted(steps),
            f"expected {list(steps)}, logged {sorted(metrics)}",
        )
    )
    for step in steps:
        data = metrics.get(step)
        if data is None:
            continue
        step_time = data.get("timing_s/step")
        results.append(Check(f"step {step} time", _is_finite_number(step_time), f"timing_s/step = {step_time!r}"))
        if not gcpo:
            continue
        absent = [k for k in REQUIRED_GCPO_METRICS if k not in data]
        gcpo_keys = sorted(k for k in data if k.startswith("gcpo/") or k.startswith("timing_s/gcpo_"))
        bad = [f"{k}={data[k]!r}" for k in gcpo_keys if not _is_finite_number(data[k])]
        detail = f"{len(gcpo_keys)} gcpo metrics"
        if absent:
            detail += f"; missing {absent}"
        if bad:
            detail += f"; not finite: {bad}"
        results.append(Check(f"step {step} gcpo metrics", not absent and not bad, detail))
        if groups_per_step is not None and "gcpo/groups" in data:
            results.append(
                Check(
                    f"step {step} groups credited",
                    data["gcpo/groups"] == groups_per_step,
                    f"gcpo/groups = {data['gcpo/groups']!r}, prompts per step = {groups_per_step}",
                )
            )
    return results


def group_kind(quality: Sequence[float]) -> str:
    """``all_wrong``, ``all_correct`` or ``mixed`` from a group's qualities (0 = wrong)."""
    correct = [q > 0 for q in quality]
    if not any(correct):
        return "all_wrong"
    return "all_correct" if all(correct) else "mixed"


def check_credit_dumps(dump_dir: str | os.PathLike, steps: Iterable[int]) -> list[Check]:
    """The credit dumps of ``steps``: all-wrong groups got zero advantage, wrong rollouts zero credit, and all
    three kinds of group occurred."""
    dump_dir = Path(dump_dir)
    results = []
    kinds = {"all_wrong": 0, "mixed": 0, "all_correct": 0}
    correct = rollouts = 0
    failures = []
    for step in steps:
        path = dump_dir / f"credit_step{int(step):06d}.jsonl"
        if not path.is_file():
            results.append(Check(f"step {step} credit dump", False, f"{path} was not written"))
            continue
        records = list(read_credit_dump(path))
        results.append(Check(f"step {step} credit dump", bool(records), f"{len(records)} groups in {path.name}"))
        for record in records:
            quality = record.get("quality") or [1.0 if r > 0 else 0.0 for r in record["rewards"]]
            kind = group_kind(quality)
            kinds[kind] += 1
            correct, rollouts = correct + sum(q > 0 for q in quality), rollouts + len(quality)
            where = f"step {step} group {record['uid']}"
            wrong = [i for i, q in enumerate(quality) if q <= 0]
            if any(abs(record["shapley"][i]) > ZERO_TOLERANCE for i in wrong):
                failures.append(f"{where}: a wrong rollout got Shapley credit {[record['shapley'][i] for i in wrong]}")
            if kind == "all_wrong":
                if any(abs(a) > ZERO_TOLERANCE for a in record["advantage"]):
                    failures.append(f"{where} (all wrong): advantage {record['advantage']}")
                scores = record.get("score", [])
                if scores and max(scores) - min(scores) > ZERO_TOLERANCE:
                    failures.append(f"{where} (all wrong): unequal credit scores {scores}")
    results.append(
        Check(
            "all-wrong groups: zero advantage; wrong rollouts: zero credit",
            not failures,
            "; ".join(failures) if failures else f"{kinds['all_wrong']} all-wrong groups checked",
        )
    )
    absent = [k for k, n in kinds.items() if n == 0]
    detail = ", ".join(f"{n} {k}" for k, n in kinds.items()) + f" ({correct} of {rollouts} rollouts correct)"
    results.append(Check("group kinds occurred", not absent, detail + (f"; none {absent}" if absent else "")))
    return results


def check_resume(
    first_run: Mapping[int, Mapping[str, float]],
    resumed_run: Mapping[int, Mapping[str, float]],
    checkpoint_dir: str | os.PathLike,
    saved_step: int,
    resumed_steps: int = 1,
) -> list[Check]:
    """The first run ended at ``saved_step`` and saved it; the resumed run started right after it. With
    ``resumed_steps`` 0 (a run without resume: the GPU smoke's model shapes) only the first run's steps."""
    checkpoint = Path(checkpoint_dir) / f"global_step_{saved_step}"
    first_steps, resumed = sorted(first_run), sorted(resumed_run)
    expected_resumed = list(range(saved_step + 1, saved_step + 1 + resumed_steps))
    wrong_step_values = [s for run in (first_run, resumed_run) for s, d in run.items() if d.get(STEP_KEY) != s]
    first = Check(
        "first run steps",
        first_steps == list(range(1, saved_step + 1)),
        f"expected 1..{saved_step}, logged {first_steps}",
    )
    consistent = Check(
        "step numbers consistent",
        not wrong_step_values,
        f"{STEP_KEY} differs from the logged step at {wrong_step_values}" if wrong_step_values else "ok",
    )
    if resumed_steps == 0:
        return [first, consistent]
    return [
        Check("checkpoint saved", (checkpoint / "actor").is_dir(), f"{checkpoint / 'actor'}"),
        first,
        Check(
            "resumed from the saved step", resumed == expected_resumed, f"expected {expected_resumed}, logged {resumed}"
        ),
        consistent,
    ]


VALIDATION_PREFIX = "val-core/"
# what a run that ended well must not print (a traceback after exit 0 reads as a crash)
UNCLEAN_MARKERS = ("Traceback (most recent call last)", "is killed by signal")


def read_validation_steps(path: str | os.PathLike) -> list[int]:
    """The steps at which the file logger recorded validation metrics (``val-core/...``), in order."""
    steps = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                record = json.loads(line)
                if any(key.startswith(VALIDATION_PREFIX) for key in record.get("data", {})):
                    steps.append(int(record["step"]))
    return steps


# what a Slurm job that went well must not print either: a step or a Ray node that ended badly
UNCLEAN_JOB_MARKERS = UNCLEAN_MARKERS + (
    "srun: error",
    "slurmstepd: error",
    " ERR ",
    "\tERR ",
    "exited unexpectedly",
    "left the job",
)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_PROCESS_PREFIX = re.compile(r"^((?:\([^()]*pid=\d+[^()]*\)\s*)+)")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exit|Exception|Interrupt)\b")


def _lines_by_process(lines: Sequence[str], start: int = 0) -> dict[str, list[tuple[int, str]]]:
    """``lines[start:]`` followed per process: Ray prefixes each line with its actor and pid and interleaves them;
    each process's (index, text without colours, prefix and Ray's "[repeated]" note), in order."""
    by_process: dict[str, list[tuple[int, str]]] = {}
    for index in range(start, len(lines)):
        line = _REPEATED.sub("", _ANSI.sub("", lines[index]))
        match = _PROCESS_PREFIX.match(line)
        prefix = match.group(1).strip() if match else ""
        by_process.setdefault(prefix, []).append((index, line[match.end() :] if match else line))
    return by_process


def _ignored_shutdown_tracebacks(lines: Sequence[str]) -> set[int]:
    """Indices of the traceback lines that Python itself reports as ignored ("Exception ignored in: ...", from a
    ``__del__``) where the exception is the ``SystemExit`` Ray's SIGTERM handler raises in an actor that is being
    stopped at the end of a run (TransferQueue's storage units, closing a ZMQ socket): shutdown noise, not a
    failure. Lines are followed per process (:func:`_lines_by_process`)."""
    ignored = set()
    for entries in _lines_by_process(lines).values():
        for k in range(1, len(entries)):
            index, text = entries[k]
            if "Traceback (most recent call last)" not in text or not entries[k - 1][1].startswith(
                "Exception ignored in:"
            ):
                continue
            body = []
            for _, later in entries[k + 1 :]:
                if _EXCEPTION_LINE.match(later):
                    if later.startswith("SystemExit") and any("sigterm_handler" in b for b in body):
                        ignored.add(index)
                    break
                body.append(later)
    return ignored


# verl's last line of a finished fit: what follows is the run's teardown
FIT_FINISHED = "'Final validation metrics"
_VLLM_LOG_PREFIX = re.compile(r"^(?:ERROR|WARNING|INFO) \d\d-\d\d [\d:]+ \[[\w.]+:\d+\] ")
ENGINE_DEAD = "vllm.v1.engine.exceptions.EngineDeadError"
ENGINE_SHUTDOWN = "[shutdown] MPClient: engine core exited unexpectedly"


def _ignored_engine_teardown(lines: Sequence[str]) -> set[int]:
    """Indices of the lines vLLM's HTTP server prints when Ray stops its engine-core process before the server at
    the end of a finished run (CPU smoke, 2026-11-27): its own ``[shutdown]`` notice, then the output handler's
    ``EngineDeadError`` traceback. Only after verl's fit has finished (``FIT_FINISHED``), only in a process that
    printed the notice first, and only a traceback that ends in ``EngineDeadError``: anything else stays a failure."""
    finished = next((i for i, raw in enumerate(lines) if FIT_FINISHED in raw), None)
    if finished is None:
        return set()
    ignored: set[int] = set()
    for raw_entries in _lines_by_process(lines, start=finished + 1).values():
        entries = [(index, _VLLM_LOG_PREFIX.sub("", text.strip())) for index, text in raw_entries]
        notice = next((k for k, (_, text) in enumerate(entries) if text.startswith(ENGINE_SHUTDOWN)), None)
        if notice is None:
            continue
        ignored.add(entries[notice][0])
        for k in range(notice + 1, len(entries)):
            if "Traceback (most recent call last)" not in entries[k][1]:
                continue
            end = next((j for j in range(k + 1, len(entries)) if _EXCEPTION_LINE.match(entries[j][1])), None)
            if end is not None and entries[end][1].startswith(ENGINE_DEAD):
                ignored.add(entries[k][0])
    return ignored


IN_FLIGHT = "Error in _run_prompt"
ACTOR_DIED = "ray.exceptions.ActorDiedError"


def _ignored_in_flight_prompts(lines: Sequence[str]) -> set[int]:
    """Indices of the traceback lines of the prompts an asynchronous trainer mode still had in flight when its fit
    finished (verl 0.9.1's colocate_async returns with its warm-up batch generating): Ray stops their rollout server,
    and each agent-loop worker logs ``Error in _run_prompt`` and the ``ActorDiedError`` of the call. Only after
    verl's fit has finished, only in a process that logged that error, and only a traceback that ends in
    ``ActorDiedError``: anything else stays a failure."""
    finished = next((i for i, raw in enumerate(lines) if FIT_FINISHED in raw), None)
    if finished is None:
        return set()
    ignored: set[int] = set()
    for entries in _lines_by_process(lines, start=finished + 1).values():
        if not any(IN_FLIGHT in text for _, text in entries):
            continue
        for k, (index, text) in enumerate(entries):
            if "Traceback (most recent call last)" not in text:
                continue
            end = next((j for j in range(k + 1, len(entries)) if _EXCEPTION_LINE.match(entries[j][1].strip())), None)
            if end is not None and entries[end][1].strip().startswith(ACTOR_DIED):
                ignored.add(index)
    return ignored


def check_clean_log(log: str | os.PathLike, markers: Sequence[str] = UNCLEAN_MARKERS) -> Check:
    """No line with one of ``markers`` (a traceback, a killed worker, ...) anywhere in the run's output, except a
    traceback Python ignored because Ray's SIGTERM stopped an actor during shutdown
    (:func:`_ignored_shutdown_tracebacks`), vLLM's engine-core teardown after a finished fit
    (:func:`_ignored_engine_teardown`) and an asynchronous mode's prompts in flight at that end
    (:func:`_ignored_in_flight_prompts`)."""
    try:
        lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        return Check("clean output", False, str(err))
    benign = _ignored_shutdown_tracebacks(lines) | _ignored_engine_teardown(lines) | _ignored_in_flight_prompts(lines)
    bad = [
        line.strip()[:160]
        for i, line in enumerate(lines)
        if i not in benign and any(marker in line for marker in markers)
    ]
    return Check(
        f"clean output ({Path(log).name})",
        not bad,
        f"{len(bad)} line(s) like: {bad[0]}" if bad else "no line that reads as a failure",
    )


COPO_LOSS_METRICS = ("copo/local_adv_abs", "copo/global_adv_abs", "actor/copo_global_pg_loss")


def check_copo_loss(metrics: Mapping[int, Mapping[str, float]], steps: Sequence[int]) -> Check:
    """COPO's blended loss trained: every step logged its terms and the actor's global loss, and some step had
    both a local and a global advantage (all-wrong groups give neither)."""
    missing = {s: [k for k in COPO_LOSS_METRICS if k not in metrics.get(s, {})] for s in steps}
    missing = {s: keys for s, keys in missing.items() if keys}
    if missing:
        return Check(
            "COPO's blended loss", False, "; ".join(f"step {s} lacks {', '.join(k)}" for s, k in missing.items())
        )
    both = [s for s in steps if metrics[s]["copo/local_adv_abs"] > 0 and metrics[s]["copo/global_adv_abs"] > 0]
    return Check(
        "COPO's blended loss",
        bool(both),
        f"local and global advantages at steps {both}" if both else "every advantage was 0 (no mixed group)",
    )


def check_launcher_run(
    metrics_path: str | os.PathLike,
    log: str | os.PathLike,
    checkpoint_dir: str | os.PathLike,
    steps: int,
    gcpo: bool,
    copo: bool = False,
    dump_dir: str | os.PathLike | None = None,
) -> list[Check]:
    """A launcher's short run: every step logged (with GCPO's metrics under GCPO, COPO's blended loss under COPO),
    validation before training and after the last step, the last step's checkpoint, an output without tracebacks,
    and under GCPO (with ``dump_dir``, its credit dumps) non-zero credit in mixed and all-correct groups."""
    try:
        metrics = read_metrics(metrics_path)
        validation = read_validation_steps(metrics_path)
    except (OSError, ValueError) as err:
        return [Check("metrics", False, str(err)), check_clean_log(log)]
    results = check_metrics(metrics, list(range(1, steps + 1)), gcpo=gcpo)
    if copo:
        results.append(check_copo_loss(metrics, list(range(1, steps + 1))))
    results.append(
        Check(
            "validation before and after training",
            validation[:1] == [0] and steps in validation,
            f"validation logged at steps {validation}, expected 0 and {steps}",
        )
    )
    checkpoint = Path(checkpoint_dir) / f"global_step_{steps}" / "actor"
    results.append(Check("checkpoint saved", checkpoint.is_dir(), str(checkpoint)))
    if gcpo and dump_dir is not None:
        results += check_credit_signal(dump_dir, range(1, steps + 1))
    if gcpo:
        results.append(check_metric_glossary(metrics))
        results.append(
            check_all_correct_push(metrics, run_config_value(checkpoint_dir, "algorithm.gcpo.credit.all_correct_scale"))
        )
    results.append(check_clean_log(log))
    return results


def check_fault(
    target: str,
    record: Mapping | None,
    first_run: Mapping[int, Mapping[str, float]],
    last_step: int,
    gcpo: bool,
    log: str | os.PathLike,
    next_fault_after: int | None = None,
) -> list[Check]:
    """After the injected fault (``record``, written by the fault injector), the run went on: something was
    killed, every later step of the first run was logged, with GCPO's credit (``credit``) or with scores
    (``reward``), and with all its rollouts up to the step a later fault may affect (``next_fault_after``: the
    step after which another fault was injected)."""
    if record is None:
        return [Check(f"{target} fault injected", False, "no fault record: the step was never reached")]
    killed = record.get("killed", [])
    after = int(record["after_step"])
    results = [
        Check(
            f"{target} fault injected",
            bool(killed),
            f"SIGKILL after step {after}: " + (", ".join(str(k["pid"]) for k in killed) or "no process found"),
        )
    ]
    later = list(range(after + 1, last_step + 1))
    logged = [s for s in later if s in first_run]
    results.append(Check(f"steps after the {target} fault", logged == later, f"expected {later}, logged {logged}"))
    if target == "credit" and gcpo:
        credited = [s for s in logged if all(k in first_run[s] for k in REQUIRED_GCPO_METRICS)]
        results.append(
            Check(
                "credit after the restart",
                credited == later,
                f"steps with GCPO's credit metrics: {credited} of {later}",
            )
        )
    if target == "reward":
        scored = [s for s in logged if _is_finite_number(first_run[s].get("critic/score/mean"))]
        results.append(
            Check("scores after the fault", scored == later, f"steps with finite scores: {scored} of {later}")
        )
    # every rollout of a later step made it into the batch: verl pads the rows of rollouts that failed, and the GCPO
    # trainer counts them (gcpo/excluded_rows; not logged by other estimators, so not checked there)
    own = [s for s in logged if next_fault_after is None or s <= next_fault_after]
    lost = {s: first_run[s].get("gcpo/excluded_rows") for s in own if "gcpo/excluded_rows" in first_run[s]}
    if lost:
        partial = {s: n for s, n in lost.items() if n}
        results.append(
            Check(
                f"complete batches after the {target} fault",
                not partial,
                "; ".join(f"step {s}: {n:g} rollouts lost (padding rows)" for s, n in partial.items())
                if partial
                else f"steps {sorted(lost)}: no rollout lost",
            )
        )
    return results


def check_credit_signal(dump_dir: str | os.PathLike, steps: Iterable[int]) -> list[Check]:
    """GCPO's credit pushed something: some mixed group and some all-correct group got a non-zero advantage on a
    correct rollout, and correct rollouts got positive Shapley credit (a run whose qualities are all 0, e.g.
    every correct answer cancelled by a length penalty, passes every other check on zeros)."""
    pushed = {"mixed": 0, "all_correct": 0}
    seen = {"mixed": 0, "all_correct": 0}
    positive_credit = correct = 0
    for step in steps:
        path = Path(dump_dir) / f"credit_step{int(step):06d}.jsonl"
        if not path.is_file():
            continue
        for record in read_credit_dump(path):
            quality = record.get("quality") or [1.0 if r > 0 else 0.0 for r in record["rewards"]]
            kind = group_kind(quality)
            if kind == "all_wrong":
                continue
            seen[kind] += 1
            right = [i for i, q in enumerate(quality) if q > 0]
            correct += len(right)
            positive_credit += sum(record["shapley"][i] > ZERO_TOLERANCE for i in right)
            if any(abs(record["advantage"][i]) > ZERO_TOLERANCE for i in right):
                pushed[kind] += 1
    return [
        Check(
            "non-zero credit: mixed groups",
            pushed["mixed"] > 0,
            f"{pushed['mixed']} of {seen['mixed']} mixed groups with a non-zero advantage on a correct rollout",
        ),
        Check(
            "non-zero credit: all-correct groups",
            pushed["all_correct"] > 0,
            f"{pushed['all_correct']} of {seen['all_correct']} all-correct groups with a non-zero advantage",
        ),
        Check(
            "positive Shapley credit of correct rollouts",
            correct > 0 and positive_credit == correct,
            f"{positive_credit} of {correct} correct rollouts",
        ),
    ]


def check_checkpoint_ranks(checkpoint_dir: str | os.PathLike, step: int, world_size: int) -> Check:
    """The checkpoint of ``step`` holds the model, optimiser and extra state of every FSDP rank."""
    actor = Path(checkpoint_dir) / f"global_step_{step}" / "actor"
    missing = [
        f"{kind}_world_size_{world_size}_rank_{rank}.pt"
        for rank in range(world_size)
        for kind in ("model", "optim", "extra_state")
        if not (actor / f"{kind}_world_size_{world_size}_rank_{rank}.pt").is_file()
    ]
    return Check(
        f"checkpoint of step {step} holds every rank",
        not missing,
        f"missing {missing} in {actor}" if missing else f"{world_size} ranks' shards in {actor}",
    )


def check_job(name: str, state: str, exit_code: str) -> Check:
    """A Slurm job that ended well: COMPLETED with exit code 0:0."""
    return Check(f"{name} job", state == "COMPLETED" and exit_code == "0:0", f"{state} {exit_code}".strip())


# the roles that must run on every node of a multi-node run (tests/special_e2e/smoke/ray_actors.py names them)
PLACED_ON_EVERY_NODE = ("FSDP ranks", "vLLM replicas", "credit-actor shards")


def check_actor_placement(
    peak: Mapping[str, Mapping[str, int]], node_names_by_ip: Mapping[str, str], last_error: str = ""
) -> list[Check]:
    """FSDP ranks, vLLM replicas and credit-actor shards alive on every node at some point of the run."""
    if not peak:
        return [Check("actor placement", False, f"Ray's state API gave no sample ({last_error or 'no record'})")]
    results = []
    for role in PLACED_ON_EVERY_NODE:
        by_ip = peak.get(role, {})
        on = sorted(node_names_by_ip.get(ip, ip) for ip in by_ip)
        absent = sorted(set(node_names_by_ip.values()) - set(on))
        results.append(
            Check(
                f"{role} on every node",
                not absent,
                ", ".join(f"{node_names_by_ip.get(ip, ip)}: {n}" for ip, n in sorted(by_ip.items()))
                + (f"; none on {absent}" if absent else ""),
            )
        )
    return results


def check_node_loss(state: str, ended_at: float, kill: Mapping, log: str | os.PathLike, bound_s: float) -> list[Check]:
    """A job that lost a node ended (not COMPLETED) within ``bound_s`` of the crash, with exactly one line naming
    the lost node."""
    node = kill["node"]
    waited = ended_at - float(kill["time"]) if ended_at else float("inf")
    try:
        lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    naming = [line.strip() for line in lines if f"node {node} " in line and "left the job" in line]
    return [
        Check(
            "node loss ends the job",
            state != "COMPLETED" and waited <= bound_s,
            f"{state}, {waited:.1f} s after {node} crashed (bound {bound_s:.0f} s)",
        ),
        Check(
            "node loss named in one line",
            len(naming) == 1,
            naming[0][:200] if len(naming) == 1 else f"{len(naming)} lines name {node} as lost",
        ),
    ]


# the glossary of the gcpo/* metrics (docs/metrics.md): each metric's name in backticks in a table row
GLOSSARY = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
GLOSSARY_PREFIXES = ("gcpo/", "timing_s/gcpo_")


def glossary_metrics(path: str | os.PathLike = GLOSSARY) -> set[str]:
    """The metric names docs/metrics.md describes (backticked names in the first cell of its table rows)."""
    import re

    names = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([^`]+)`", line.split(" | ")[0]))
    return names


def check_metric_glossary(metrics: Mapping[int, Mapping[str, float]], path: str | os.PathLike = GLOSSARY) -> Check:
    """Every ``gcpo/*`` and ``timing_s/gcpo_*`` metric the run logged is described in docs/metrics.md."""
    logged = {key for data in metrics.values() for key in data if key.startswith(GLOSSARY_PREFIXES)}
    if not Path(path).is_file():
        return Check("metrics in the glossary", True, f"{path} not here (an install without docs): not checked")
    missing = sorted(logged - glossary_metrics(path))
    return Check(
        "metrics in the glossary",
        not missing,
        f"not in docs/metrics.md: {missing}" if missing else f"{len(logged)} gcpo metrics, each described",
    )


# GCPO's push in all-correct groups against the correctness push in mixed groups: under the default
# all_correct_scale=group both are normalised by their group's own spread, so they are of the same order (about 1
# to 1 on real rollouts); batch scales the first by the batch's right-vs-wrong spread (20-30x smaller)
SAME_ORDER = 0.25


def run_config_value(checkpoint_dir: str | os.PathLike, key: str):
    """A key of the composed config the run used, from Hydra's record beside its checkpoints
    (``<default_local_dir>/hydra/<time>/.hydra/config.yaml``, the latest run's); None when there is none."""
    import yaml

    records = sorted(Path(checkpoint_dir).glob("hydra/*/.hydra/config.yaml"))
    if not records:
        return None
    node = yaml.safe_load(records[-1].read_text(encoding="utf-8"))
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def check_all_correct_push(metrics: Mapping[int, Mapping[str, float]], scale: str | None) -> Check:
    """Under ``all_correct_scale=group`` (the default) all-correct groups carry a push of the same order as mixed
    ones: mean ``gcpo/all_correct_adv_abs`` over the steps that had both kinds of group is at least
    ``SAME_ORDER`` of mean ``gcpo/mixed_adv_abs``. Under ``batch`` the balance is only reported."""
    both = [
        s
        for s, d in metrics.items()
        if (d.get("gcpo/all_correct_adv_abs") or 0) > 0 and (d.get("gcpo/mixed_adv_abs") or 0) > 0
    ]
    if not both:
        return Check("all-correct push", False, "no step had both an all-correct and a mixed group with advantages")
    pushed = sum(metrics[s]["gcpo/all_correct_adv_abs"] for s in both) / len(both)
    mixed = sum(metrics[s]["gcpo/mixed_adv_abs"] for s in both) / len(both)
    detail = (
        f"mean |advantage| {pushed:.3f} in all-correct groups, {mixed:.3f} in mixed ones ({pushed / mixed:.2f}) "
        f"at steps {both}; all_correct_scale={scale}"
    )
    if scale == "batch":
        return Check("all-correct push", True, detail + " (scaled by the batch's spread: not required)")
    return Check("all-correct push", pushed >= SAME_ORDER * mixed, detail + f" (required: >= {SAME_ORDER})")


STALENESS = "training/off_policy/trajectory_staleness/max"
SPAN = "gcpo/policy_version/group_span_max"


def check_trainer_mode(metrics: Mapping[int, Mapping[str, float]], mode: str | None, gcpo: bool) -> Check:
    """The run trained in its trainer mode: in ``sync`` every batch was generated by the weights it trains (verl's
    staleness 0, each group one policy version); in ``colocate_async`` some step after the first trained on a
    batch generated before the previous weight update (staleness >= 1), and, under GCPO, every step says how many
    versions its groups span."""
    mode = mode or "sync"
    stale = {step: data.get(STALENESS) for step, data in sorted(metrics.items())}
    spans = {step: data.get(SPAN) for step, data in sorted(metrics.items())}
    detail = f"{mode}: verl's staleness by step {stale}" + (f", group spans {spans}" if gcpo else "")
    if gcpo and any(span is None or not span >= 1 for span in spans.values()):
        return Check(f"trainer mode {mode}", False, detail + f"; {SPAN} missing or below 1")
    if mode == "sync":
        ok = all((s or 0) == 0 for s in stale.values()) and (not gcpo or all(v == 1 for v in spans.values()))
    else:
        ok = any((s or 0) >= 1 for step, s in stale.items() if step > 1)
    return Check(f"trainer mode {mode}", ok, detail)


# the glossary's metrics the CPU smoke's GCPO run cannot log, by the conditions the glossary gives for them
NOT_IN_THE_CPU_SMOKE = {
    "gcpo/encoder/peak_mem_gb": "GPU only",
    "gcpo/encoder/shards": "more than one credit-actor shard",
    "gcpo/encoder/shard_pieces_max_over_mean": "more than one credit-actor shard",
    "gcpo/reward/timeouts": "the recipe's math-verify reward (the smoke scores with its own)",
    "gcpo/reward/timeout_frac": "the recipe's math-verify reward (the smoke scores with its own)",
    "gcpo/reward/timeout_retries": "the recipe's math-verify reward (the smoke scores with its own)",
}
CREDIT_TABLE = "gcpo/credit_table"
CREDIT_FIGURES = "gcpo/credit_groups"
PNG = b"\x89PNG\r\n\x1a\n"


def check_wandb_run(
    wandb_dir: str | os.PathLike,
    metrics: Mapping[int, Mapping[str, float]],
    *,
    gcpo: bool,
    dump_dir: str | os.PathLike | None = None,
    table_groups: int = 0,
    glossary: str | os.PathLike = GLOSSARY,
    not_logged: Mapping[str, str] = NOT_IN_THE_CPU_SMOKE,
    label: str = "W&B",
) -> list[Check]:
    """A run's W&B offline run (``WANDB_DIR=wandb_dir``), read back with W&B's own record format
    (:mod:`tests.special_e2e.smoke.wandb_run`), against what the file logger wrote for the same run (``metrics``):
    the run ended with exit code 0; every step the file logger has is in W&B with each ``gcpo/*`` and
    ``timing_s/gcpo_*`` value the same; under GCPO every such name the glossary lists is logged (but ``not_logged``,
    each with its reason), and at every step the credit was dumped (``dump_dir``) W&B holds the credit table of its
    first ``table_groups`` groups, row for row the dump's, and one PNG credit figure per group."""
    from gcpo_core.evaluation.credit_report import TABLE_COLUMNS, table_rows
    from gcpo_core.evaluation.dump import read_credit_dump
    from tests.special_e2e.smoke.wandb_run import OfflineRunError, read_offline_run

    try:
        run = read_offline_run(wandb_dir)
    except (OSError, OfflineRunError) as err:
        return [Check(f"{label} run", False, str(err))]
    results = [
        Check(
            f"{label} run ended",
            run.exit_code == 0,
            f"exit record: code {run.exit_code}" if run.exit_code is not None else "no exit record: never finished",
        )
    ]
    differ, absent = [], []
    for step, data in sorted(metrics.items()):
        logged = run.history.get(step, {})
        for key, value in data.items():
            if not key.startswith(GLOSSARY_PREFIXES):
                continue
            if key not in logged:
                absent.append(f"{key}@{step}")
            elif not math.isclose(float(logged[key]), float(value), rel_tol=1e-9, abs_tol=1e-12):
                differ.append(f"{key}@{step}: {logged[key]} in W&B, {value} in the file")
    results.append(
        Check(
            f"{label} scalars",
            bool(metrics) and set(metrics) <= set(run.history) and not differ and not absent,
            f"steps {sorted(run.history)} in W&B, {sorted(metrics)} in the file logger"
            + (f"; missing {absent[:5]}" if absent else "")
            + (f"; different {differ[:3]}" if differ else ""),
        )
    )
    if not gcpo:
        return results
    if Path(glossary).is_file():
        listed = {key for key in glossary_metrics(glossary) if key.startswith(GLOSSARY_PREFIXES)}
        missing = sorted(listed - run.keys() - set(not_logged))
        results.append(
            Check(
                f"{label} holds the glossary's metrics",
                not missing,
                f"listed in docs/metrics.md, not in W&B: {missing}"
                if missing
                else f"{len(listed) - len(set(not_logged) & listed)} of {len(listed)} (not here: "
                f"{', '.join(sorted(set(not_logged) & listed))})",
            )
        )
    for path in sorted(Path(dump_dir).glob("credit_step*.jsonl")) if dump_dir and table_groups else ():
        step = int(path.stem.removeprefix("credit_step"))
        if step not in metrics:
            # a dump of the other trainer run (the first, beside a resumed run's); W&B may still have its step: a
            # resumed run validates before training at its checkpoint's step
            continue
        shown = list(read_credit_dump(path))[:table_groups]
        results.append(_check_credit_table(run, step, table_rows(shown), TABLE_COLUMNS, label))
        results.append(_check_credit_figures(run, step, len(shown), label))
    return results


def _check_credit_table(run, step: int, expected: list[list], columns: Sequence[str], label: str) -> Check:
    name = f"{label} credit table step {step}"
    value = run.history[step].get(CREDIT_TABLE)
    if not isinstance(value, dict) or value.get("_type") != "table-file":
        return Check(name, False, f"{CREDIT_TABLE} at step {step}: {value!r}, not a table")
    table = json.loads(run.media(value).read_text(encoding="utf-8"))
    if table.get("columns") != list(columns):
        return Check(name, False, f"columns {table.get('columns')}, not {list(columns)}")
    rows = table.get("data", [])
    numbers = len(rows) == len(expected) and all(
        math.isclose(a, b, abs_tol=1e-9) for got, want in zip(rows, expected) for a, b in zip(got[4:], want[4:])
    )
    texts = [row[:4] for row in rows] == [row[:4] for row in expected]
    return Check(
        name,
        bool(rows) and numbers and texts,
        f"{len(rows)} rollouts ({len(expected)} in the dump's first groups); texts {'match' if texts else 'DIFFER'}, "
        f"reward, credit and advantages {'match' if numbers else 'DIFFER'}",
    )


def _check_credit_figures(run, step: int, groups: int, label: str) -> Check:
    name = f"{label} credit figures step {step}"
    value = run.history[step].get(CREDIT_FIGURES)
    if not isinstance(value, dict) or value.get("_type") != "images/separated":
        return Check(name, False, f"{CREDIT_FIGURES} at step {step}: {value!r}, not images")
    files = [run.folder / "files" / name for name in value.get("filenames", [])]
    pictures = [path for path in files if path.is_file() and path.read_bytes()[: len(PNG)] == PNG]
    return Check(
        name,
        len(pictures) == groups == value.get("count"),
        f"{len(pictures)} PNG figures of {value.get('width')}x{value.get('height')} for {groups} groups",
    )
