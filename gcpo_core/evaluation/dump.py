"""Credit dumps: a sample of groups with texts, rewards, embeddings, Shapley credit and advantages (JSONL).

Written by the trainer every ``algorithm.gcpo.dump.every_n_steps`` steps and read by ``gcpo report``. One line
per group.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Hashable, Iterator, Sequence

import numpy as np

from gcpo_core.encoding.pipeline import RolloutCredit

DUMP_FIELDS = ("texts", "rewards", "quality", "shapley", "shapley_stderr", "score", "advantage", "embeddings")


def write_credit_dump(
    directory: str | os.PathLike,
    step: int,
    texts: Sequence[str],
    rewards: Sequence[float],
    uids: Sequence[Hashable],
    valid: Sequence[bool],
    result: RolloutCredit,
    max_groups: int = 16,
    seed: int = 0,
    prompts: Sequence[str] | None = None,
) -> Path:
    """Write up to ``max_groups`` groups (chosen at random, reproducibly from ``seed`` and ``step``) of one step
    (``prompts``: each row's prompt text, kept once a group as ``prompt``).

    ``advantage`` is the credit engine's, before any KL-in-reward shaping verl adds. Returns the file written
    (``<directory>/credit_step<step>.jsonl``).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rows_by_group: dict[Hashable, list[int]] = {}
    for row, (uid, ok) in enumerate(zip(uids, valid)):
        if ok:
            rows_by_group.setdefault(uid, []).append(row)
    groups = list(rows_by_group)
    rng = np.random.default_rng([int(seed), int(step)])
    chosen = sorted(rng.choice(len(groups), size=min(max_groups, len(groups)), replace=False)) if groups else []
    path = directory / f"credit_step{int(step):06d}.jsonl"
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        for g in chosen:
            rows = rows_by_group[groups[g]]
            record = {"step": int(step), "uid": str(groups[g]), "texts": [texts[r] for r in rows]}
            if prompts is not None:
                record["prompt"] = prompts[rows[0]]
            record["rewards"] = [float(rewards[r]) for r in rows]
            for name in ("quality", "shapley", "shapley_stderr", "score", "advantage"):
                record[name] = [float(getattr(result, name)[r]) for r in rows]
            if result.embeddings is not None:
                record["embeddings"] = [[round(float(x), 6) for x in result.embeddings[r]] for r in rows]
            record["metrics"] = {k: float(v) for k, v in result.metrics.items()}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def read_credit_dump(path: str | os.PathLike) -> Iterator[dict]:
    """The group records of one dump file (or of every ``credit_step*.jsonl`` in a directory), by step."""
    path = Path(path)
    files = sorted(path.glob("credit_step*.jsonl")) if path.is_dir() else [path]
    for file in files:
        with open(file, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                record = json.loads(line)
                missing = [k for k in ("step", "uid", "texts", "rewards", "shapley", "advantage") if k not in record]
                if missing:
                    raise ValueError(f"{file}:{number}: not a GCPO credit dump record (missing {missing})")
                yield record
