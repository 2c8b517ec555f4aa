"""What start-up says will run, a line each, printed by the entry point once the config passed
its checks (:mod:`recipe.gcpo.checks`) (and by a dry run, before the config it prints): the estimator (with GCPO's credit and
encoder), the reward (manager, function, overlong shaping), the scale, the protocol whose trainer settings the run
takes, and the credit actor's GPU memory computed from the encoder's files, with a warning when vLLM's share plus it
leaves too little of the GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from gcpo_core.encoding.memory import CUDA_CONTEXT_GIB, encoder_memory
from recipe.gcpo.checks import RECIPE, RECIPE_REWARD, RECIPE_REWARD_WHAT
from verl_preflight.machine import missing_data_files
from verl_preflight.reward import DATA_SOURCE_DISPATCH, reward_function

DRY_RUN_MARKER = "# composed config (dry run)"
DRY_RUN_DONE = "# dry run ({estimator}): the config composes and validates; nothing was started."


def print_startup(
    config: DictConfig, settings: Any, choices: Mapping[str, Optional[str]], notes: Sequence[str] = ()
) -> None:
    """The start-up lines (``gcpo: ...``) of an accepted config: ``notes`` (what the composition and the migration of
    legacy keys did), what will run, the protocol (``choices``: the config's group choices) and, for an estimator
    that embeds (``settings``: its GCPO settings, else None), the credit actor's GPU memory beside vLLM's share."""
    lines = [*notes, *startup_lines(config, settings), protocol_line(choices)]
    if settings is not None:
        lines += memory_lines(settings, config, *local_gpu())
    for line in lines:
        print(f"gcpo: {line}", flush=True)


def print_dry_run(config: DictConfig, entry_point: Path) -> None:
    """What a dry run prints after the start-up lines: the entry point's file (an installed copy of the recipe and a
    checkout on the path can differ), the composed config, the data files that are not here, and that nothing was
    started."""
    print(f"# entry point: {entry_point.resolve()}")
    print(DRY_RUN_MARKER)
    print(OmegaConf.to_yaml(config, resolve=True))
    for _key, path, hint in missing_data_files(config, RECIPE.prepared):
        print(f"# warning: {path} does not exist here ({hint})")
    print(DRY_RUN_DONE.format(estimator=f"adv_estimator={config.algorithm.adv_estimator}"))


def describe_reward(config: DictConfig) -> str:
    """One line: the reward manager, the function and where it comes from, the overlong shaping with its numbers."""
    manager = config.reward.reward_manager
    source = manager.get("source", "register")
    path, name = reward_function(config)
    if not path:
        function = DATA_SOURCE_DISPATCH
    elif (path, name) == RECIPE_REWARD:
        function = (
            f"{path}:{name} ({RECIPE_REWARD_WHAT}; the recipe's default: set reward.custom_reward_function."
            "path to yours, or to null for verl's data_source dispatch)"
        )
    else:
        function = f"{path}:{name}"
    line = f"reward: manager {manager.name} ({source}); function {function}"
    if OmegaConf.select(config, "reward.reward_model.enable"):
        line += f"; reward model {OmegaConf.select(config, 'reward.reward_model.model_path')}"
    kwargs = OmegaConf.select(config, "reward.reward_kwargs") or {}
    buffer = kwargs.get("overlong_buffer_cfg") or {}
    if manager.name == "dapo" and source == "register" and buffer.get("enable"):
        line += (
            f"; overlong shaping on (max_resp_len {kwargs.get('max_resp_len')}, buffer {buffer.get('len')}, "
            f"penalty factor {buffer.get('penalty_factor')})"
        )
    else:
        line += "; overlong shaping off"
    return line


def startup_lines(config: DictConfig, settings: Any = None) -> list[str]:
    """What will run, a line each: the estimator (with GCPO's credit and encoder), the reward, the scale."""
    algorithm = config.algorithm
    if settings is not None:
        credit, encoder, actor = settings.credit, settings.encoder, settings.actor
        method = (
            credit.method
            if credit.method != "auto"
            else (
                f"auto: exact up to {credit.exact_max_contributors} contributors, else Monte-Carlo with "
                f"{credit.permutations} permutations"
            )
        )
        # leave-one-out (gcpo_loo's ablation, DQO's bonus) is not an estimate of the Shapley value: named as what it is
        kind = "leave-one-out credit" if credit.method == "loo" else "Shapley credit"
        estimator = (
            f"estimator: algorithm.adv_estimator={algorithm.adv_estimator}: {kind} of each group's "
            f"log-det team value (method {method}; quality {credit.quality}; advantage {credit.advantage}; "
            f"all-correct groups scaled by {credit.all_correct_scale}); encoder {encoder.model} "
            f"({encoder.dtype}, device {encoder.device}); credit actors: {actor.shards} shard(s) of "
            f"{actor.num_gpus} GPU"
        )
    else:
        estimator = f"estimator: algorithm.adv_estimator={algorithm.adv_estimator} (verl's own estimator, unchanged)"
    trainer, data = config.trainer, config.data
    n = config.actor_rollout_ref.rollout.n
    length = (
        f"{trainer.total_training_steps} steps" if trainer.total_training_steps else f"{trainer.total_epochs} epoch(s)"
    )
    saves = (
        f"checkpoints every {trainer.save_freq} steps in {trainer.default_local_dir}"
        if trainer.save_freq and trainer.save_freq > 0
        else "no checkpoints (trainer.save_freq)"
    )
    scale = (
        f"scale: {trainer.nnodes} node(s) x {trainer.n_gpus_per_node} {trainer.get('device', 'cuda')} "
        f"device(s); {data.train_batch_size} prompts x {n} rollouts a step, responses up to "
        f"{data.max_response_length} tokens; {length}; {saves}"
    )
    return [estimator, describe_reward(config), scale, mode_line(config)]


def mode_line(config: DictConfig) -> str:
    """verl's trainer mode, and where the rollouts come from in it (docs/training.md#trainer-modes)."""
    mode, v1, rollout = config.trainer.v1.trainer_mode, config.trainer.v1, config.actor_rollout_ref.rollout
    if mode == "sync":
        return "trainer mode: sync (verl's default): each step generates its own batch, then trains on it"
    if mode == "colocate_async":
        return (
            f"trainer mode: colocate_async: {v1.colocate_async.num_warmup_batches} batch(es) generated ahead on the "
            "same GPUs, partial rollouts resumed after each weight update"
        )
    return (
        f"trainer mode: separate_async: a rollout pool of {rollout.nnodes} node(s) x {rollout.n_gpus_per_node} "
        f"device(s) beside the trainer's, weights over {rollout.checkpoint_engine.backend}, "
        f"{v1.separate_async.parameter_sync_step} mini-batch(es) a step"
    )


PROTOCOL_DIR = Path(__file__).resolve().parent / "config" / "protocol"


def protocol_line(choices: Mapping[str, Optional[str]]) -> str:
    """Which trainer settings the run takes, from the composition's group ``choices`` (``hydra.runtime.choices``):
    its ``protocol``, none, or none in a config whose defaults list has no protocol group (a user's own)."""
    names = "|".join(sorted(path.stem for path in PROTOCOL_DIR.glob("*.yaml")))
    choice = choices.get("protocol")
    if choice is None:
        add = "" if "protocol" in choices else "+"  # a group the defaults list lacks is added with a +
        return f"protocol: none: verl's trainer settings and the config's own ({add}protocol={names} chooses one)"
    recipes = PROTOCOL_DIR / f"{choice}.yaml"
    where = f"{recipes} (docs/protocol.md)" if recipes.is_file() else f"the config group protocol's {choice}"
    return f"protocol: {choice}: the trainer settings of {where}, under the command line's overrides"


# vLLM's gpu_memory_utilization plus the credit actor's share above this leaves too little of a GPU it shares
# (for the FSDP actor's working memory, NCCL's buffers and the other processes' CUDA contexts)
GPU_SHARE_LIMIT = 0.9


def memory_lines(settings: Any, config: DictConfig, gpu_gib: Optional[float] = None, gpu_name: str = "") -> list[str]:
    """The credit actor's GPU memory, computed; and a warning when vLLM's share plus it leaves too little of the
    GPU (``gpu_gib``: the GPU's size, None when this machine has none to read it from)."""
    encoder = settings.encoder
    if encoder.device == "cpu":
        return ["credit actor memory: the encoder runs on the CPU (algorithm.gcpo.encoder.device=cpu)"]
    memory = encoder_memory(encoder.model, encoder.dtype, encoder.batch_tokens, encoder.max_seq_length)
    if memory is None:
        return [f"credit actor memory: not computed here (the encoder {encoder.model} is not on this machine)"]
    line = (
        f"credit actor memory, on each GPU with a shard: at most {memory.total_gib:.2f} GiB = weights "
        f"{memory.weights_gib:.2f} ({memory.parameters / 1e6:.1f}M parameters, {memory.dtype}) + one forward "
        f"pass of batch_tokens {memory.batch_tokens} {memory.activations_gib:.2f} (with SDPA's math kernel "
        f"{memory.with_scores_gib:.2f}) + its CUDA context ~{CUDA_CONTEXT_GIB}"
    )
    if gpu_gib is None:
        return [line + "; this machine has no GPU to compare it with"]
    share = memory.total_gib / gpu_gib
    vllm = float(OmegaConf.select(config, "actor_rollout_ref.rollout.gpu_memory_utilization") or 0.0)
    if config.trainer.v1.trainer_mode == "separate_async" and not config.actor_rollout_ref.get("hybrid_engine", True):
        vllm = 0.0  # every vLLM on the rollout pool's GPUs: the trainer's hold the FSDP actor and the credit actors
    line += f"; {100 * share:.1f} % of this {gpu_name or 'GPU'} ({gpu_gib:.0f} GiB) beside vLLM's {vllm:g}"
    lines = [line]
    if vllm + share > GPU_SHARE_LIMIT:
        lines.append(
            f"warning: vLLM's gpu_memory_utilization {vllm:g} plus the credit actor's {100 * share:.1f} % "
            f"leave {100 * (1 - vllm - share):.0f} % of the GPU for the FSDP actor and the CUDA contexts: "
            "lower actor_rollout_ref.rollout.gpu_memory_utilization or algorithm.gcpo.encoder.batch_tokens"
        )
    return lines


def local_gpu() -> tuple[Optional[float], str]:
    """The size (GiB) and name of this machine's first GPU, or (None, "") without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None, ""
        properties = torch.cuda.get_device_properties(0)
        return properties.total_memory / 1024**3, properties.name
    except Exception:
        return None, ""
