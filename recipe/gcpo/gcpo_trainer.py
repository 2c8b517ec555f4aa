"""The GCPO trainer: verl 0.9.1's V1 trainer, in whichever of its modes runs (``trainer.v1.trainer_mode``: sync,
colocate_async, separate_async), with Shapley credit before the advantage step (and, optionally, Group Contrastive
PO's reference injection before the old log-probabilities).

One set of step hooks, :class:`GCPOSteps`, is a mixin before the class verl registers for each mode
(:data:`GCPO_TRAINERS`, which the entry point's task runner builds): every branch of verl's trainer that reads the
mode (replay buffer, warm-up batches, partial rollouts, weight sync, checkpoints, resume) is verl's own. With
``algorithm.adv_estimator=gcpo``, right after the batch is balanced a background thread reads its responses from
TransferQueue, decodes them and has the credit actors start embedding them (``algorithm.gcpo.actor.prefetch``), while
verl computes the old and reference log-probabilities. Each ``_compute_advantage`` then has the actors compute every
rollout's Shapley credit in one call (embedding whatever was not prefetched; ``timing_s/gcpo_*`` say where the
step's time went); verl's own advantage step then runs unchanged (KL-in-reward, rollout correction, write-back) with
the ``gcpo`` estimator, which normalises that credit per prompt. A baseline's hooks (its actor loss, its step before
balancing, its advantage step) come from the registry (:mod:`recipe.gcpo.settings`). With any other estimator the
trainer is verl's.

Where the credit actors run, per mode (docs/training.md#trainer-modes): on the trainer's GPUs (verl's global pool)
in every mode, beside a vLLM that verl has put to sleep for the step in sync and colocate_async (``on_sample_end``)
and, in separate_async, beside the hybrid replicas it puts to sleep (``on_step_begin``), never on the standalone
rollout pool. In the asynchronous modes a group's rollouts may come from several policy versions (partial rollouts
resumed after a weight update): its credit is computed on the final texts, and ``gcpo/policy_version/*`` says how
far apart the versions of each step's groups are.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import transfer_queue as tq
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer

from recipe.gcpo.baselines import read_rows, valid_rows
from recipe.gcpo.credit_actor import CreditActor
from recipe.gcpo.credit_shards import credit_placements
from recipe.gcpo.estimator import StepCredit, provide_credit
from recipe.gcpo.settings import RecipeSettings

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "INFO"))

GLOBAL_POOL = "global_pool"
# separate_async runs a step's hooks once per mini-batch (verl's parameter_sync_step): each gets its own draw of
# Monte-Carlo permutations, seed + global step + this stride x the mini-batch's index (0 in the other modes)
MINI_BATCH_SEED_STRIDE = 1_000_003


def reward_timeout_metrics(batch: KVBatchMeta) -> dict[str, float]:
    """``gcpo/reward/timeouts`` and ``gcpo/reward/timeout_frac``: how many of the step's responses had an answer
    check that ran out of time on both tries (scored wrong), and ``gcpo/reward/timeout_retries``: how many needed
    the second try (the first missed its deadline: a busy machine), from the ``timeout`` and ``timeout_retried``
    keys the recipe's reward function (recipe/gcpo/reward.py) writes into each row's ``reward_extra_info``. Empty
    when no row reports them (another reward function); padding rows are left out."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
    if "extra_fields" not in data.keys():
        return {}
    flags, retried = [], 0
    for valid, extra in zip(valid_rows(batch), data["extra_fields"]):
        info = extra.get("reward_extra_info") if isinstance(extra, dict) else None
        if valid and isinstance(info, dict) and info.get("timeout") is not None:
            flags.append(float(info["timeout"]) > 0)
            retried += float(info.get("timeout_retried") or 0.0) > 0
    if not flags:
        return {}
    return {
        "gcpo/reward/timeouts": float(sum(flags)),
        "gcpo/reward/timeout_frac": sum(flags) / len(flags),
        "gcpo/reward/timeout_retries": float(retried),
    }


def policy_version_metrics(batch: KVBatchMeta) -> dict[str, float]:
    """How many policy versions each group's rollouts span, from the versions verl tags each row with
    (``min_global_steps``/``max_global_steps``: the weights its first and last tokens were generated with; a partial
    rollout resumed after a weight update spans two): ``gcpo/policy_version/group_span_max`` and ``_mean`` (1: one
    version, as verl counts its own per-row span), ``gcpo/policy_version/mixed_groups`` (groups spanning more than
    one). Padding rows and Group Contrastive's injected references (no policy generated them) are left out; every
    span is 1 in verl's sync mode."""
    spans: dict[str, list[int]] = {}
    for key, tag, valid in zip(batch.keys, batch.tags, valid_rows(batch)):
        if valid and not tag.get("group_contrastive_reference") and tag.get("min_global_steps") is not None:
            low, high = spans.setdefault(key.split("_")[0], [tag["min_global_steps"], tag["max_global_steps"]])
            spans[key.split("_")[0]] = [min(low, tag["min_global_steps"]), max(high, tag["max_global_steps"])]
    if not spans:
        return {}
    widths = [int(high) - int(low) + 1 for low, high in spans.values()]
    return {
        "gcpo/policy_version/group_span_max": float(max(widths)),
        "gcpo/policy_version/group_span_mean": float(np.mean(widths)),
        "gcpo/policy_version/mixed_groups": float(sum(w > 1 for w in widths)),
    }


