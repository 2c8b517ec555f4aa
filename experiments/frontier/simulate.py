"""Training on the answer distribution: sampled groups, the engine's advantages, one update a step on the logits.

One step is the miniature's (``experiments/miniature/arms.py``): ``prompts_per_step`` prompts drawn without
replacement from the 64 training prompts (4 templates x 16 categories, reshuffled every epoch, as verl's
dataloader), G answers sampled for each from the current policy, ±1 rewards, the arm's advantage, one on-policy
update of the loss ``−mean_i A_i · log p(a_i)`` (one PPO step with ratio 1, no KL, no entropy bonus).

The optimiser is **SGD on the logits** (``optimizer="sgd"``; lr 3.8, calibrated once so that GRPO's accuracy at step
40 matches the five-start reference's GRPO, 0.546), not the real run's Adam: Adam on a table of logits normalises
each logit's step by its own gradient history, so its first step is ``lr·sign(g)`` whatever the advantage's size,
and at a low learning rate the credits' different weights all but vanish early (lr 0.03, step 40: GRPO and Shapley
GCPO within 0.001 in accuracy and 0.012 in distinct answers), though not later or at a higher rate (lr 0.03, step
100: +0.63 distinct answers; lr 0.07, step 40: +0.29; docs/frontier.md). The real policy's logits move through shared
parameters, where an answer sampled often pushes the shared direction more, the rich-get-richer that SGD on logits
keeps. ``optimizer="adam"`` is there to show the difference. The policy is a table of logits per category, so a template is only a draw of its
category (held-out templates measure the same policy).

Seeds run side by side in one tensor (the optimisers are elementwise, so each seed's logits follow their own
optimiser exactly); a seed fixes the start's jitter (the spread of the real warm starts), the prompt order and
the sampling.

Metrics are exact, from the policy's probabilities, averaged over categories: accuracy (the probability of a
correct answer), the expected number of distinct correct answers among ``eval_samples`` samples,
``Σ_{a correct} 1 − (1 − p_a)^k``, and the expected share of a step's groups whose G answers are all correct,
``accuracy_c^G`` averaged over categories (the groups GRPO gives nothing and ``mix``'s dose does not reach).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Optional

import torch

from experiments.frontier.arms import Arm, scores_and_advantages
from experiments.frontier.task import Task, TaskSpec, build_task

TEMPLATES = 4  # training templates a category (experiments/miniature/task.py)


@dataclass(frozen=True)
class SimSpec:
    steps: int = 100
    group_size: int = 8
    prompts_per_step: int = 16
    lr: float = 3.8
    optimizer: str = "sgd"
    start_jitter: float = 0.3
    eval_every: int = 10
    eval_samples: int = 16
    seeds: int = 32
    first_seed: int = 0

    def __post_init__(self):
        for name in ("steps", "group_size", "prompts_per_step", "eval_every", "eval_samples", "seeds"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.group_size < 2:
            raise ValueError("group_size must be at least 2 (a group of one has no advantage)")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be adam or sgd, got {self.optimizer!r}")
        if not self.lr > 0 or self.start_jitter < 0:
            raise ValueError("lr must be positive and start_jitter non-negative")


def exact_metrics(
    logits: torch.Tensor, task: Task, samples: int, group_size: Optional[int] = None
) -> dict[str, torch.Tensor]:
    """Per seed (first dimension of ``logits``, (S, C, A)): accuracy and distinct correct answers among
    ``samples``, each averaged over the categories, (S,) float64; with ``group_size``, also the expected share of
    all-correct groups of that size (a prompt's category is uniform: each category's accuracy^G, averaged)."""
    p = torch.softmax(logits.masked_fill(~task.valid, float("-inf")), dim=-1)
    correct = task.correct.to(p.dtype)
    per_category = (p * correct).sum(-1)
    accuracy = per_category.mean(-1)
    distinct = ((1 - (1 - p) ** samples) * correct).sum(-1).mean(-1)
    out = {"accuracy": accuracy, "distinct_correct": distinct}
    if group_size is not None:
        out["all_correct_share"] = (per_category**group_size).mean(-1)
    return out


def _prompt_schedule(spec: SimSpec, n_categories: int, seed: int) -> torch.Tensor:
    """(steps, prompts_per_step) category indices: epochs of every training prompt in a seeded shuffle."""
    rng = torch.Generator().manual_seed(10_007 * seed + 1)
    prompts = torch.arange(n_categories).repeat(TEMPLATES)
    need = spec.steps * spec.prompts_per_step
    order = [prompts[torch.randperm(len(prompts), generator=rng)] for _ in range(-(-need // len(prompts)))]
    return torch.cat(order)[:need].view(spec.steps, spec.prompts_per_step)


def start_logits(task: Task, spec: SimSpec) -> torch.Tensor:
    """(S, C, A): the start's logits plus each seed's jitter (N(0, start_jitter²) per logit); padding -1e30."""
    out = []
    for seed in range(spec.first_seed, spec.first_seed + spec.seeds):
        rng = torch.Generator().manual_seed(7_919 * seed + 3)
        noise = torch.randn(task.logits.shape, generator=rng, dtype=torch.float64) * spec.start_jitter
        out.append(torch.where(task.valid, task.logits + noise, torch.full_like(task.logits, -1e30)))
    return torch.stack(out)


class _Optimizer:
    """SGD, or Adam with torch's defaults (betas 0.9, 0.999, eps 1e-8, no weight decay), on a tensor in place:
    elementwise, so every seed's logits follow their own optimiser exactly (and torch.optim's first step, which
    imports torch's compiler stack, ~10 s, is not paid)."""

    def __init__(self, param: torch.Tensor, kind: str, lr: float):
        self.param, self.kind, self.lr, self.t = param, kind, lr, 0
        self.m = torch.zeros_like(param)
        self.v = torch.zeros_like(param)

    @torch.no_grad()
    def step(self, grad: torch.Tensor) -> None:
        if self.kind == "sgd":
            self.param -= self.lr * grad
            return
        self.t += 1
        self.m.mul_(0.9).add_(grad, alpha=0.1)
        self.v.mul_(0.999).addcmul_(grad, grad, value=0.001)
        m_hat = self.m / (1 - 0.9**self.t)
        v_hat = self.v / (1 - 0.999**self.t)
        self.param -= self.lr * m_hat / (v_hat.sqrt() + 1e-8)


