"""The GCPO credit actor: one Ray actor holding the sentence encoder, called once per training step with the
whole batch (texts -> embeddings -> kernel -> Shapley -> advantages), returning CPU numpy results.

Placement: verl's placement groups reserve every GPU of the global pool, so an actor asking for a GPU outside
them never schedules. The actor therefore takes a fraction of a GPU inside the global pool's placement group
(bundle 0, next to the fused FSDP actor / vLLM worker; in sync mode vLLM sleeps while advantages are
computed). Without a GPU it computes on the CPU and says so.

Prefetch: embedding does not need rewards, so the trainer hands the actor each batch's responses as soon as they
are generated (:meth:`CreditActor.start_prefetch`); the actor embeds them while verl computes log-probabilities,
and the credit call of the advantage step then looks the embeddings up and computes only Shapley credit.

Fault tolerance: Ray restarts a dead actor (``max_restarts``) and re-runs the call (``max_task_retries``);
the computation is a pure function of its inputs and the seeded config, so the step gets the result it
would have got. A call that does not finish within ``timeout_s`` raises :class:`CreditActorTimeout`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Optional, Sequence

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from gcpo_core.config import CreditConfig
from gcpo_core.encoder import EncoderConfig, RolloutEncoder
from gcpo_core.pipeline import RolloutCredit, credit_rollouts

logger = logging.getLogger(__name__)


class CreditActorTimeout(TimeoutError):
    """The credit actor did not answer in time."""


@dataclass(frozen=True)
class CreditActorOptions:
    """Resources and failure handling of the credit actor.

    Attributes:
        num_gpus: GPU fraction taken from placement-group bundle 0 (0 = CPU only).
        num_cpus: CPUs for tokenisation and the CPU fallback.
        max_restarts: restarts of a dead actor before the run fails.
        max_task_retries: re-runs of an interrupted call.
        timeout_s: longest wait for one batch.
        startup_timeout_s: longest wait for the actor to be scheduled and load the encoder.
        prefetch: embed each batch as soon as it is generated, while verl computes log-probabilities (the
            trainer calls :meth:`CreditActor.start_prefetch`); the advantage step then only computes credit.
    """

    num_gpus: float = 0.1
    num_cpus: float = 1.0
    max_restarts: int = 3
    max_task_retries: int = 3
    timeout_s: float = 600.0
    startup_timeout_s: float = 600.0
    prefetch: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.prefetch, bool):
            raise ValueError(f"credit actor: prefetch must be true or false, got {self.prefetch!r}")
        for name in ("num_gpus", "num_cpus"):
            if not 0 <= getattr(self, name) <= 64:
                raise ValueError(f"credit actor: {name} must be in [0, 64], got {getattr(self, name)!r}")
        for name in ("max_restarts", "max_task_retries"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < -1:
                raise ValueError(f"credit actor: {name} must be an integer >= -1 (-1: unlimited)")
        for name in ("timeout_s", "startup_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"credit actor: {name} must be > 0, got {getattr(self, name)!r}")


class CreditWorker:
    """The actor's body (plain class; wrapped by ``ray.remote`` in :class:`CreditActor`)."""

    def __init__(self, encoder: Mapping[str, Any], credit: Mapping[str, Any]):
        self.credit_config = CreditConfig.from_mapping(dict(credit))
        self.encoder = RolloutEncoder(EncoderConfig(**dict(encoder)))
        if self.encoder.device.type != "cuda":
            logger.warning(
                "GCPO credit actor has no GPU (CUDA_VISIBLE_DEVICES=%r); embedding and Shapley run on the CPU, "
                "which is slow for training-size batches",
                os.environ.get("CUDA_VISIBLE_DEVICES"),
            )

    def info(self) -> dict:
        return {
            "pid": os.getpid(),
            "device": str(self.encoder.device),
            "node_ip": ray.util.get_node_ip_address(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "encoder_dtype": str(self.encoder.dtype),
        }

    def prefetch(self, texts: Sequence[str]) -> dict:
        """Embed ``texts`` and keep the embeddings for the next :meth:`compute` (see RolloutEncoder.prefetch)."""
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


class CreditActor:
    """Client side: creates the actor (optionally inside a placement-group bundle) and calls it with time-outs."""

    def __init__(
        self,
        encoder: EncoderConfig | Mapping[str, Any] = EncoderConfig(),
        credit: CreditConfig | Mapping[str, Any] = CreditConfig(),
        options: CreditActorOptions = CreditActorOptions(),
        placement_group=None,
        bundle_index: int = 0,
    ):
        encoder = dataclasses.asdict(encoder) if isinstance(encoder, EncoderConfig) else dict(encoder)
        credit = credit.to_dict() if isinstance(credit, CreditConfig) else dict(credit)
        EncoderConfig(**encoder)  # fail here, in the driver, on a bad value
        CreditConfig.from_mapping(credit)
        self.options = options
        self._prefetch = None
        actor_options: dict[str, Any] = {
            "num_cpus": options.num_cpus,
            "num_gpus": options.num_gpus,
            "max_restarts": options.max_restarts,
            "max_task_retries": options.max_task_retries,
        }
        if placement_group is not None:
            actor_options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=bundle_index
            )
        self.handle = ray.remote(CreditWorker).options(**actor_options).remote(encoder, credit)
        try:
            self.info = ray.get(self.handle.info.remote(), timeout=options.startup_timeout_s)
        except GetTimeoutError:
            ray.kill(self.handle, no_restart=True)
            raise CreditActorTimeout(
                f"the GCPO credit actor was not ready within {options.startup_timeout_s:.0f} s "
                f"(asks for {options.num_gpus} GPU, {options.num_cpus} CPU"
                f"{', placement-group bundle %d' % bundle_index if placement_group is not None else ''}); "
                "check that the resources exist (verl's placement groups hold every GPU: the actor must be "
                "placed in one) and that the encoder can be loaded offline"
            ) from None
        logger.info("GCPO credit actor ready: %s", self.info)

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
        """Credit one batch; see :func:`gcpo_core.pipeline.credit_rollouts`. Texts prefetched by
        :meth:`start_prefetch` are not embedded again; ``timings["embed_prefetch"]`` is what the prefetch took."""
        prefetched = self._collect_prefetch()
        ref = self.handle.compute.remote(
            list(texts), list(rewards), list(group_ids), None if valid is None else list(valid),
            expected_group_size, return_embeddings, seed,
        )
        try:
            result = ray.get(ref, timeout=self.options.timeout_s)
        except GetTimeoutError:
            ray.cancel(ref, force=False)
            raise CreditActorTimeout(
                f"the GCPO credit actor did not return credit for {len(texts)} rollouts within "
                f"{self.options.timeout_s:.0f} s; raise the time-out or check the actor's log"
            ) from None
        except RayActorError as err:
            raise RuntimeError(
                f"the GCPO credit actor died and was not restarted (max_restarts={self.options.max_restarts}): {err}"
            ) from err
        result.timings["embed_prefetch"] = prefetched.get("seconds", 0.0)
        return result

    def start_prefetch(self, texts: Sequence[str]) -> None:
        """Start embedding ``texts`` on the actor and return at once; the next :meth:`compute` collects it.
        Actor calls run in order, so that compute finds the embeddings kept."""
        self._prefetch = self.handle.prefetch.remote(list(texts))

    def _collect_prefetch(self) -> dict:
        ref, self._prefetch = self._prefetch, None
        if ref is None:
            return {}
        try:
            return ray.get(ref, timeout=self.options.timeout_s)
        except (GetTimeoutError, RayActorError, RayTaskError) as err:
            # the credit call embeds whatever was not kept, so a failed prefetch costs time, not correctness
            logger.warning("GCPO embedding prefetch failed (%s); the credit call embeds the batch itself", err)
            return {}

    def shutdown(self) -> None:
        ray.kill(self.handle, no_restart=True)
