"""Rules between verl's keys that verl's ``validate_config`` passes and a run meets minutes in: the estimator's name
(verl looks it up at the first advantage step) and how verl splits a step's batch over the GPUs
(verl/trainer/ppo/v1/trainer_base.py and its workers). Each value was checked by the table of
:mod:`verl_preflight.values` first.
"""

from __future__ import annotations

import importlib
from typing import Iterable

from omegaconf import DictConfig, OmegaConf

from verl_preflight.errors import did_you_mean, refuse

ACTOR, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
GPUS = "trainer.nnodes x trainer.n_gpus_per_node"


def check_estimator(config: DictConfig, extra: Iterable[str] = (), reader: str = "verl") -> None:
    """``algorithm.adv_estimator`` is registered by verl (its own, and any a module in ``VERL_USE_EXTERNAL_MODULES``
    registered as verl was imported) or is one of ``extra`` (an extension's, registered where its trainer runs)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    estimator, known = str(config.algorithm.adv_estimator), sorted({*ADV_ESTIMATOR_REGISTRY, *extra})
    if estimator not in known:
        refuse(
            "algorithm.adv_estimator",
            f"{estimator} is not an estimator {reader} registers{did_you_mean(estimator, known)} (known: "
            f"{', '.join(known)})",
        )


def check_batch_geometry(config: DictConfig) -> None:
    """A step's prompts split into mini-batches, each mini-batch's samples over the data-parallel ranks and each
    rank's share into micro-batches; sequence and tensor parallelism divide the GPUs; a dynamic batch's token budget
    holds one whole sequence."""
    arr, trainer, data = config.actor_rollout_ref, config.trainer, config.data
    actor, rollout, ref = arr.actor, arr.rollout, arr.ref
    world = trainer.nnodes * trainer.n_gpus_per_node
    sp = (actor.get("fsdp_config") or {}).get("ulysses_sequence_parallel_size") or 1
    tp, dp = rollout.tensor_model_parallel_size, world // sp
    train, mini, n = data.train_batch_size, actor.ppo_mini_batch_size, rollout.n
    samples = mini * n
    if world % sp:
        refuse(f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size", f"{sp} must divide the {world} GPUs ({GPUS})")
    if world % tp:
        refuse(
            f"{ROLLOUT}.tensor_model_parallel_size",
            f"{tp} must divide the {world} GPUs ({GPUS}): vLLM's engines each take {tp}",
        )
    if train % mini:
        refuse(
            f"{ACTOR}.ppo_mini_batch_size",
            f"{mini} must divide data.train_batch_size={train}: each step is split into mini-batches of {mini} prompts",
        )
    if samples % dp:
        refuse(
            f"{ACTOR}.ppo_mini_batch_size",
            f"{mini} prompts x {n} rollouts (actor_rollout_ref.rollout.n) = {samples} samples a mini-batch must split "
            f"evenly over the {dp} data-parallel ranks ({world} GPUs / sequence parallel {sp})",
        )
    micro = None if actor.use_dynamic_bsz else actor.get("ppo_micro_batch_size_per_gpu")
    if micro is not None and (samples // dp) % micro:
        refuse(
            f"{ACTOR}.ppo_micro_batch_size_per_gpu",
            f"{micro} must divide each GPU's share of a mini-batch ({samples} samples / {dp} ranks), or use "
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
        )
    seq = data.max_prompt_length + data.max_response_length
    budgets = {
        f"{ACTOR}.ppo_max_token_len_per_gpu": actor.ppo_max_token_len_per_gpu if actor.use_dynamic_bsz else None,
        f"{ROLLOUT}.log_prob_max_token_len_per_gpu": (
            rollout.log_prob_max_token_len_per_gpu if rollout.log_prob_use_dynamic_bsz else None
        ),
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": (
            ref.get("log_prob_max_token_len_per_gpu") if ref.get("log_prob_use_dynamic_bsz") else None
        ),
    }
    for key, tokens in budgets.items():
        if tokens is not None and tokens < seq:
            refuse(
                key,
                f"{tokens} is shorter than one sequence (data.max_prompt_length + data.max_response_length = {seq}): "
                "dynamic batching cannot fit it",
            )


def check_lengths_and_shards(config: DictConfig) -> None:
    """vLLM's context holds one sequence; FSDP's shard groups divide the GPUs; the optimizer verl builds exists."""
    data, arr = config.data, config.actor_rollout_ref
    rollout, world = arr.rollout, config.trainer.nnodes * config.trainer.n_gpus_per_node
    for key in ("actor", "ref"):  # < 0 or >= the GPUs: one FSDP group; else hybrid groups of that size
        size = (arr[key].get("fsdp_config") or {}).get("fsdp_size", -1)
        if size == 0 or (size is not None and 0 < size < world and world % size):
            refuse(
                f"actor_rollout_ref.{key}.fsdp_config.fsdp_size",
                f"must be -1 (all GPUs) or a divisor of the {world} GPUs ({GPUS}), got {size}",
            )
    optim = arr.actor.optim
    impl, name = optim.get("optimizer_impl"), optim.get("optimizer")
    if not isinstance(impl, str) or not impl:  # verl imports it by name
        refuse(f"{ACTOR}.optim.optimizer_impl", f"must be a module of optimizers (e.g. torch.optim), got {impl!r}")
    if not isinstance(name, str) or not name:  # verl lower-cases it, then takes the class by name
        refuse(
            f"{ACTOR}.optim.optimizer", f"must be the name of an optimizer class of {impl} (e.g. AdamW), got {name!r}"
        )
    try:  # verl imports the module and takes the class by name as the actor starts, after loading the model
        module = importlib.import_module(impl)
    except (ImportError, TypeError, ValueError):  # ".optim": a relative name, which import_module cannot resolve
        refuse(f"{ACTOR}.optim.optimizer_impl", f"no module {impl!r} is importable here (e.g. torch.optim)")
    if not callable(getattr(module, str(name), None)):
        classes = [n for n in dir(module) if n[:1].isupper()]
        refuse(f"{ACTOR}.optim.optimizer", f"{impl} has no optimizer {name!r}{did_you_mean(name, classes)}")
    seq = data.max_prompt_length + data.max_response_length
    max_model_len = rollout.get("max_model_len")
    if max_model_len is not None and max_model_len < seq:
        refuse(
            f"{ROLLOUT}.max_model_len",
            f"{max_model_len} is shorter than one sequence (data.max_prompt_length + data.max_response_length = {seq}): "
            f"vLLM would refuse the longest prompts or cut the responses; set it >= {seq} or null (vLLM's default)",
        )


def check_trainer_mode(config: DictConfig) -> None:
    """What verl's separate_async trainer asserts as it is built, in the task runner minutes in: a step is
    ``parameter_sync_step`` mini-batches, the rollout pool has nodes and GPUs (verl's defaults have none), and weights
    cross to it over a checkpoint engine that can send them (``naive`` only feeds a colocated rollout)."""
    if config.trainer.v1.trainer_mode != "separate_async":
        return
    v1, rollout = config.trainer.v1, config.actor_rollout_ref.rollout
    sync_step, mini = v1.separate_async.parameter_sync_step, config.actor_rollout_ref.actor.ppo_mini_batch_size
    if config.data.train_batch_size != sync_step * mini:
        refuse(
            "data.train_batch_size",
            f"{config.data.train_batch_size} must be trainer.v1.separate_async.parameter_sync_step x "
            f"actor_rollout_ref.actor.ppo_mini_batch_size = {sync_step} x {mini} = {sync_step * mini} in separate_async",
        )
    for key in ("nnodes", "n_gpus_per_node"):
        if not (rollout.get(key) or 0) > 0:
            refuse(f"{ROLLOUT}.{key}", f"{rollout.get(key)}: separate_async needs a rollout pool of its own (> 0)")
    gpus, tp = rollout.nnodes * rollout.n_gpus_per_node, rollout.tensor_model_parallel_size
    if gpus < tp:  # no standalone replica at all: the rollout client would find no server
        refuse(f"{ROLLOUT}.n_gpus_per_node", f"the rollout pool's {gpus} GPU(s) hold no replica of {tp} (TP)")
    if rollout.checkpoint_engine.backend == "naive":
        refuse(
            f"{ROLLOUT}.checkpoint_engine.backend",
            "naive cannot send weights to a rollout pool of its own (separate_async): use nccl, nixl or mooncake",
        )
    reward_model = OmegaConf.select(config, "reward.reward_model") or {}
    if reward_model.get("enable") and not reward_model.get("enable_resource_pool"):
        refuse(
            "reward.reward_model.enable_resource_pool",
            "false: a colocated reward model is not supported in separate_async (the standalone rollout never pauses "
            "to free GPU memory): set it true",
        )