class GCPOSteps:
    """GCPO's steps in verl's V1 trainer: a mixin before the class verl registers for a trainer mode, whose methods
    each call verl's own (``super()``) and add the recipe's part: the credit actors (``_setup``, ``on_train_begin``,
    ``on_train_end``), the prefetched embedding (``_balance_batch``), the credit and the baselines' hooks
    (``_compute_advantage``). Nothing else of verl's trainer is overridden."""

    # (batch keys, the background job that fetches and decodes their responses and hands them to the actors)
    _prefetched: tuple[list, Future] | None = None
    _decoder: ThreadPoolExecutor | None = None

    def __init__(self, config):
        # the recipe's blocks, parsed once in this process by the code the driver's pre-flight ran on the same config
        # (so nothing here fails that start-up passed); the settings objects then travel as they are: to the credit
        # actors, and with each step's credit
        self.settings = RecipeSettings.parse(config)
        self.gcpo = self.settings.gcpo
        self.credit_actor: CreditActor | None = None
        super().__init__(config)

    def _setup(self):
        super()._setup()
        if self.gcpo is not None:
            self.credit_actor = self._create_credit_actor()
        # a baseline's actor loss (Div-R1's, COPO's loss blend): verl's PPO loss plus its term, given to the actor
        # workers (the start-up checks refuse two at once)
        for baseline, settings in self.settings.selected:
            loss_fn = baseline.loss_fn(self.config, settings) if baseline.loss_fn is not None else None
            if loss_fn is not None:
                self.actor_rollout_wg.set_loss_fn(loss_fn)

    def _create_credit_actor(self) -> CreditActor:
        """The actors take a fraction of a GPU inside verl's global placement groups (outside them, they would
        never be scheduled: verl's placement groups reserve every GPU): one per GPU bundle by default
        (``algorithm.gcpo.actor.shards``), the first on GPU 0; CPU-only actors are not placed."""
        # Not waited for here: the actors load their encoder while verl builds the checkpoint engine, restores a
        # checkpoint, starts the agent loop workers and validates; on_train_begin waits (with the actors' start-up
        # time-out), so a failed start still stops the run before its first step.
        if self.gcpo.actor.num_gpus == 0:
            return CreditActor(self.gcpo.encoder, self.gcpo.credit, self.gcpo.actor, wait=False)
        pool = self.resource_pool_manager.resource_pool_dict[GLOBAL_POOL]
        placements = credit_placements(pool.get_placement_groups(), self.gcpo.actor.shards)
        return CreditActor(self.gcpo.encoder, self.gcpo.credit, self.gcpo.actor, placements=placements, wait=False)

    def on_train_begin(self):
        super().on_train_begin()
        if self.credit_actor is not None:
            self.credit_actor.wait_ready()

    def on_train_end(self):
        super().on_train_end()
        self.release_credit()

    def release_credit(self) -> None:
        """Stop the decoding thread and the credit actors (idempotent): at verl's ``on_train_end``, and by the task
        runner after ``fit``, which returns on its last step without calling ``on_train_end``."""
        if self._decoder is not None:
            self._decoder.shutdown(wait=True)
            self._decoder = None
        if self.credit_actor is not None:
            self.credit_actor.shutdown()
            self.credit_actor = None

    def _balance_batch(self, batch: KVBatchMeta, metrics, *args, **kwargs) -> KVBatchMeta:
        """A baseline's step before balancing first (Group Contrastive PO puts reference solutions into all-wrong
        groups before the old log-probabilities are computed); then the credit actor starts embedding the final
        responses."""
        for baseline, settings in self.settings.selected:
            if baseline.before_balance is not None:
                batch = baseline.before_balance(self, settings, batch, metrics)
        batch = super()._balance_batch(batch, metrics, *args, **kwargs)
        self._start_embedding(batch)
        return batch

    def _start_embedding(self, batch: KVBatchMeta) -> None:
        """Fetch the batch's responses from TransferQueue, decode them and hand them to the credit actors, all in
        a background thread: the log-probability pass starts at once and the actors embed while it runs.
        (TransferQueue's client runs its calls on its own event loop, so a second thread may call it.)"""
        self._prefetched = None
        if self.gcpo is None or self.credit_actor is None or not self.gcpo.actor.prefetch:
            return
        if self._decoder is None:
            self._decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gcpo-decode")
        self._prefetched = (list(batch.keys), self._decoder.submit(self._decode_and_prefetch, batch))

    def _decode_and_prefetch(self, batch: KVBatchMeta) -> tuple[list[str], float]:
        start = time.perf_counter()
        texts = self._decode_responses(batch)
        self.credit_actor.start_prefetch(texts)
        return texts, time.perf_counter() - start

    def _prefetched_texts(self, batch: KVBatchMeta, timing_raw: dict) -> list[str] | None:
        """The texts decoded in the background for this batch, None when there are none. Always waits for the
        background job (its hand-off to the actors must precede the credit call); ``gcpo_decode_wait`` is what
        that wait adds to the step, ``gcpo_fetch_decode`` what the job took off the critical path."""
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is None:
            return None
        keys, job = prefetched
        with marked_timer("gcpo_decode_wait", timing_raw):
            try:
                texts, timing_raw["gcpo_fetch_decode"] = job.result()
            except Exception as err:  # noqa: BLE001 - the credit call decodes the batch itself
                logger.warning("GCPO background decoding failed (%r); decoding the batch now", err)
                return None
        return texts if keys == list(batch.keys) else None

    def _decode_responses(self, batch: KVBatchMeta) -> list[str]:
        """The batch's responses as text, "" for verl's padding rows."""
        valid = valid_rows(batch)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["responses"])
        responses = [ids.tolist() for ids in data["responses"].unbind()]
        decoded = self.tokenizer.batch_decode([responses[i] for i in np.flatnonzero(valid)], skip_special_tokens=True)
        texts = [""] * len(responses)
        for row, text in zip(np.flatnonzero(valid), decoded):
            texts[row] = text
        return texts

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        metrics.update(reward_timeout_metrics(batch))
        metrics.update(policy_version_metrics(batch))

        def verl_step() -> KVBatchMeta:
            return super(GCPOSteps, self)._compute_advantage(batch, metrics)

        for baseline, settings in self.settings.selected:  # at most one: each is selected by its estimator
            if baseline.advantage is not None:
                return baseline.advantage(self, settings, batch, metrics, verl_step)
        if self.gcpo is None:
            return verl_step()
        with provide_credit(self._compute_credit(batch, metrics)):
            return verl_step()

    def _compute_credit(self, batch: KVBatchMeta, metrics: dict) -> StepCredit:
        """Credit the batch's responses (decoded when they were prefetched, else now); rows are grouped by uid,
        padding rows left out."""
        timing_raw = getattr(self, "timing_raw", None)
        timing_raw = timing_raw if timing_raw is not None else {}
        with marked_timer("gcpo_total", timing_raw):
            rows = read_rows(batch)
            uids, valid, reward = rows.uids, rows.valid, rows.scores
            texts = self._prefetched_texts(batch, timing_raw)
            if texts is None:
                with marked_timer("gcpo_fetch_decode", timing_raw):
                    texts = self._decode_responses(batch)
            # a new draw of Monte-Carlo permutations each step (and mini-batch), the same one when a resumed run
            # repeats a step
            seed = (
                self.gcpo.credit.seed
                + int(getattr(self, "global_steps", 0))
                + MINI_BATCH_SEED_STRIDE * int(getattr(self, "local_trigger_step", 0))
            )
            result = self.credit_actor.compute(
                texts,
                reward.tolist(),
                uids.tolist(),
                valid=valid.tolist(),
                expected_group_size=self._expected_group_size(),
                seed=seed,
                return_embeddings=self._dumping_now(),
            )
        # summed over the step's mini-batches (separate_async runs this once per mini-batch), as marked_timer sums
        for name, seconds in (
            ("gcpo_embed", result.timings["embed"]),
            ("gcpo_embed_prefetch", result.timings.get("embed_prefetch", 0.0)),
            ("gcpo_shapley", result.timings["shapley"]),
        ):
            timing_raw[name] = timing_raw.get(name, 0.0) + seconds
        metrics.update({key: value for key, value in result.metrics.items() if key.startswith("gcpo/")})
        metrics["gcpo/mean_credit_score"] = float(result.score[valid].mean()) if valid.any() else 0.0
        if self._dumping_now():
            with marked_timer("gcpo_report", timing_raw):
                self._dump_credit(batch, texts, reward, uids, valid, result)
        return StepCredit(
            uids=uids,
            reward=reward,
            score=result.score,
            valid=valid,
            config=self.gcpo.credit,
            stderr=result.shapley_stderr,
        )

    def _expected_group_size(self) -> int:
        # multi-turn agent loops (several outputs per session) are refused at start-up
        return int(self.config.actor_rollout_ref.rollout.n)

    def _dumping_now(self) -> bool:
        """A step the dump is due, at its first mini-batch (one file a step)."""
        every = self.gcpo.dump.every_n_steps
        first = int(getattr(self, "local_trigger_step", 0)) == 0
        return every > 0 and first and int(getattr(self, "global_steps", 0)) % every == 0

    def _dump_credit(self, batch: KVBatchMeta, texts, reward, uids, valid, result) -> None:
        """The step's credit dump (``gcpo report`` reads it), and its first ``dump.table_groups`` groups in the
        run's dashboard (:func:`log_credit_groups`)."""
        from gcpo_core.evaluation.dump import read_credit_dump, write_credit_dump

        step = int(getattr(self, "global_steps", 0))
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["prompts"])
        prompts = self.tokenizer.batch_decode(
            [ids.tolist() for ids in data["prompts"].unbind()], skip_special_tokens=True
        )
        path = write_credit_dump(
            directory=self.gcpo.dump.directory,
            step=step,
            texts=texts,
            rewards=reward,
            uids=uids,
            valid=valid,
            result=result,
            max_groups=self.gcpo.dump.max_groups,
            seed=self.gcpo.credit.seed,
            prompts=prompts,
        )
        logger.info("GCPO credit dump written to %s", path)
        tracker = getattr(self, "logger", None)  # verl's Tracking, made by fit
        if self.gcpo.dump.table_groups and tracker is not None:
            records = list(read_credit_dump(path))[: self.gcpo.dump.table_groups]
            log_credit_groups(tracker, records, step, path.parent)


