"""Training and validation data in verl's parquet format, from local files (offline) or the Hugging Face hub.

Training: DAPO-Math-17K, deduplicated (the public parquet repeats each of its ~17.9k prompts ~100 times).
Validation: AIME 2024, AIME 2025, MATH-500, AMC 2023, GSM8K (test), each deduplicated too (a common AIME
parquet holds 30 problems x 32 copies; evaluate avg@k with ``val_kwargs.n=k`` instead).

Every prompt gets the same answer instruction (DAPO's: the last line is ``Answer: $Answer``), and every row is
scored by ``recipe/gcpo/reward.py`` with math-verify. Rows: ``data_source`` (the set's name, which verl's
validation metrics group by), ``prompt`` (a one-message chat), ``ability``, ``reward_model`` (``style: rule``,
``ground_truth``), ``extra_info`` (``index``, ``split``, the bare ``problem``, the source's id, and the reference
``solution`` where the source has one). MATH's training set (with solutions) is there for the Group
Contrastive PO baseline.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import pandas as pd
from tqdm import tqdm

from gcpo_core.encoding.text_span import last_boxed
from gcpo_core.rewards.prompts import INSTRUCTIONS

# The DAPO release wraps each problem in its own instruction: recognise it to recover the bare problem.
_DAPO_WRAPPED = re.compile(
    r"^Solve the following math problem step by step\..*?problem\.\s*\n\n(?P<problem>.*?)\n\n"
    r"Remember to put your answer on its own line after \"Answer:\"\.\s*$",
    re.DOTALL,
)
# A form feed is "\f" lost to JSON escaping: "\frac" arrives as <FF>"rac" in a share of DAPO-Math-17K.
_FORM_FEED = "\x0c"


@dataclass(frozen=True)
class DatasetSpec:
    """Where a set comes from and how its rows read."""

    name: str
    split: str  # train | val
    local_files: tuple[str, ...]
    hub_id: str
    hub_split: str
    hub_config: Optional[str] = None
    problem_keys: tuple[str, ...] = ("problem", "question", "Problem")
    answer_keys: tuple[str, ...] = ("answer", "Answer", "expected_answer")


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "dapo_math_17k",
            "train",
            ("dapo-math-17k.parquet", "dapo_math_17k.jsonl", "dapo_math_sample.jsonl"),
            "BytedTsinghua-SIA/DAPO-Math-17k",
            "train",
        ),
        # MATH train (7.5k, with reference solutions): the training set of the Group Contrastive PO baseline
        DatasetSpec(
            "math", "train", ("math_train.jsonl", "math_train.parquet"), "DigitalLearningGmbH/MATH-lighteval", "train"
        ),
        DatasetSpec("aime24", "val", ("aime24.jsonl", "aime-2024.parquet"), "Maxwell-Jia/AIME_2024", "train"),
        DatasetSpec("aime25", "val", ("aime25.jsonl", "aime-2025.parquet"), "yentinglin/aime_2025", "train"),
        DatasetSpec("math500", "val", ("math500.jsonl", "math500.parquet"), "HuggingFaceH4/MATH-500", "test"),
        DatasetSpec("amc23", "val", ("amc23.jsonl", "amc23.parquet"), "math-ai/amc23", "test"),
        DatasetSpec("gsm8k", "val", ("gsm8k_test.jsonl", "gsm8k.jsonl"), "openai/gsm8k", "test", hub_config="main"),
    )
}


def output_name(name: str, split: str) -> str:
    """The file ``scripts/prepare_data.py`` writes a set to (the launchers read these names under ``DATA_DIR``)."""
    if split == "train":
        return "train.parquet" if name == "dapo_math_17k" else f"train_{name}.parquet"
    return f"val_{name}.parquet"


def prepared_file_names() -> frozenset[str]:
    """Every file name ``scripts/prepare_data.py`` can write."""
    return frozenset(output_name(spec.name, spec.split) for spec in DATASETS.values())


@dataclass
class PrepareReport:
    """What preparing one set did (one row of the summary table)."""

    name: str
    split: str
    source: str = ""
    read: int = 0
    kept: int = 0
    duplicates: int = 0
    repaired: int = 0
    dropped: Counter = field(default_factory=Counter)
    output: str = ""


def read_rows(path: Path) -> list[dict]:
    """Rows of a .jsonl, .json or .parquet file."""
    if path.suffix == ".parquet":
        return pd.read_parquet(path).to_dict(orient="records")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        return data if isinstance(data, list) else data.get("data", [])
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def hub_problem(timeout_s: float = 5.0) -> Optional[str]:
    """Why the Hugging Face hub cannot be reached from here, found in seconds (the datasets library retries for
    minutes); None when it answers."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE") or os.environ.get(
        "HF_DATASETS_OFFLINE", ""
    ).strip().upper() in ("1", "ON", "YES", "TRUE"):
        return "the hub is off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE); use --local-dir with local copies"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as error:
        return f"the hub ({host}) does not answer from this machine ({error}); use --local-dir with local copies"


