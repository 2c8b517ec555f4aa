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
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

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
def _read_table(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(path).to_dict(orient="records")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not valid JSON ({err.msg})") from None
    return rows


def _gold(row: dict) -> Optional[str]:
    for key in ("answer", "gts", "ground_truth"):
        if row.get(key) not in (None, ""):
            return str(row[key])
    reward_model = row.get("reward_model")
    if isinstance(reward_model, dict) and reward_model.get("ground_truth") not in (None, ""):
        return str(reward_model["ground_truth"])
    return None


def load_benchmark(path: str | Path, name: Optional[str] = None) -> list[dict]:
    """Problems of a benchmark file: dicts with ``benchmark``, ``id``, ``problem``, ``answer``, ``prompt``."""
    path = Path(path)
    problems = []
    for index, row in enumerate(_read_table(path)):
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        problem = row.get("problem") or extra.get("problem") or ""
        prompt = row.get("prompt")
        prompt = [dict(m) for m in prompt] if prompt is not None and len(prompt) else None
        answer = _gold(row)
        if answer is None:
            raise ValueError(f"{path}: row {index} has no gold answer")
        problems.append(
            {
                "benchmark": name or row.get("data_source") or path.stem.removeprefix("val_"),
                "id": str(_first_present(row.get("id"), extra.get("source_id"), index)),
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
    path = Path(path)
    index = _BenchmarkIndex(benchmarks)
    grouped: "OrderedDict[tuple, ProblemGenerations]" = OrderedDict()
    for number, row in enumerate(_read_table(path), start=1):
        where = f"{path}:{number}"
        benchmark = row.get("benchmark") or row.get("data_source")
        problem = row.get("problem") or row.get("input") or ""
        given_id = _first_present(row.get("id"), row.get("index"))
        problem_id = None if given_id is None else str(given_id)
        if "responses" in row:
            responses = row["responses"]
            if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
                raise ValueError(f"{where}: 'responses' must be a list of strings")
        elif isinstance(row.get("output"), str):
            responses = [row["output"]]
        else:
            raise ValueError(f"{where}: needs 'responses' (list) or 'output' (one sample, verl's dump format)")
        answer = _gold(row)
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