def log_credit_groups(tracker, records: list[dict], step: int, folder) -> None:
    """A dump's groups in the run's dashboard, through verl's tracker, where those loggers are on: in W&B a table of
    their rollouts (``gcpo/credit_table``: prompt and response heads, reward, credit, GCPO's advantage, GRPO's beside
    it) and each group's credit figure (``gcpo/credit_groups``, the one ``gcpo report`` draws); in TensorBoard the
    figures as images (``gcpo/credit_group_<n>``). The figures are also written beside the dump, as PNGs."""
    backends = getattr(tracker, "logger", {})
    if not records or not {"wandb", "tensorboard"} & set(backends):
        return
    from gcpo_core.evaluation.credit_report import TABLE_COLUMNS, group_figure, table_rows

    rows = max(len(record["texts"]) for record in records)  # one size for all: W&B shows them side by side
    pictures = [
        group_figure(record, folder / f"credit_step{step:06d}_group{n}.png", rows=rows)
        for n, record in enumerate(records)
    ]
    if "wandb" in backends:
        wandb = backends["wandb"]
        captions = [f"step {step}, prompt {record['uid']}" for record in records]
        data = {
            "gcpo/credit_table": wandb.Table(columns=list(TABLE_COLUMNS), data=table_rows(records)),
            "gcpo/credit_groups": [wandb.Image(str(p), caption=c) for p, c in zip(pictures, captions)],
        }
        tracker.log(data=data, step=step, backend=["wandb"])
    if "tensorboard" in backends:
        import matplotlib.image

        writer = backends["tensorboard"].writer
        for n, picture in enumerate(pictures):
            writer.add_image(
                f"gcpo/credit_group_{n}", matplotlib.image.imread(picture)[..., :3], step, dataformats="HWC"
            )


class GCPOSyncTrainer(GCPOSteps, PPOTrainerSync):
    """verl's sync trainer with GCPO's steps."""


class GCPOColocateAsyncTrainer(GCPOSteps, PPOTrainerColocateAsync):
    """verl's colocate_async trainer with GCPO's steps: rollout and training on the same GPUs, the next batches'
    generation overlapping the step, partial rollouts resumed after each weight update."""


class GCPOSeparateAsyncTrainer(GCPOSteps, PPOTrainerSeparateAsync):
    """verl's separate_async trainer with GCPO's steps: a rollout pool of its own, weights sent over a checkpoint
    engine, the step's hooks run once per mini-batch (``trainer.v1.separate_async.parameter_sync_step``)."""


# verl's trainer mode -> the recipe's trainer for it (a test holds its keys to verl's TRAINER_REGISTRY)
GCPO_TRAINERS: dict[str, type] = {
    "sync": GCPOSyncTrainer,
    "colocate_async": GCPOColocateAsyncTrainer,
    "separate_async": GCPOSeparateAsyncTrainer,
}
GCPOTrainer = GCPOSyncTrainer  # the sync mode's, verl's default