def load_source(spec: DatasetSpec, local_dir: Optional[Path], download: bool) -> tuple[list[dict], str]:
    """The set's raw rows: a local file when one of ``spec.local_files`` is in ``local_dir``, else the hub."""
    if local_dir is not None:
        for name in spec.local_files:
            path = Path(local_dir) / name
            if path.is_file():
                return read_rows(path), str(path)
    if not download:
        where = f" in {local_dir}" if local_dir else ""
        raise FileNotFoundError(
            f"{spec.name}: none of {list(spec.local_files)} found{where}; pass --local-dir with one of them, "
            f"or --download to fetch {spec.hub_id} from the Hugging Face hub"
        )
    problem = hub_problem()
    if problem is not None:
        raise RuntimeError(f"{spec.name}: cannot download {spec.hub_id}: {problem}")
    try:
        from datasets import load_dataset

        rows = load_dataset(spec.hub_id, spec.hub_config, split=spec.hub_split)
    except Exception as err:  # network errors come in many types
        raise RuntimeError(f"{spec.name}: could not download {spec.hub_id} ({err}); use local files") from err
    return [dict(r) for r in rows], f"hub:{spec.hub_id}"


def problem_and_answer(row: dict, spec: DatasetSpec) -> tuple[str, str]:
    """The bare problem and the gold answer of a raw row, in any of the formats the sources use."""
    problem = next((row[k] for k in spec.problem_keys if isinstance(row.get(k), str) and row[k].strip()), "")
    if not problem and isinstance(row.get("prompt"), (list, tuple)) and len(row["prompt"]) > 0:
        problem = str(row["prompt"][-1].get("content", ""))  # verl-format rows
    wrapped = _DAPO_WRAPPED.match(problem.strip())
    if wrapped:
        problem = wrapped.group("problem")
    answer = next((row[k] for k in spec.answer_keys if row.get(k) not in (None, "")), None)
    if answer is None and isinstance(row.get("reward_model"), dict):
        answer = row["reward_model"].get("ground_truth")
    if answer is None and isinstance(row.get("solution"), str):  # MATH: the answer is the solution's last box
        span = last_boxed(row["solution"])
        if span is not None:
            boxed = row["solution"][span[0] : span[1]]
            answer = boxed[boxed.find("{") + 1 : -1]
    answer = "" if answer is None else str(answer)
    if "####" in answer:  # GSM8K's original answer field: worked solution, then "#### n"
        answer = answer.rsplit("####", 1)[1]
    return problem.strip(), answer.strip()


def prepare(
    spec: DatasetSpec,
    rows: Iterable[dict],
    instruction: str = "dapo",
    limit: Optional[int] = None,
    report: Optional[PrepareReport] = None,
) -> tuple[pd.DataFrame, PrepareReport]:
    """verl rows of one set: cleaned, deduplicated by problem text, with the answer instruction."""
    report = report or PrepareReport(spec.name, spec.split)
    template = INSTRUCTIONS[instruction]
    seen: set[str] = set()
    out = []
    rows = list(rows)
    for position, row in enumerate(tqdm(rows, desc=f"{spec.name:>14}", unit="row", leave=False)):
        report.read += 1
        problem, answer = problem_and_answer(row, spec)
        if _FORM_FEED in problem:
            problem = problem.replace(_FORM_FEED, "\\f")
            report.repaired += 1
        if not problem:
            report.dropped["no problem text"] += 1
            continue
        if not answer:
            report.dropped["no answer"] += 1
            continue
        key = " ".join(problem.split())
        if key in seen:
            report.duplicates += 1
            continue
        if limit is not None and len(out) >= limit:
            report.dropped["over --limit"] += 1
            continue
        seen.add(key)
        extra_info = {
            "index": len(out),
            "split": spec.split,
            "problem": problem,
            "source_id": str(_source_id(row, position)),
        }
        if isinstance(row.get("solution"), str) and row["solution"].strip():
            extra_info["solution"] = row["solution"].strip()  # a reference solution (Group Contrastive PO)
        out.append(
            {
                "data_source": spec.name,
                "prompt": [{"role": "user", "content": template.format(problem=problem)}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": extra_info,
            }
        )
    report.kept = len(out)
    return pd.DataFrame(out), report


def _source_id(row: dict, position: int) -> Any:
    for key in ("id", "unique_id", "row_index"):
        if key in row:
            return row[key]
    extra = row.get("extra_info")
    return extra["index"] if isinstance(extra, dict) and "index" in extra else position


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)


def summary_table(reports: list[PrepareReport]) -> str:
    lines = [
        "| set | split | read | kept | duplicates dropped | other rows dropped | control chars repaired | file |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    for r in reports:
        dropped = ", ".join(f"{n} {why}" for why, n in sorted(r.dropped.items())) or "0"
        lines.append(
            f"| {r.name} | {r.split} | {r.read} | {r.kept} | {r.duplicates} | {dropped} | {r.repaired} | {r.output} |"
        )
    return "\n".join(lines)
