"""The GCPO credit actors: Ray actors holding the sentence encoder, called once per training step with the
whole batch (texts -> embeddings -> kernel -> Shapley -> advantages), returning CPU numpy results.

Sharding: with ``shards`` > 1 (the default on a multi-GPU run: one actor per GPU bundle) each actor embeds a
share of the batch, shares balanced by estimated word pieces (:mod:`recipe.gcpo.credit_shards`) so that long
responses do not pile up on one GPU; the first actor (GPU 0) gathers the embeddings through Ray's object store
and computes every group's Shapley credit, in row order. One actor (``shards: 1``) embeds the whole batch.

Placement: verl's placement groups reserve every GPU of the global pool, so an actor asking for a GPU outside
them never schedules. Each actor therefore takes a fraction of a GPU inside the global pool's placement group
(next to the fused FSDP actor / vLLM worker; in sync mode vLLM sleeps while advantages are computed), and
``num_cpus`` of the bundle's CPUs (verl gives each bundle ``max_colocate_count`` CPUs, its own workers reserve
none). The tokenizer's Rust threads (``RAYON_NUM_THREADS``) and torch's CPU threads are sized from the CPUs Ray
gave the actor, not from the host. Without a GPU an actor computes on the CPU and says so.

Prefetch: embedding does not need rewards, so the trainer hands the actors each batch's responses as soon as they
are generated (:meth:`CreditActor.start_prefetch`); they embed them while verl computes log-probabilities, and
the credit call of the advantage step then looks the embeddings up and computes only Shapley credit.

Fault tolerance: Ray restarts a dead actor (``max_restarts``) and re-runs its call (``max_task_retries``);
the computation is a pure function of its inputs and the seeded config, and a restarted shard embeds the same
rows, so the step gets the result it would have got. A call that does not finish within ``timeout_s`` raises
:class:`CreditActorTimeout` after the actors are restarted: Ray cannot cancel a running call of a threaded
actor, and the next step's call would otherwise queue behind the stuck one.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any, Hashable, Optional, Sequence

import numpy as np
import ray
import torch
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.encoder import Encoded, EncoderConfig, EncoderStats, RolloutEncoder
from gcpo_core.encoding.pipeline import RolloutCredit, credit_encoded, credit_rollouts, rows_to_credit
from recipe.gcpo.credit_shards import estimated_pieces, shard_rows
from recipe.gcpo.settings import CreditActorOptions

logger = logging.getLogger(__name__)


class CreditActorTimeout(TimeoutError):
    """The credit actor did not answer in time."""


def _threads_from_ray() -> int:
    """CPU threads this actor may use: the CPUs Ray assigned to it (at least one), not the host's."""
    assigned = ray.get_runtime_context().get_assigned_resources().get("CPU", 0.0)
    return max(1, int(math.floor(assigned)))


