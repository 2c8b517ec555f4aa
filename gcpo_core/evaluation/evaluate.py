"""Evaluation of sampled solutions: accuracy (avg@k), unbiased pass@k, and diversity of the correct solutions.

Generations are read from JSONL, one line per problem::

    {"benchmark": "aime24", "id": "60", "problem": "...", "answer": "204", "responses": ["...", ...]}

(``benchmark`` may also be ``data_source``; ``answer`` may be omitted when a benchmark file supplies the gold
answers by ``id`` or problem text), or as verl's validation dumps (``trainer.validation_data_dir``), one line
per sample with ``input``, ``output`` and ``gts``. Benchmarks are the prepared verl parquet files or JSONL
with ``problem`` and ``answer``.
"""

from __future__ import annotations

import json
import math
import numbers
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from gcpo_core.rewards.prompts import instruct


@dataclass
class ProblemGenerations:
    benchmark: str
    problem_id: str
    problem: str
    answer: str
    responses: list[str]
    prompt: Optional[list[dict]] = None


@dataclass
class ScoredProblem:
    generations: ProblemGenerations
    correct: list[bool]
    answers: list[str] = field(default_factory=list)  # each response's final answer, as math-verify reads it


# ----------------------------------------------------------------------------------------------- reading
Rows = Iterable[tuple[str, object]]  # (where: "FILE:LINE" or "FILE: row N", the row as read)


def read_rows(path: str | Path) -> Iterator[tuple[str, object]]:
    """(where, row) for every row of a prepared verl parquet file or of a JSONL file (UTF-8, blank lines skipped);
    a file that cannot be read is a ValueError naming it (and the line)."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pandas as pd
        import pyarrow

        try:
            table = pd.read_parquet(path)
        except (ValueError, pyarrow.ArrowException) as err:
            raise ValueError(f"{path}: not a readable parquet file ({' '.join(str(err).split())})") from None
        for index, row in enumerate(table.to_dict(orient="records")):
            yield f"{path}: row {index}", row
        return
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8").removeprefix("\ufeff")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{where}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1})"
                ) from None
            if line.strip():
                try:
                    yield where, json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(
                        f"{where}: not valid JSON ({err.msg.removesuffix(' at')} at column {err.colno})"
                    ) from None


def _kind(value: object) -> str:
    """A JSON value's kind, as an error message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, numbers.Number):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple, np.ndarray)):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _row(where: str, row: object) -> dict:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected an object (one problem or sample per line), got {_kind(row)}")
    return row


def _text(row: dict, keys: Sequence[str], where: str) -> Optional[str]:
    """The first of ``keys`` that holds a non-empty string; a key that holds something else is an error."""
    for key in keys:
        value = row.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ValueError(f"{where}: {key!r} must be a string, got {_kind(value)}")
        return value
    return None


def _gold(row: dict, where: str) -> Optional[str]:
    """The gold answer of a row (``answer``, verl's ``gts`` / ``ground_truth``, or ``reward_model.ground_truth``):
    a string or a number, as text; None when the row has none."""
    reward_model = row.get("reward_model")
    candidates = [(key, row.get(key)) for key in ("answer", "gts", "ground_truth")]
    if isinstance(reward_model, dict):
        candidates.append(("reward_model.ground_truth", reward_model.get("ground_truth")))
    for key, value in candidates:
        if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):  # parquet's missing
            continue
        if isinstance(value, str):
            return value
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
            return str(value)
        raise ValueError(f"{where}: {key!r} (the gold answer) must be a string or a finite number, got {_kind(value)}")
    return None


def _identifier(row: dict, where: str, keys: Sequence[str] = ("id", "index")) -> Optional[str]:
    """The row's problem id (the first of ``keys`` present), as text."""
    for key in keys:
        value = row.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, numbers.Integral)):
            raise ValueError(f"{where}: {key!r} must be a string or an integer, got {_kind(value)}")
        return str(value)
    return None


def load_benchmark(path: str | Path, name: Optional[str] = None) -> list[dict]:
    """Problems of a benchmark file: dicts with ``benchmark``, ``id``, ``problem``, ``answer``, ``prompt``."""
    return benchmark_from_rows(read_rows(path), path, name)


def benchmark_from_rows(rows: Rows, path: str | Path, name: Optional[str] = None) -> list[dict]:
    """:func:`load_benchmark` of rows read elsewhere (``(where, row)``, as :func:`read_rows` gives them)."""
    path = Path(path)
    problems = []
    for index, (where, row) in enumerate(rows):
        row = _row(where, row)
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        problem = _text(row, ("problem",), where) or _text(extra, ("problem",), f"{where}: extra_info") or ""
        prompt = row.get("prompt")
        prompt = [dict(m) for m in prompt] if prompt is not None and len(prompt) else None
        answer = _gold(row, where)
        if answer is None:
            raise ValueError(f"{where}: no gold answer ('answer', 'gts', 'ground_truth' or reward_model.ground_truth)")
        source_id = extra.get("source_id")
        problems.append(
            {
                "benchmark": name or _text(row, ("data_source",), where) or path.stem.removeprefix("val_"),
                "id": _identifier(row, where, ("id",)) or str(_first_present(source_id, index)),
                "problem": problem,
                "answer": answer,
                "prompt": prompt,
            }
        )
    return problems


