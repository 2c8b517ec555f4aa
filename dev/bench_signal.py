#!/usr/bin/env python
"""How much of GCPO's training signal is numerical noise: encoder precision and embedding noise, on real rollouts.

Reads the real model responses in ``../shared/data/rollout_groups.jsonl`` (GSM8K problems, 4 responses each
with the data set's own correctness labels; with ``--with-reference`` each problem's reference solution is
added as a fifth, correct rollout, which gives more all-correct groups with genuinely different solutions).
Every text is embedded once per encoder dtype (``EncoderConfig(dtype=...)``), the whole batch is credited
with the default engine settings, and every dtype is compared with the float32 reference:

* max |delta advantage| over all rollouts and over the rollouts of all-correct groups;
* sign flips caused by precision alone: rollouts whose advantage changes sign, counted among all rollouts and
  among those whose reference advantage is above 0.05 in size, and pairs of correct rollouts of an all-correct
  group whose credit order reverses;
* the ratio of mean |advantage| in all-correct groups to mixed groups (the balance the ``gcpo/all_correct_adv_abs``
  and ``gcpo/mixed_adv_abs`` metrics report during training);
* the same for 1e-3 Gaussian noise per coordinate added to the (unit) float32 embeddings.

Each comparison is made under the default normalisation (``all_correct_scale: group``: every group by its own
spread, GRPO's normalisation applied to the credit) and under ``all_correct_scale: batch`` (all-correct groups
scaled by the batch's right-vs-wrong spread). Targets, for the encoder's default GPU precision (float16) under
the default: max |delta advantage| <= 0.02 against float32, and no sign flip of an advantage larger than 0.05
from precision alone; the other precisions and the noise rows are reported.

    python dev/bench_signal.py [--data-dir ../shared/data] [--dtypes float32 bfloat16 float16] [--device cpu]
                                   [--with-reference] [--groups N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from gcpo_core.credit.compute import compute_credit
from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.encoder import EncoderConfig, RolloutEncoder

ROOT = Path(__file__).resolve().parents[1]
# the real model responses live outside the repository (third-party data): where, and how to get them
DEFAULT_DATA = Path(os.environ.get("GCPO_SHARED_DATA") or ROOT.parent / "shared" / "data")
SHARED_DATA_HOW = "the shared data folder (../shared/data beside the checkout, or --data-dir / GCPO_SHARED_DATA): JSONL copies of public files; rollout_groups.jsonl is openai/grade-school-math's grade_school_math/data/example_model_solutions.jsonl regrouped, the others are named with their sources in that folder's README.md"
TARGET_DELTA = 0.02
FLIP_SIZE = 0.05
# the encoder's precision on a GPU (EncoderConfig dtype auto): the one the targets are for
DEFAULT_GPU_DTYPE = "float16"


def load_groups(
    data_dir: Path, limit: int | None, with_reference: bool
) -> tuple[list[str], list[float], list[str], np.ndarray]:
    """(texts, rewards +-1, group ids, is-reference flags) of the rollouts, optionally with each problem's
    reference solution as one more correct rollout."""
    path = data_dir / "rollout_groups.jsonl"
    if not path.is_file():
        raise SystemExit(f"bench_signal: {path} not found: it is in {SHARED_DATA_HOW}")
    texts, rewards, groups, reference = [], [], [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if limit is not None and number >= limit:
                break
            row = json.loads(line)
            members = list(zip(row["responses"], row["correct"], [False] * len(row["responses"])))
            if with_reference:
                members.append((row["solution"], True, True))
            for text, correct, is_reference in members:
                texts.append(text)
                rewards.append(1.0 if correct else -1.0)
                groups.append(row["id"])
                reference.append(is_reference)
    return texts, rewards, groups, np.array(reference, dtype=bool)


def embed(texts: list[str], dtype: str, device: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    encoder = RolloutEncoder(EncoderConfig(device=device, dtype=dtype))
    start = time.perf_counter()
    encoded = encoder.encode(texts)
    seconds = time.perf_counter() - start
    return encoded.embeddings.float().cpu(), encoded.empty.cpu(), seconds


def credit(embeddings, empty, rewards, groups, scale: str):
    config = dataclasses.replace(CreditConfig(), all_correct_scale=scale)
    return compute_credit(
        torch.tensor(rewards, dtype=torch.float64), embeddings.double(), groups, config, contributes=(~empty).tolist()
    )


def group_kinds(result) -> tuple[np.ndarray, np.ndarray]:
    """Per rollout: in an all-correct group, in a mixed group."""
    layout, diag = result.layout, result.groups
    all_correct = np.zeros(layout.num_rollouts, dtype=bool)
    mixed = np.zeros(layout.num_rollouts, dtype=bool)
    for g in range(len(layout.keys)):
        rows = layout.index[g][layout.mask[g]].numpy()
        size, contributing = int(diag.size[g]), int(diag.contributing[g])
        all_correct[rows] = size > 1 and contributing == size
        mixed[rows] = size > 1 and 0 < contributing < size
    return all_correct, mixed


def compare(reference, other, all_correct: np.ndarray) -> dict:
    ref_adv, adv = reference.advantage.numpy(), other.advantage.numpy()
    delta = np.abs(adv - ref_adv)
    flips = (ref_adv * adv) < 0
    reversed_pairs = pairs = 0
    layout = reference.layout
    for g in range(len(layout.keys)):
        rows = layout.index[g][layout.mask[g]].numpy()
        if not all_correct[rows].all() or len(rows) < 2:
            continue
        ref_phi, phi = reference.shapley.numpy()[rows], other.shapley.numpy()[rows]
        for i in range(len(rows)):
            for j in range(i + 1, len(rows)):
                if ref_phi[i] != ref_phi[j]:
                    pairs += 1
                    reversed_pairs += int(np.sign(ref_phi[i] - ref_phi[j]) != np.sign(phi[i] - phi[j]))
    return {
        "max_delta_adv": float(delta.max()),
        "max_delta_adv_all_correct": float(delta[all_correct].max()) if all_correct.any() else 0.0,
        "max_delta_phi": float(np.abs(other.shapley.numpy() - reference.shapley.numpy()).max()),
        "flips": int(flips.sum()),
        "flips_large": int((flips & (np.abs(ref_adv) > FLIP_SIZE)).sum()),
        "reversed_pairs": f"{reversed_pairs}/{pairs}",
    }


def balance(result, all_correct: np.ndarray, mixed: np.ndarray) -> dict:
    adv = np.abs(result.advantage.numpy())
    a = float(adv[all_correct].mean()) if all_correct.any() else 0.0
    m = float(adv[mixed].mean()) if mixed.any() else 0.0
    return {"all_correct_adv_abs": a, "mixed_adv_abs": m, "ratio": a / m if m else float("nan")}


def report(title: str, embedded: dict, rewards: list[float], groups: list[str], args) -> bool:
    """Tables for one batch; True when the targets are met."""
    reference_emb, empty, _ = embedded["float32"]
    ok = True
    for scale in ("group", "batch"):
        reference = credit(reference_emb, empty, rewards, groups, scale)
        all_correct, mixed = group_kinds(reference)
        label = (
            "default, all_correct_scale=group"
            if scale == "group"
            else "all_correct_scale=batch (all-correct groups scaled by the batch's spread)"
        )
        print(f"\n## {title}: {label}")
        print(f"{int(all_correct.sum())} rollouts in all-correct groups, {int(mixed.sum())} in mixed groups\n")
        print(
            "| embeddings | max abs delta adv | ... in all-correct groups | max abs delta phi | sign flips "
            f"| flips of abs adv > {FLIP_SIZE} | reversed credit pairs (all-correct) | mean abs adv all-correct / mixed |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        rows = []
        for dtype in args.dtypes:
            emb, dtype_empty, _ = embedded[dtype]
            rows.append((dtype, credit(emb, dtype_empty, rewards, groups, scale)))
        for seed in range(args.noise_seeds):
            generator = torch.Generator().manual_seed(seed)
            noisy = reference_emb + args.noise * torch.randn(reference_emb.shape, generator=generator)
            rows.append(
                (
                    f"float32 + N(0, {args.noise:g}) per coordinate, seed {seed}",
                    credit(noisy, empty, rewards, groups, scale),
                )
            )
        for name, result in rows:
            stats, b = compare(reference, result, all_correct), balance(result, all_correct, mixed)
            print(
                f"| {name} | {stats['max_delta_adv']:.4f} | {stats['max_delta_adv_all_correct']:.4f} | "
                f"{stats['max_delta_phi']:.2e} | {stats['flips']} | {stats['flips_large']} | "
                f"{stats['reversed_pairs']} | {b['all_correct_adv_abs']:.3f} / {b['mixed_adv_abs']:.3f} = "
                f"{b['ratio']:.3f} |"
            )
            if scale == "group" and name == DEFAULT_GPU_DTYPE:
                passed = stats["max_delta_adv"] <= TARGET_DELTA and stats["flips_large"] == 0
                ok &= passed
                checks = getattr(args, "checks", [])
                checks.append(
                    f"{'PASS' if passed else 'FAIL'}  {title}, {name}: max |delta advantage| "
                    f"{stats['max_delta_adv']:.4f} <= {TARGET_DELTA} and no sign flip of an advantage "
                    f"> {FLIP_SIZE}"
                )
                args.checks = checks
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data-dir", type=Path, default=DEFAULT_DATA, help="the shared data folder (default %(default)s)"
    )
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--groups", type=int, default=None, help="only the first N problems")
    parser.add_argument(
        "--with-reference",
        action="store_true",
        help="also credit the batch with each problem's reference solution added",
    )
    parser.add_argument("--noise", type=float, default=1e-3, help="per-coordinate std of the embedding noise")
    parser.add_argument("--noise-seeds", type=int, default=3)
    args = parser.parse_args(argv)
    args.dtypes = ["float32"] + [d for d in args.dtypes if d != "float32"]

    texts, rewards, groups, is_reference = load_groups(args.data_dir, args.groups, args.with_reference)
    print(
        f"# GCPO signal fidelity: {int((~is_reference).sum())} real responses"
        f"{f' and {int(is_reference.sum())} reference solutions' if args.with_reference else ''} in "
        f"{len(set(groups))} groups; encoder on {args.device}, torch {torch.__version__}"
    )
    embedded = {dtype: embed(texts, dtype, args.device) for dtype in args.dtypes}
    print("\nembedding time: " + ", ".join(f"{d} {embedded[d][2]:.0f} s" for d in args.dtypes))
    ok = True
    batches = [("model responses", ~is_reference)]
    if args.with_reference:
        batches.append(("model responses + reference solutions", np.ones(len(texts), dtype=bool)))
    for title, keep in batches:
        rows = np.flatnonzero(keep)
        subset = {d: (e[rows], empty[rows], t) for d, (e, empty, t) in embedded.items()}
        ok &= report(title, subset, [rewards[i] for i in rows], [groups[i] for i in rows], args)
    print()
    for line in getattr(args, "checks", []):
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
