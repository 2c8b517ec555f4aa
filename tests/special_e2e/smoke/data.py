"""The smoke run's prompts: the GSM8K problems the package ships (``gcpo_core/data/demo_rollouts.jsonl``), in
verl's parquet format, written by the same code as the real training data (:func:`gcpo_core.training_data.prepare.prepare`).

Each prompt also carries the rate at which the smoke reward marks its rollouts correct
(``extra_info.smoke_correct_rate``), cycling through :data:`CORRECT_RATES`: every step then has an all-wrong group,
a group where about half the rollouts are correct and an all-correct group, whichever prompts the sampler draws,
as long as the batch holds all of them.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import pandas as pd

from gcpo_core.training_data.prepare import DatasetSpec, prepare, write_parquet

DATA_SOURCE = "gcpo_smoke"
RATE_KEY = "smoke_correct_rate"
# all wrong, about half right, all right (the reward's fingerprint is in [0, 1), so 1.0 is always right)
CORRECT_RATES = (0.0, 0.5, 1.0)


def shipped_problems() -> list[dict]:
    """The distinct problems of the package's demo rollouts, in file order (``problem`` and ``answer``)."""
    text = resources.files("gcpo_core").joinpath("data/demo_rollouts.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def smoke_frame(split: str, rates: tuple[float, ...] = CORRECT_RATES, prompts: int | None = None) -> pd.DataFrame:
    """verl rows of the shipped problems (deduplicated), each with its correct rate in ``extra_info``; with
    ``prompts``, that many rows, the problems repeated in order (each row is a group of its own in training)."""
    if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"correct rates must be in [0, 1], got {rates!r}")
    if prompts is not None and prompts < 1:
        raise ValueError(f"prompts must be a positive number, got {prompts!r}")
    spec = DatasetSpec(DATA_SOURCE, split, local_files=(), hub_id="", hub_split="")
    frame, _ = prepare(spec, shipped_problems())
    if frame.empty:
        raise RuntimeError("gcpo_core/data/demo_rollouts.jsonl holds no problem with an answer")
    if prompts is not None:
        frame = frame.iloc[[i % len(frame) for i in range(prompts)]].reset_index(drop=True)
    frame["extra_info"] = [
        {**info, "index": i, RATE_KEY: float(rates[i % len(rates)])} for i, info in enumerate(frame["extra_info"])
    ]
    return frame


def write_smoke_data(out_dir: str | os.PathLike, prompts: int | None = None) -> dict[str, Path]:
    """Write ``train.parquet`` and ``val.parquet`` (the same prompts) to ``out_dir``; returns both paths."""
    out_dir = Path(out_dir)
    paths = {}
    for split, name in (("train", "train.parquet"), ("val", "val.parquet")):
        paths[split] = out_dir / name
        write_parquet(smoke_frame(split, prompts=prompts), paths[split])
    return paths
