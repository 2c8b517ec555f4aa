"""Credit reports from trainer dumps: a self-contained HTML page plus PNGs.

Per group: the kernel heatmap of its rollouts, their Shapley credit, GCPO's advantage next to what GRPO would
give, and the texts. Per run: the credit diagnostics over training steps.
"""

from __future__ import annotations

import base64
import html
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import torch

from gcpo_core.credit.advantages import group_normalize
from gcpo_core.evaluation.plots import group_credit, metrics_over_steps

STEP_METRICS = (
    "gcpo/team_value/mean",
    "gcpo/effective_solutions/mean",
    "gcpo/share_entropy/mean",
    "gcpo/rescued_groups",
    "gcpo/contributing/mean",
    "gcpo/mc_stderr/max",
)


def grpo_advantages(rewards) -> np.ndarray:
    """verl's GRPO advantage of one group's rewards (unbiased std, eps 1e-6)."""
    scores = torch.tensor([list(rewards)], dtype=torch.float64)
    return group_normalize(scores, torch.ones_like(scores, dtype=torch.bool))[0].numpy()


def group_kernel(record: dict) -> np.ndarray:
    if "embeddings" not in record:
        return np.eye(len(record["texts"]))
    emb = np.asarray(record["embeddings"], dtype=np.float64)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True).clip(1e-12)
    return emb @ emb.T


def group_figure(record: dict, path: Path, rows: Optional[int] = None) -> Path:
    """A dump record's picture (:func:`gcpo_core.evaluation.plots.group_credit`): the group's kernel, its Shapley
    credit, GCPO's advantage beside GRPO's; written to ``path`` (PNG). ``rows``: the size of a group of that many
    rollouts whatever this one's (the pictures of one dashboard entry at one size)."""
    rewards = record["rewards"]
    quality = record.get("quality") or [1.0 if r > 0 else 0.0 for r in rewards]
    return group_credit(
        group_kernel(record),
        [f"{i}: r={r:+.2g}" for i, r in enumerate(rewards)],
        record["shapley"],
        record["advantage"],
        grpo_advantages(rewards),
        f"step {record['step']}, prompt {record['uid']}",
        path,
        all_wrong=not any(q > 0 for q in quality),
        rows=rows,
    )


TABLE_COLUMNS = ("step", "prompt", "rollout", "response", "reward", "credit", "gcpo_advantage", "grpo_advantage")


def table_rows(records: Iterable[dict], chars: int = 200) -> list[list]:
    """A row per rollout of the dump ``records`` (:data:`TABLE_COLUMNS`): the prompt's and the response's first
    ``chars`` characters, the reward, the Shapley credit, GCPO's advantage and what GRPO would give."""
    rows = []
    for record in records:
        grpo = grpo_advantages(record["rewards"])
        for i, text in enumerate(record["texts"]):
            rows.append(
                [
                    int(record["step"]),
                    str(record.get("prompt", record["uid"]))[:chars],
                    i,
                    text[:chars],
                    float(record["rewards"][i]),
                    float(record["shapley"][i]),
                    float(record["advantage"][i]),
                    float(grpo[i]),
                ]
            )
    return rows


def _png_tag(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def build_report(records: Iterable[dict], out_dir: str | Path, title: str = "GCPO credit report") -> Path:
    """Write ``index.html`` (images embedded), ``group_<n>.png`` and ``steps.png`` to ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = list(records)
    if not records:
        raise ValueError("the dump holds no groups")
    sections = []
    series: dict[str, dict[int, float]] = defaultdict(dict)
    for n, record in enumerate(records):
        step = int(record["step"])
        for name in STEP_METRICS:
            if name in record.get("metrics", {}):
                series[name][step] = float(record["metrics"][name])
        rewards = record["rewards"]
        grpo = grpo_advantages(rewards)
        quality = record.get("quality") or [1.0 if r > 0 else 0.0 for r in rewards]
        all_wrong = not any(q > 0 for q in quality)
        picture = group_figure(record, out_dir / f"group_{n:03d}.png")
        rows = []
        for i, text in enumerate(record["texts"]):
            rows.append(
                f"<tr><td>{i}</td><td>{rewards[i]:+.3g}</td><td>{record['shapley'][i]:.4f}</td>"
                f"<td>{grpo[i]:+.3f}</td><td>{record['advantage'][i]:+.3f}</td>"
                f"<td><details><summary>{html.escape(text[:120])}…</summary><pre>{html.escape(text)}</pre>"
                f"</details></td></tr>"
            )
        sections.append(
            f"<section><h2>Step {step} · prompt <code>{html.escape(str(record['uid']))}</code>"
            f"{' · all wrong: no credit' if all_wrong else ''}</h2>"
            f"{_png_tag(picture, 'kernel, credit and advantages')}"
            "<table><tr><th>#</th><th>reward</th><th>Shapley</th><th>GRPO adv.</th><th>GCPO adv.</th>"
            f"<th>response</th></tr>{''.join(rows)}</table></section>"
        )
    steps_html = ""
    if series:
        steps_png = metrics_over_steps(series, out_dir / "steps.png", title="credit diagnostics per step")
        steps_html = f"<section><h2>Over training</h2>{_png_tag(steps_png, 'diagnostics over steps')}</section>"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:auto}} img{{max-width:100%}}
table{{border-collapse:collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 6px;vertical-align:top}}
pre{{white-space:pre-wrap;max-width:700px}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>{len(records)} group(s) from {len({r["step"] for r in records})} step(s). Wrong rollouts get zero credit; near-copies
share theirs. GRPO's advantage is what verl's GRPO would give the same rewards.</p>
{steps_html}{"".join(sections)}</body></html>"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