class CreditWorker:
    """The actor's body (plain class; wrapped by ``ray.remote`` in :class:`CreditActor`)."""

    def __init__(self, encoder: EncoderConfig, credit: CreditConfig):
        # before the tokenizer's Rust thread pool starts: it would otherwise take every core of the host
        self.threads = _threads_from_ray()
        os.environ["RAYON_NUM_THREADS"] = str(self.threads)
        torch.set_num_threads(self.threads)
        self.credit_config = credit  # validated where it was built; frozen dataclasses cross Ray as they are
        self.encoder = RolloutEncoder(encoder)
        if self.encoder.device.type != "cuda":
            logger.warning(
                "GCPO credit actor has no GPU (CUDA_VISIBLE_DEVICES=%r); embedding and Shapley run on the CPU, "
                "which is slow for training-size batches",
                os.environ.get("CUDA_VISIBLE_DEVICES"),
            )
        else:
            self.warm_up()

    def warm_up(self) -> None:
        """One small credit call (a short and a long text, exact Shapley) at start-up: on a GPU the first call
        pays for CUDA's lazy set-up (kernels, cuBLAS and cuSOLVER handles), which an H100 smoke measured in its
        first step as about 2 s of embedding and 0.5 s of Shapley. The trainer does not wait for the actor until
        training begins, so this happens beside verl's own start-up. Nothing is kept: no prefetched embeddings,
        and every later call's result is what it would have been."""
        long_text = " ".join(f"step {i}: add {i} and {i + 1} to get {2 * i + 1}." for i in range(120))
        texts = ["a short answer", long_text, "another short answer", "a wrong answer"]
        credit_rollouts(texts, [1.0, 1.0, 1.0, 0.0], [0, 0, 0, 0], self.encoder, self.credit_config, seed=0)

    def info(self) -> dict:
        rules = self.encoder.word_pieces.rules
        return {
            "pid": os.getpid(),
            "device": str(self.encoder.device),
            "node_ip": ray.util.get_node_ip_address(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "encoder_dtype": str(self.encoder.dtype),
            "threads": self.threads,
            # the most word pieces the encoder reads of one text (the cap of the shards' cost estimate)
            "max_pieces": rules.piece_length * (rules.max_chunks if rules.long_text == "chunk" else 1),
        }

    def prefetch(self, texts: Sequence[str]) -> dict:
        """Embed ``texts`` and keep the embeddings for the next call (see RolloutEncoder.prefetch)."""
        start = time.perf_counter()
        stats = self.encoder.prefetch(list(texts))
        return {"seconds": time.perf_counter() - start, "unique_texts": stats.unique_texts}

    def compute(
        self,
        texts: Sequence[str],
        rewards: Sequence[float],
        group_ids: Sequence[Hashable],
        valid: Optional[Sequence[bool]] = None,
        expected_group_size: Optional[int] = None,
        return_embeddings: bool = False,
        seed: Optional[int] = None,
    ) -> RolloutCredit:
        return credit_rollouts(
            texts,
            rewards,
            group_ids,
            self.encoder,
            self.credit_config,
            valid=valid,
            expected_group_size=expected_group_size,
            return_embeddings=return_embeddings,
            seed=seed,
        )

    def embed(self, texts: Sequence[str]) -> dict:
        """One shard's embeddings, on the host (they travel to the gathering actor through the object store)."""
        start = time.perf_counter()
        encoded = self.encoder.encode(list(texts))
        return {
            "embeddings": encoded.embeddings.cpu().numpy(),
            "empty": encoded.empty.cpu().numpy(),
            "stats": encoded.stats,
            "seconds": time.perf_counter() - start,
        }

    def credit_gathered(
        self,
        shards: Sequence[np.ndarray],
        rewards: Sequence[float],
        group_ids: Sequence[Hashable],
        valid: Optional[Sequence[bool]],
        expected_group_size: Optional[int],
        return_embeddings: bool,
        seed: Optional[int],
        *parts: dict,
    ) -> RolloutCredit:
        """Credit a batch whose valid rows were embedded by several shards: ``parts[s]`` holds the embeddings of
        the valid rows among ``shards[s]`` (row indices into the batch), in row order."""
        n = len(rewards)
        keep = np.ones(n, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
        dimension = self.encoder.dimension
        embeddings = np.zeros((n, dimension), dtype=np.float32)
        empty = np.zeros(n, dtype=bool)
        for rows, part in zip(shards, parts):
            rows = np.asarray(rows, dtype=np.int64)
            rows = rows[keep[rows]]
            embeddings[rows] = part["embeddings"]
            empty[rows] = part["empty"]
        stats = EncoderStats.combine([part["stats"] for part in parts])
        encoded = Encoded(
            embeddings=torch.from_numpy(embeddings[keep]).to(self.encoder.device),
            empty=torch.from_numpy(empty[keep]),
            stats=stats,
        )
        result = credit_encoded(
            encoded, rewards, group_ids, self.credit_config, valid, expected_group_size, return_embeddings, seed
        )
        pieces = np.array([part["stats"].pieces for part in parts], dtype=np.float64)
        result.metrics["gcpo/encoder/shards"] = float(len(parts))
        result.metrics["gcpo/encoder/shard_pieces_max_over_mean"] = (
            float(pieces.max() / pieces.mean()) if pieces.mean() > 0 else 1.0
        )
        embed_seconds = max(part["seconds"] for part in parts)
        result.timings["embed"] = embed_seconds
        result.timings["total"] = embed_seconds + result.timings["shapley"]
        return result


class CreditActor:
    """Client side: creates the actor(s) (optionally inside placement-group bundles) and calls them with time-outs.

    Args:
        encoder, credit: the encoder's and the credit engine's settings, as the config layer parsed them (each
            dataclass validates itself on construction); the actors receive them as they are.
        options: resources, shards and failure handling.
        placements: one (placement group, bundle index) per shard actor (see
            :func:`recipe.gcpo.credit_shards.credit_placements`); without them, ``options.shards`` unplaced actors
            are created (``auto``: one).
        wait: wait here until the actors are ready (their encoder loaded); False returns at once, and the first
            :meth:`wait_ready` (or :attr:`info`) waits instead: the trainer starts them before verl's rollout
            servers and waits before the first credit call, so their start-up overlaps verl's.
    """

    def __init__(
        self,
        encoder: EncoderConfig = EncoderConfig(),
        credit: CreditConfig = CreditConfig(),
        options: CreditActorOptions = CreditActorOptions(),
        placements: Optional[Sequence[tuple[Any, int]]] = None,
        wait: bool = True,
    ):
        self.options = options
        self._prefetch: list = []
        if placements is None:
            placements = [(None, 0)] * (options.shards if isinstance(options.shards, int) else 1)
        if not placements:
            raise ValueError("credit actor: no placement for any shard")
        for group, index in placements:
            if group is not None:
                bundle_cpus = group.bundle_specs[index].get("CPU", 0)
                if options.num_cpus > bundle_cpus:
                    raise ValueError(
                        f"credit actor: num_cpus={options.num_cpus} does not fit placement-group bundle {index}, "
                        f"which has {bundle_cpus} CPUs (verl's bundles have max_colocate_count CPUs)"
                    )
        self.placements = list(placements)
        self.handles = [self._create(encoder, credit, group, index) for group, index in self.placements]
        self.handle = self.handles[0]  # the gathering actor (GPU 0), and the only one in single-actor mode
        self._infos: Optional[list[dict]] = None
        self._pending_infos = [h.info.remote() for h in self.handles]
        if wait:
            self.wait_ready()

    def wait_ready(self) -> list[dict]:
        """Wait (at most ``startup_timeout_s``) until every actor has loaded its encoder; their infos. The first
        call waits, later ones return at once. Calls made before it queue behind the actors' start-up."""
        if self._infos is not None:
            return self._infos
        options = self.options
        try:
            self._infos = ray.get(self._pending_infos, timeout=options.startup_timeout_s)
        except GetTimeoutError:
            for handle in self.handles:
                ray.kill(handle, no_restart=True)
            placed = ", placement-group bundles %s" % [i for g, i in self.placements] if self.placements[0][0] else ""
            raise CreditActorTimeout(
                f"the GCPO credit actor was not ready within {options.startup_timeout_s:.0f} s "
                f"({len(self.handles)} actor(s), each asking for {options.num_gpus} GPU, {options.num_cpus} CPU"
                f"{placed}); check that the resources exist (verl's placement groups hold every GPU: the actor "
                "must be placed in one) and that the encoder can be loaded offline"
            ) from None
        logger.info("GCPO credit actor(s) ready: %s", self._infos)
        return self._infos

    @property
    def info(self) -> dict:
        """The gathering actor's device, encoder and limits (waits for the actors' start-up the first time)."""
        return self.wait_ready()[0]

    def _create(self, encoder: EncoderConfig, credit: CreditConfig, group, index: int):
        actor_options: dict[str, Any] = {
            "num_cpus": self.options.num_cpus,
            "num_gpus": self.options.num_gpus,
            "max_restarts": self.options.max_restarts,
            "max_task_retries": self.options.max_task_retries,
        }
        if group is not None:
            actor_options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=index
            )
        return ray.remote(CreditWorker).options(**actor_options).remote(encoder, credit)

    @property
    def shards(self) -> int:
        return len(self.handles)

    def _plan(self, texts: Sequence[str], valid: Optional[Sequence[bool]] = None) -> list[np.ndarray]:
        """Rows of each shard: balanced by estimated word pieces; rows left out (padding) cost nothing."""
        costs = estimated_pieces(texts, self.info["max_pieces"])
        if valid is not None:
            costs[~np.asarray(valid, dtype=bool)] = 0.0
        return shard_rows(costs, self.shards)

    def compute(
        self,
        texts: Sequence[str],
        rewards: Sequence[float],
        group_ids: Sequence[Hashable],
        valid: Optional[Sequence[bool]] = None,
        expected_group_size: Optional[int] = None,
        return_embeddings: bool = False,
        seed: Optional[int] = None,
    ) -> RolloutCredit:
        """Credit one batch; see :func:`gcpo_core.encoding.pipeline.credit_rollouts`. Texts prefetched by
        :meth:`start_prefetch` are not embedded again; ``timings["embed_prefetch"]`` is what the prefetch took
        (the slowest shard's)."""
        texts, rewards, group_ids = list(texts), list(rewards), list(group_ids)
        valid = None if valid is None else [bool(v) for v in valid]
        prefetched = self._collect_prefetch()
        if self.shards == 1:
            ref = self.handle.compute.remote(
                texts, rewards, group_ids, valid, expected_group_size, return_embeddings, seed
            )
        else:
            if len(rewards) != len(texts):
                raise ValueError(
                    f"texts, rewards, group ids and valid flags must have one entry per rollout (N={len(texts)})"
                )
            rows_to_credit(len(texts), group_ids, valid, expected_group_size)  # fail before any embedding
            plan = self._plan(texts, valid)
            keep = np.ones(len(texts), dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
            parts = [
                handle.embed.remote([texts[i] for i in rows if keep[i]]) for handle, rows in zip(self.handles, plan)
            ]
            # the parts are passed as top-level arguments, so the gathering actor receives them resolved and the
            # embeddings never pass through the driver
            ref = self.handle.credit_gathered.remote(
                plan, rewards, group_ids, valid, expected_group_size, return_embeddings, seed, *parts
            )
        result = self._get(ref, f"return credit for {len(texts)} rollouts")
        result.timings["embed_prefetch"] = max((p.get("seconds", 0.0) for p in prefetched), default=0.0)
        return result

    def _get(self, ref, what: str):
        try:
            return ray.get(ref, timeout=self.options.timeout_s)
        except GetTimeoutError:
            ray.cancel(ref, force=False)
            restarted = self._restart()
            raise CreditActorTimeout(
                f"the GCPO credit actor did not {what} within {self.options.timeout_s:.0f} s; "
                + (
                    "it was restarted (a running call cannot be cancelled), so the next call starts afresh; "
                    if restarted
                    else "it could not be restarted (max_restarts is used up); "
                )
                + "raise algorithm.gcpo.actor.timeout_s or check the actor's log"
            ) from None
        except RayActorError as err:
            raise RuntimeError(
                f"the GCPO credit actor died and was not restarted (max_restarts={self.options.max_restarts}): {err}"
            ) from err

    def _restart(self) -> bool:
        """Kill every actor and let Ray restart it (as after a crash); True when all came back."""
        for handle in self.handles:
            ray.kill(handle, no_restart=False)
        try:
            ray.get([h.info.remote() for h in self.handles], timeout=self.options.startup_timeout_s)
            return True
        except (GetTimeoutError, RayActorError):
            return False

    def start_prefetch(self, texts: Sequence[str]) -> None:
        """Start embedding ``texts`` on the actors and return at once; the next :meth:`compute` collects it.
        Actor calls run in order, and a shard's rows depend only on the texts, so each shard finds the
        embeddings it kept (a lookup by text: a different split costs time, never correctness)."""
        texts = list(texts)
        if self.shards == 1:
            self._prefetch = [self.handle.prefetch.remote(texts)]
            return
        plan = self._plan(texts)
        self._prefetch = [h.prefetch.remote([texts[i] for i in rows]) for h, rows in zip(self.handles, plan)]

    def _collect_prefetch(self) -> list[dict]:
        refs, self._prefetch = self._prefetch, []
        done = []
        for ref in refs:
            try:
                done.append(ray.get(ref, timeout=self.options.timeout_s))
            except (GetTimeoutError, RayActorError, RayTaskError) as err:
                # the credit call embeds whatever was not kept, so a failed prefetch costs time, not correctness
                logger.warning("GCPO embedding prefetch failed (%s); the credit call embeds the batch itself", err)
        return done

    def shutdown(self) -> None:
        for handle in self.handles:
            ray.kill(handle, no_restart=True)