def _first_present(*values):
    """The first value that is not None (None if all are)."""
    return next((v for v in values if v is not None), None)


class _BenchmarkIndex:
    """Finds a generation's benchmark problem by (benchmark, id), by problem text, or -- for verl's dumps, whose
    ``input`` is the whole decoded prompt -- by the problem text inside it."""

    def __init__(self, benchmarks: Sequence[dict]):
        self.by_id = {(b["benchmark"], b["id"]): b for b in benchmarks}
        self.by_text = {" ".join(b["problem"].split()): b for b in benchmarks if b["problem"]}
        self._cache: dict[str, Optional[dict]] = {}

    def find(self, benchmark: Optional[str], problem_id: Optional[str], text: str) -> Optional[dict]:
        if benchmark is not None and problem_id is not None and (benchmark, problem_id) in self.by_id:
            return self.by_id[(benchmark, problem_id)]
        key = " ".join(text.split())
        if key in self.by_text:
            return self.by_text[key]
        if key not in self._cache:  # the longest benchmark problem contained in the prompt
            inside = [p for t, p in self.by_text.items() if t and t in key]
            self._cache[key] = max(inside, key=lambda p: len(p["problem"])) if inside else None
        return self._cache[key]


def load_generations(
    path: str | Path, benchmarks: Sequence[dict] = (), default_benchmark: Optional[str] = None
) -> list[ProblemGenerations]:
    """Generations of one run; gold answers from the lines or, by id / problem text, from ``benchmarks`` (which
    also name the benchmark of lines that do not)."""
    return generations_from_rows(read_rows(path), path, benchmarks, default_benchmark)


def generations_from_rows(
    rows: Rows, path: str | Path, benchmarks: Sequence[dict] = (), default_benchmark: Optional[str] = None
) -> list[ProblemGenerations]:
    """:func:`load_generations` of rows read elsewhere (``(where, row)``, as :func:`read_rows` gives them); every
    field is checked, and the first bad one is a ValueError naming its line."""
    path = Path(path)
    index = _BenchmarkIndex(benchmarks)
    grouped: "OrderedDict[tuple, ProblemGenerations]" = OrderedDict()
    for where, row in rows:
        row = _row(where, row)
        benchmark = _text(row, ("benchmark", "data_source"), where)
        problem = _text(row, ("problem", "input"), where) or ""
        problem_id = _identifier(row, where)
        if "responses" in row:
            responses = row["responses"]
            if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
                raise ValueError(f"{where}: 'responses' must be a list of strings, got {_kind(responses)}")
            if not responses:
                raise ValueError(f"{where}: 'responses' is empty: a problem needs at least one response")
        elif "output" in row:
            if not isinstance(row["output"], str):
                raise ValueError(f"{where}: 'output' (one sample, verl's dump format) must be a string")
            responses = [row["output"]]
        else:
            raise ValueError(f"{where}: needs 'responses' (list) or 'output' (one sample, verl's dump format)")
        answer = _gold(row, where)
        match = (
            index.find(benchmark, problem_id, problem) if benchmarks and (answer is None or benchmark is None) else None
        )
        if answer is None:
            if match is None:
                raise ValueError(f"{where}: no gold answer in the line and no benchmark problem matches it")
            answer = match["answer"]
        if match is not None:
            benchmark, problem_id = match["benchmark"], match["id"]
        benchmark = benchmark or default_benchmark or path.stem
        problem_id = problem_id if problem_id is not None else " ".join(problem.split())
        key = (benchmark, problem_id)
        if key in grouped:
            grouped[key].responses.extend(responses)
        else:
            grouped[key] = ProblemGenerations(benchmark, problem_id, problem, answer, list(responses))
    if not grouped:
        raise ValueError(f"{path}: no generations")
    return list(grouped.values())


# ----------------------------------------------------------------------------------------------- scoring
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): the chance that k of the n samples, c of them correct, hold one
    correct; ``1 - C(n-c, k) / C(n, k)`` as a numerically stable product."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def score_generations(
    problems: Sequence[ProblemGenerations], progress: bool = True, timeout_s: Optional[float] = None
) -> list[ScoredProblem]:
    """math-verify every response against its problem's gold answer, batched over worker processes, each answer
    within ``timeout_s`` (default: math_reward's bound); one that misses it is wrong."""
    from gcpo_core.rewards.math_reward import DEFAULT_TIMEOUT_S, score_answers

    pairs = [(r, problem.answer) for problem in problems for r in problem.responses]
    verdicts = iter(score_answers(pairs, timeout_s=timeout_s or DEFAULT_TIMEOUT_S, progress=progress))
    scored = []
    for problem in problems:
        mine = [next(verdicts) for _ in problem.responses]
        scored.append(ScoredProblem(problem, [v.correct for v in mine], [v.answer for v in mine]))
    return scored


