"""``gcpo demo``: GCPO credit on a bundled set of real math solutions, next to what GRPO would assign.

Runs the whole pipeline offline on the CPU: math-verify scores each solution, all-MiniLM-L6-v2 embeds it,
Shapley credit splits each group's team value, and both advantages are printed side by side, with what the
numbers mean and what the encoder does and does not see.
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from typing import TYPE_CHECKING

from gcpo_core.cli.common import (
    add_config_argument,
    add_credit_arguments,
    add_encoder_arguments,
    credit_config_from_args,
    load_encoder,
)

if TYPE_CHECKING:
    import torch

LEGEND = """\
How to read it:
  Shapley    the solution's credit, in nats: its average marginal contribution to its group's team value
             log det(I + L), the volume the group's correct solutions span in the encoder's embedding space.
             Wrong solutions add no volume and get 0; copies split what they add together; the credits of a
             group sum to its team value (log 2 = 0.693 per correct solution unlike any other).
  GCPO adv   the credit normalised per group. Groups with right and wrong answers are normalised like GRPO's
             rewards (a single correct solution gets exactly GRPO's advantage); all-correct groups, where GRPO
             has nothing to say, are normalised by their own credit spread, as GRPO normalises rewards: the most
             distinctive correct solutions get pushes of GRPO's size (--all-correct-scale batch scales them by
             the batch's right-vs-wrong spread instead: pushes of a few hundredths).
  effective distinct solutions
             exp(entropy of L's eigenvalues): k correct solutions the encoder sees as unrelated count k, any
             number of copies of one count 1. Near 1: the encoder sees the group's solutions as nearly the same.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="GCPO vs GRPO credit on bundled real math solutions (offline)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per solution instead")
    parser.add_argument("--show-text", action="store_true", help="print each solution's text")
    add_credit_arguments(parser)
    add_encoder_arguments(parser)
    add_config_argument(parser)
    parser.set_defaults(handler=run, device="cpu")


def load_demo_rollouts() -> list[dict]:
    text = resources.files("gcpo_core").joinpath("data/demo_rollouts.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def run(args: argparse.Namespace) -> int:
    import torch

    from gcpo_core.credit.compute import compute_credit
    from gcpo_core.rewards.math_reward import is_correct

    config = credit_config_from_args(args)
    rows = load_demo_rollouts()
    rewards = [1.0 if is_correct(r["text"], r["answer"]) else 0.0 for r in rows]
    groups = [r["group"] for r in rows]
    encoder = load_encoder(args)
    encoded = encoder.encode([r["text"] for r in rows])
    embeddings = encoded.embeddings.double().cpu()
    result = compute_credit(torch.tensor(rewards), embeddings, groups, config, contributes=(~encoded.empty).tolist())
    shapley, advantage = result.shapley.tolist(), result.advantage.tolist()
    grpo = _grpo_advantages(rewards, groups)

    if args.json:
        for r, reward, phi, adv, base in zip(rows, rewards, shapley, advantage, grpo):
            print(json.dumps({**r, "reward": reward, "shapley": phi, "gcpo_advantage": adv, "grpo_advantage": base}))
        return 0
    print(
        f"GCPO credit on {len(rows)} real GSM8K solutions ({encoder.config.model}, {args.text_span} span, "
        f"Shapley {config.method}). Rewards from math-verify.\n"
    )
    print(LEGEND)
    routes = []
    for g, group in enumerate(result.layout.keys):
        members = [i for i, name in enumerate(groups) if name == group]
        correct = [i for i in members if rewards[i] > 0]
        print(f"## {group}: {rows[members[0]]['problem']}  (answer {rows[members[0]]['answer']})")
        print(f"   {'solution':<46} {'correct':>7} {'GRPO adv':>9} {'Shapley':>8} {'GCPO adv':>9}")
        for i in members:
            print(
                f"   {rows[i]['kind'][:46]:<46} {'yes' if rewards[i] else 'no':>7} {grpo[i]:>+9.2f} "
                f"{shapley[i]:>8.3f} {advantage[i]:>+9.2f}"
            )
            if args.show_text:
                print("      " + rows[i]["text"].replace("\n", "\n      "))
        diagnostics = result.groups
        print(
            f"   team value {float(diagnostics.team_value[g]):.3f} nats shared by {len(correct)} correct solutions; "
            f"effective distinct solutions {float(diagnostics.effective_solutions[g]):.2f}; mean cosine between "
            f"correct solutions {_mean_cosine(embeddings[correct]):.2f}"
        )
        for i in members:
            if rows[i].get("route") and rewards[i] > 0:
                rank = 1 + sum(shapley[j] > shapley[i] for j in correct)
                others = [j for j in correct if j != i]
                cosine = [
                    float(embeddings[i] @ embeddings[j] / (embeddings[i].norm() * embeddings[j].norm())) for j in others
                ]
                nearest = others[max(range(len(others)), key=cosine.__getitem__)] if others else i
                routes.append(
                    (group, rows[i]["kind"], rank, len(correct), rows[nearest]["kind"], max(cosine, default=1.0))
                )
                print(
                    f"   the one solution that takes {rows[i]['route']}: {rows[i]['kind']}, credit rank {rank} of "
                    f"{len(correct)}; its nearest correct neighbour to the encoder: {rows[nearest]['kind']} "
                    f"(cosine {max(cosine, default=1.0):.2f})"
                )
        print()
    metrics = result.metrics()
    print(
        f"All-correct groups that GRPO ignores but GCPO gives a signal: {int(metrics['gcpo/rescued_groups'])}. "
        f"Mean effective distinct solutions per group: {metrics['gcpo/effective_solutions/mean']:.2f}."
    )
    print("Wrong solutions get 0 credit, and identical solutions share their credit exactly.")
    kept = [r for r in routes if r[2] == 1]
    lost = [r for r in routes if r[2] > 1]
    if kept:
        print(
            "A solution that takes another route gets the most credit in " + ", ".join(f"`{r[0]}`" for r in kept) + "."
        )
    if lost:
        print(
            "But the encoder compares wording more than routes: in "
            + ", ".join(
                f"`{group}` the solution that takes another route ranks {rank} of {n}, as its wording is close to "
                f"the {neighbour} (cosine {cosine:.2f})"
                for group, _, rank, n, neighbour, cosine in lost
            )
            + '. GCPO credits what the encoder tells apart; see docs/method.md ("What the encoder sees").'
        )
    return 0


def _mean_cosine(embeddings: torch.Tensor) -> float:
    if len(embeddings) < 2:
        return 1.0
    unit = embeddings / embeddings.norm(dim=-1, keepdim=True)
    cos = unit @ unit.T
    return float((cos.sum() - cos.trace()) / (len(unit) * (len(unit) - 1)))


def _grpo_advantages(rewards: list[float], groups: list[str]) -> list[float]:
    """verl's GRPO advantage of the raw rewards (mean / unbiased std per group, eps 1e-6)."""
    import torch

    from gcpo_core.credit.advantages import group_normalize
    from gcpo_core.credit.grouping import layout_groups

    layout = layout_groups(groups)
    padded = layout.gather(torch.tensor(rewards, dtype=torch.float64))
    return layout.scatter(group_normalize(padded, layout.mask)).tolist()
