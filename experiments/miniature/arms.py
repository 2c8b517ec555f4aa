"""The miniature's arms and the Hydra overrides of one training run.

Every arm trains the same warm start on the same prompts, shaped reward (+1 / -1), batch, learning rate and
number of steps; only the advantage differs:

* ``grpo``: verl's GRPO;
* ``gcpo_group``: GCPO as the paper describes it and the project's default, a reward shaping inside GRPO: every
  group, all-correct ones included, normalised by its own spread (``algorithm.gcpo.credit.all_correct_scale=group``);
* ``gcpo_batch``: GCPO with ``all_correct_scale=batch`` (the default until 2026-11-26): all-correct groups scaled
  by the batch's right-vs-wrong spread, a push about 20-30x smaller;
* ``gcpo_loo``: ``gcpo_group`` with leave-one-out credit (``credit.method=loo``: V(all) - V(all \\ i), SetPO's
  credit) in place of the Shapley value: is the *average* marginal contribution what helps?
* ``gcpo_loo_mix4``: ``gcpo_loo`` mixed into the reward at four times the credit (``credit.advantage=mix``,
  ``credit.mix_coef=4.0``: reward + 4 * the leave-one-out credit, normalised per group): leave-one-out at the
  strength of Shapley alone, the simulator's dose match (docs/frontier.md), so ``gcpo_group - gcpo_loo_mix4``
  compares the two credits' *shape* at matched accuracy (issue 56, pre-registered in docs/miniature.md);
* ``dqo``: an additive diversity bonus (``adv_estimator=dqo``: reward + alpha * the leave-one-out log-det of the
  unweighted embeddings, alpha = ``credit.mix_coef`` = 2.0, the DQO launcher's, alpha = 1 in 0/1 reward units),
  normalised per group as GCPO's ``group``: the family the paper says leaves winner-takes-all intact;
* ``gcpo_blend25``, ``gcpo_blend75``: ``gcpo_group`` with ``credit.advantage=blend`` at ``credit.blend_weight`` 0.25
  and 0.75: (1 - w) * GRPO's advantage + w * the Shapley credit's, the dose that reaches all-correct groups too
  (issue 72, pre-registered in docs/miniature.md, "The dial's confirmation (issue 72)").

``DEFAULT_ARMS`` are the decisive ablation's four (issue 47); ``gcpo_batch``, ``gcpo_loo_mix4`` and the blends run
when asked for (``--arms``; the credit-shape run's four are ``grpo,gcpo_group,gcpo_loo,gcpo_loo_mix4``, the dial
run's ``DIAL_ARMS``).

The device settings are the CPU smoke's: both take them from ``tests.special_e2e.cpu_platform.cpu_overrides``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.special_e2e.cpu_platform import cpu_overrides

ARMS: dict[str, tuple[str, ...]] = {
    "grpo": ("algorithm.adv_estimator=grpo",),
    "gcpo_group": ("algorithm.adv_estimator=gcpo", "algorithm.gcpo.credit.all_correct_scale=group"),
    "gcpo_batch": ("algorithm.adv_estimator=gcpo", "algorithm.gcpo.credit.all_correct_scale=batch"),
    "gcpo_loo": (
        "algorithm.adv_estimator=gcpo",
        "algorithm.gcpo.credit.all_correct_scale=group",
        "algorithm.gcpo.credit.method=loo",
    ),
    # leave-one-out at Shapley's strength (issue 56): reward + 4 * credit, the simulator's dose match
    "gcpo_loo_mix4": (
        "algorithm.adv_estimator=gcpo",
        "algorithm.gcpo.credit.all_correct_scale=group",
        "algorithm.gcpo.credit.method=loo",
        "algorithm.gcpo.credit.advantage=mix",
        "algorithm.gcpo.credit.mix_coef=4.0",
    ),
    # dqo fixes quality=none, method=loo, advantage=mix and all_correct_scale=group (recipe/gcpo/settings.py)
    "dqo": ("algorithm.adv_estimator=dqo", "algorithm.gcpo.credit.mix_coef=2.0"),
    # the dial at two doses (issue 72): (1 - w) * GRPO's advantage + w * the Shapley credit's, in every group
    "gcpo_blend25": (
        "algorithm.adv_estimator=gcpo",
        "algorithm.gcpo.credit.all_correct_scale=group",
        "algorithm.gcpo.credit.advantage=blend",
        "algorithm.gcpo.credit.blend_weight=0.25",
    ),
    "gcpo_blend75": (
        "algorithm.adv_estimator=gcpo",
        "algorithm.gcpo.credit.all_correct_scale=group",
        "algorithm.gcpo.credit.advantage=blend",
        "algorithm.gcpo.credit.blend_weight=0.75",
    ),
}
DEFAULT_ARMS: tuple[str, ...] = ("grpo", "gcpo_group", "gcpo_loo", "dqo")
# the credit-shape run's four (issue 56; docs/miniature.md)
CREDIT_SHAPE_ARMS: tuple[str, ...] = ("grpo", "gcpo_group", "gcpo_loo", "gcpo_loo_mix4")
# issue 72's confirmation (docs/miniature.md, "The dial's confirmation (issue 72)"): these four for 80 steps, and
# gcpo_loo for 40
DIAL_ARMS: tuple[str, ...] = ("grpo", "gcpo_group", "gcpo_blend25", "gcpo_blend75")


# the folder of a run's training rollouts, one <step>.jsonl a step (``run_overrides(dump_rollouts=True)``)
ROLLOUTS = "rollouts"


@dataclass(frozen=True)
class RunSpec:
    """The shared budget of every arm (``scripts/miniature.sh``'s options)."""

    steps: int = 40
    eval_every: int = 10
    prompts_per_step: int = 16
    rollouts: int = 8
    eval_samples: int = 16
    lr: float = 1e-3
    max_response_length: int = 8

    def __post_init__(self):
        for name in ("steps", "eval_every", "prompts_per_step", "eval_samples", "max_response_length"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.rollouts < 2:
            raise ValueError(f"rollouts must be at least 2 (a group of one has no advantage), got {self.rollouts!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")


def run_overrides(
    arm: str,
    seed: int,
    spec: RunSpec,
    data_dir: Path,
    policy_dir: Path,
    run_dir: Path,
    ray_dir: Path,
    *,
    dump_rollouts: bool = False,
) -> list[str]:
    """The Hydra overrides of one run of ``arm`` with ``seed`` (data order, sampling and GCPO's permutations).

    ``dump_rollouts``: verl writes every training step's rollouts (prompt, answer, reward, group key) to
    ``run_dir/rollouts/<step>.jsonl`` (``trainer.rollout_data_dir``), from which the report counts the all-correct
    groups of every arm, GRPO's included (GCPO's own ``gcpo/all_correct_groups`` exists only where credit is computed).
    Off by default: the documented runs were made without it."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; the arms are {', '.join(ARMS)}")
    max_prompt_length = 32
    tokens = 4 * spec.prompts_per_step * spec.rollouts * (max_prompt_length + spec.max_response_length)
    args = [
        *ARMS[arm],
        f"data.train_files={data_dir / 'train.parquet'}",
        f"data.val_files={data_dir / 'heldout.parquet'}",
        f"data.train_batch_size={spec.prompts_per_step}",
        f"data.max_prompt_length={max_prompt_length}",
        f"data.max_response_length={spec.max_response_length}",
        "data.truncation=error",
        "data.dataloader_num_workers=0",
        f"data.seed={seed}",
        f"actor_rollout_ref.model.path={policy_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        f"actor_rollout_ref.actor.optim.lr={spec.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={spec.prompts_per_step}",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={tokens}",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={spec.rollouts}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.15",
        "actor_rollout_ref.rollout.enforce_eager=true",
        f"actor_rollout_ref.rollout.max_num_batched_tokens={tokens}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={tokens}",
        "actor_rollout_ref.rollout.agent.num_workers=2",
        f"actor_rollout_ref.rollout.seed={seed}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.rollout.val_kwargs.n={spec.eval_samples}",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "actor_rollout_ref.rollout.val_kwargs.top_p=1.0",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        # padded batches through PyTorch's SDPA (vLLM's CPU wheel brings no flash-attn), as the CPU smoke
        "actor_rollout_ref.model.use_remove_padding=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "reward.custom_reward_function.path=pkg://experiments.miniature.reward",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=2",
        "algorithm.use_kl_in_reward=false",
        'trainer.logger=["console","file"]',
        "trainer.project_name=gcpo-miniature",
        f"trainer.experiment_name={arm}-seed{seed}",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.total_epochs=1000",
        f"trainer.total_training_steps={spec.steps}",
        "trainer.save_freq=-1",
        f"trainer.test_freq={spec.eval_every}",
        "trainer.val_before_train=true",
        "trainer.resume_mode=disable",
        "trainer.log_val_generations=0",
        f"trainer.validation_data_dir={run_dir / 'heldout'}",
        f"trainer.default_local_dir={run_dir / 'ckpt'}",
    ]
    if arm != "grpo":  # the credit's seed (Shapley's permutations; LOO and DQO draw none)
        args.append(f"algorithm.gcpo.credit.seed={seed}")
    if dump_rollouts:
        args.append(f"trainer.rollout_data_dir={run_dir / ROLLOUTS}")
    return args + cpu_overrides(ray_dir)