def default_ks(samples: int) -> list[int]:
    """Every k from 1 to the number of samples."""
    return list(range(1, samples + 1))


def benchmark_metrics(
    scored: Sequence[ScoredProblem],
    embed: Optional[Callable[[list[str]], np.ndarray]] = None,
    ks: Optional[Sequence[int]] = None,
    cluster_threshold: float = 0.9,
) -> dict[str, float]:
    """Metrics of one run on one benchmark.

    ``avg@k``: mean correctness of all samples. ``pass@k``: unbiased, for every k up to the smallest sample
    count. Diversity: means over the problems with at least two correct solutions (``embed`` maps texts to
    embeddings for the embedding metrics; without it those are skipped). ``distinct_answers``: distinct final
    answers among all samples of a problem; ``distinct_correct_answers``: distinct written forms of the correct
    answer among the correct samples (problems with one); both averaged over problems.
    """
    from gcpo_core.evaluation.diversity import diversity_metrics

    if not scored:
        raise ValueError("no problems to evaluate")
    samples = min(len(p.correct) for p in scored)
    if samples == 0:
        raise ValueError("a problem has no responses")
    metrics: dict[str, float] = {
        "problems": float(len(scored)),
        "samples_per_problem": float(samples),
        f"avg@{samples}": float(np.mean([np.mean(p.correct) for p in scored])),
    }
    for k in sorted(set(ks or default_ks(samples))):
        if k <= samples:
            metrics[f"pass@{k}"] = float(np.mean([pass_at_k(len(p.correct), sum(p.correct), k) for p in scored]))
    metrics["distinct_answers"] = float(np.mean([len({a for a in p.answers if a}) for p in scored]))
    solved = [p for p in scored if any(p.correct)]
    metrics["distinct_correct_answers"] = (
        float(np.mean([len({a for a, ok in zip(p.answers, p.correct) if ok and a}) for p in solved]))
        if solved
        else math.nan
    )

    multi = [p for p in scored if sum(p.correct) >= 2]
    metrics["problems_with_2plus_correct"] = float(len(multi))
    texts = [[r for r, ok in zip(p.generations.responses, p.correct) if ok] for p in multi]
    embeddings = _embed_groups(texts, embed) if embed is not None else [None] * len(texts)
    per_problem = [diversity_metrics(group, emb, cluster_threshold) for group, emb in zip(texts, embeddings)]
    for name in per_problem[0] if per_problem else {}:
        values = [v[name] for v in per_problem if not math.isnan(v[name])]
        metrics[f"correct_{name}"] = float(np.mean(values)) if values else math.nan
    return metrics


def _embed_groups(groups: list[list[str]], embed: Callable[[list[str]], np.ndarray]) -> list[np.ndarray]:
    flat = [t for g in groups for t in g]
    if not flat:
        return []
    vectors = np.asarray(embed(flat))
    out, start = [], 0
    for g in groups:
        out.append(vectors[start : start + len(g)])
        start += len(g)
    return out


# ----------------------------------------------------------------------------------------------- generation
def generate_with_vllm(
    model: str,
    problems: Sequence[dict],
    samples: int,
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_tokens: int = 8192,
    tensor_parallel_size: int = 1,
    seed: int = 0,
    instruction: str = "dapo",
    llm_factory: Optional[Callable] = None,
) -> list[ProblemGenerations]:
    """Sample ``samples`` responses per problem with vLLM (chat template of the model, one request per problem).

    A problem's own chat prompt (verl parquet) is used as is; a bare problem gets ``instruction``.
    ``llm_factory(model, tensor_parallel_size, seed)`` replaces ``vllm.LLM`` (tests).
    """
    try:
        from vllm import SamplingParams
    except ImportError:
        if llm_factory is None:
            raise RuntimeError(
                "generation needs vLLM (a GPU machine with `pip install vllm`); "
                "to evaluate existing generations pass their JSONL instead"
            ) from None
        SamplingParams = dict  # noqa: N806  (tests: parameters passed as a dict)
    if llm_factory is None:
        from vllm import LLM

        llm = LLM(model=model, tensor_parallel_size=tensor_parallel_size, seed=seed)
    else:
        llm = llm_factory(model, tensor_parallel_size, seed)
    params = SamplingParams(n=samples, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
    conversations = [
        p["prompt"] or [{"role": "user", "content": instruct(p["problem"], instruction)}] for p in problems
    ]
    outputs = llm.chat(conversations, params)
    return [
        ProblemGenerations(
            p["benchmark"], p["id"], p["problem"], p["answer"], [o.text for o in out.outputs], p["prompt"]
        )
        for p, out in zip(problems, outputs)
    ]


def write_generations(problems: Sequence[ProblemGenerations], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for p in problems:
            handle.write(
                json.dumps(
                    {
                        "benchmark": p.benchmark,
                        "id": p.problem_id,
                        "problem": p.problem,
                        "answer": p.answer,
                        "responses": p.responses,
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