def simulate(arm: Arm, spec: SimSpec, task: Task | None = None) -> dict:
    """Train every seed of ``spec`` with ``arm``; returns the exact metrics at every evaluation (step 0 and every
    ``eval_every`` steps, and the last), per seed, and the wall time."""
    task = task or build_task(TaskSpec())
    began = time.monotonic()
    seeds = list(range(spec.first_seed, spec.first_seed + spec.seeds))
    schedule = torch.stack([_prompt_schedule(spec, len(task.categories), s) for s in seeds])  # (S, steps, P)
    logits = start_logits(task, spec).requires_grad_(True)
    optimizer = _Optimizer(logits, spec.optimizer, spec.lr)
    sampler = torch.Generator().manual_seed(104_729 * spec.first_seed + 17 * spec.seeds + spec.group_size)
    evaluations: dict[int, dict[str, list[float]]] = {}
    s_index = torch.arange(spec.seeds).unsqueeze(1).expand(-1, spec.prompts_per_step)

    def evaluate(step: int) -> None:
        with torch.no_grad():
            m = exact_metrics(logits, task, spec.eval_samples, spec.group_size)
        evaluations[step] = {k: v.tolist() for k, v in m.items()}

    evaluate(0)
    for step in range(spec.steps):
        cats = schedule[:, step]  # (S, P)
        log_p = torch.log_softmax(logits[s_index, cats], dim=-1)  # (S, P, A)
        with torch.no_grad():
            flat = log_p.detach().exp().reshape(-1, log_p.shape[-1])
            answers = torch.multinomial(flat, spec.group_size, replacement=True, generator=sampler)
            answers = answers.view(spec.seeds, spec.prompts_per_step, spec.group_size)
            rewards = torch.where(task.correct[cats.unsqueeze(-1), answers], 1.0, -1.0).to(torch.float64)
            embeddings = task.embeddings[cats.unsqueeze(-1), answers]  # (S, P, G, d)
            _, _, advantage = scores_and_advantages(
                arm, rewards.reshape(-1, spec.group_size), embeddings.reshape(-1, spec.group_size, embeddings.shape[-1])
            )
            advantage = advantage.view(spec.seeds, spec.prompts_per_step, spec.group_size)
        chosen = log_p.gather(-1, answers)  # (S, P, G)
        # each seed's loss is the mean over its rollouts (verl's token mean; one token an answer); the seeds' sum
        # keeps their gradients apart
        loss = -(advantage * chosen).mean(dim=(1, 2)).sum()
        (grad,) = torch.autograd.grad(loss, logits)
        optimizer.step(grad)
        if (step + 1) % spec.eval_every == 0 or step + 1 == spec.steps:
            evaluate(step + 1)
    return {
        "arm": arm.name,
        "shape": arm.shape,
        "dose": arm.dose,
        "spec": asdict(spec),
        "seeds": seeds,
        "evaluations": {str(k): v for k, v in sorted(evaluations.items())},
        "wall_s": time.monotonic() - began,
    }
