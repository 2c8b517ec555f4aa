"""The GCPO trainer's advantage step on a local Ray cluster and a local TransferQueue, with real verl classes,
a tiny word-level tokenizer built here and the real encoder (CPU). No GPU, no hub download."""

import threading

import numpy as np
import pytest
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, pre_tokenizers
from transfer_queue import KVBatchMeta
from transformers import PreTrainedTokenizerFast
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from gcpo_core.cli.demo import load_demo_rollouts
from gcpo_core.credit.advantages import normalize_credit
from gcpo_core.credit.config import CreditConfig
from gcpo_core.credit.grouping import layout_groups
from gcpo_core.encoding.pipeline import credit_rollouts
from recipe.gcpo.credit_actor import CreditActor, CreditActorTimeout
from recipe.gcpo.gcpo_trainer import GCPO_TRAINERS, GCPOTrainer, policy_version_metrics
from recipe.gcpo.settings import CreditActorOptions
from tests.recipe.gcpo.conftest import MODE_OVERRIDES, compose_gcpo
from tests.special_e2e.smoke import checks

GROUP_SIZE = 4
BASE_OVERRIDES = [f"actor_rollout_ref.rollout.n={GROUP_SIZE}", "algorithm.gcpo.actor.num_gpus=0"]


@pytest.fixture(scope="module")
def local_tq():
    ray.init(
        num_cpus=8, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}}
    )
    tq.init(
        OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1, "total_storage_size": 10000}}})
    )
    yield
    tq.close()
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_tokenizer():
    """A word-level tokenizer over the demo solutions' words: tiny, random-free, built offline."""
    words = sorted({w for r in load_demo_rollouts() for w in r["text"].split()})
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "</s>"] + words)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", eos_token="</s>")


@pytest.fixture(scope="module")
def credit_actor(local_tq):
    actor = CreditActor(credit=CreditConfig(), options=CreditActorOptions(num_gpus=0, startup_timeout_s=120))
    yield actor
    actor.shutdown()


def _rollouts():
    """Three prompts from the demo set: groups of 4, 4 and 3 (one member missing), rewards +-1."""
    rows = load_demo_rollouts()
    groups = {"sprints": rows[0:4], "salary": rows[6:10], "sheep": rows[11:14]}
    out = []
    for uid, members in groups.items():
        for session, r in enumerate(members):
            wrong = "6b finetuning" in r["kind"] or (uid == "salary" and "6b verification" in r["kind"])
            out.append((uid, session, r["text"], -1.0 if wrong else 1.0))
    return out


def _put_batch(tokenizer, step_seed=0, timed_out=None, retried=frozenset(), versions=None):
    """``timed_out``: rows whose reward function reported ``timeout`` (set: every row reports the key, as the
    recipe's reward does; None: no row carries reward extra info); ``retried``: rows graded on the second try;
    ``versions``: row -> (min, max) policy version, as verl's asynchronous rollout tags a row (default 0, 0)."""
    rng = np.random.default_rng(step_seed)
    keys, fields, tags = [], [], []
    for row, (uid, session, text, reward) in enumerate(_rollouts()):
        ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
        length = len(ids)
        rm = torch.zeros(length)
        rm[-1] = reward
        fields.append(
            {
                "uid": uid,
                "prompts": torch.tensor([3, 4, 5]),
                "responses": ids,
                "response_mask": torch.ones(length, dtype=torch.int64),
                "rm_scores": rm,
                "rollout_log_probs": torch.from_numpy(-rng.random(length)).float(),
                "old_log_probs": torch.from_numpy(-rng.random(length)).float(),
                "ref_log_prob": torch.from_numpy(-rng.random(length)).float(),
            }
        )
        if timed_out is not None:
            fields[-1]["extra_fields"] = {
                "reward_extra_info": {
                    "score": reward,
                    "timeout": float(row in timed_out),
                    "timeout_retried": float(row in retried),
                    "acc": reward > 0,
                    "pred": text.split()[-1],
                }
            }
        key = f"{uid}-{step_seed}"
        keys.append(f"{key}_{session}_0")
        fields[-1]["uid"] = key
        low, high = (versions or {}).get(row, (0, 0))
        tags.append(
            {
                "status": "success",
                "prompt_len": 3,
                "response_len": length,
                "seq_len": 3 + length,
                "global_steps": 1,
                "min_global_steps": low,
                "max_global_steps": high,
            }
        )
    meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
    batch = KVBatchMeta(partition_id="train", keys=meta.keys, tags=meta.tags)
    # verl pads the batch with synthetic rows (shared uid pad<hex>, zero response mask) to a divisible size
    return upsample_batch_to_divisible_size(batch, GROUP_SIZE, tokenizer.eos_token_id)


def _trainer(cls, config, tokenizer, credit_actor=None, global_steps=3):
    """The trainer built by its real constructor, then given what its ``init()`` sets up on GPUs and the advantage
    step reads: the tokenizer (loaded from the model path), the step counter (from the checkpoint), verl's
    per-step timings and the credit actor (created inside verl's GPU placement group)."""
    trainer = cls(config)
    trainer.tokenizer = tokenizer
    trainer.global_steps = global_steps
    trainer.timing_raw = {}
    if hasattr(trainer, "credit_actor"):
        trainer.credit_actor = credit_actor
    return trainer


def _row_advantages(batch):
    data = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages", "response_mask"]
    )
    advantages = data["advantages"].to_padded_tensor(padding=0.0)
    mask = data["response_mask"].to_padded_tensor(padding=0)
    first = advantages[:, 0]
    assert torch.allclose(advantages, first[:, None] * mask)  # constant over each response's tokens
    return first.double().numpy()


def _expected(tokenizer, batch, minilm, config: CreditConfig, shaping=None):
    data = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "responses", "rm_scores"]
    )
    valid = np.array([not t.get("is_padding", False) for t in batch.tags])
    texts = [tokenizer.decode(ids.tolist(), skip_special_tokens=True) for ids in data["responses"].unbind()]
    rewards = data["rm_scores"].to_padded_tensor(padding=0.0).sum(-1).double().numpy()
    uids = list(data["uid"])
    rows = np.flatnonzero(valid)
    result = credit_rollouts([texts[i] for i in rows], rewards[rows].tolist(), [uids[i] for i in rows], minilm, config)
    score = result.score + (0 if shaping is None else shaping[rows])
    layout = layout_groups([uids[i] for i in rows])
    expected = np.zeros(len(valid))
    normalised = normalize_credit(  # the engine's normalisation, with the verifier reward deciding mixed groups
        layout.gather(torch.from_numpy(score)),
        layout.mask,
        layout.gather(torch.from_numpy(rewards[rows])),
        epsilon=config.epsilon,
        std_floor=config.std_floor,
        all_correct_scale=config.all_correct_scale,
        stderr=layout.gather(torch.from_numpy(result.shapley_stderr)),
    )
    expected[rows] = layout.scatter(normalised).numpy()
    return expected, valid


def test_gcpo_advantages_from_transfer_queue_with_padding_and_an_incomplete_group(
    local_tq, tiny_tokenizer, credit_actor, minilm
):
    config = compose_gcpo(BASE_OVERRIDES)
    batch = _put_batch(tiny_tokenizer, step_seed=1)
    assert sum(t.get("is_padding", False) for t in batch.tags) == 1  # 11 rollouts padded to 12
    trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor)
    metrics = {}
    trainer._compute_advantage(batch, metrics)

    got = _row_advantages(batch)
    expected, valid = _expected(tiny_tokenizer, batch, minilm, CreditConfig())
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.all(got[~valid] == 0)
    assert metrics["gcpo/groups"] == 3.0 and metrics["gcpo/incomplete_groups"] == 1.0
    assert metrics["gcpo/excluded_rows"] == 1.0 and metrics["gcpo/rescued_groups"] == 1.0  # sheep: all correct
    assert {"gcpo_embed", "gcpo_shapley", "gcpo_total"} <= set(trainer.timing_raw)
    assert "gcpo/encoder/truncated_frac" in metrics
    # the balance of the two signals reaches verl's tracker with the step's metrics
    assert metrics["gcpo/all_correct_adv_abs"] > 0 and metrics["gcpo/mixed_adv_abs"] > 0
    assert "gcpo/reward/timeout_frac" not in metrics  # no reward extra info in this batch


# what verl's asynchronous trainers need of a config to be built (separate_async: a rollout pool, a checkpoint
# engine that can send weights, a step of parameter_sync_step mini-batches)
@pytest.mark.parametrize("mode", list(MODE_OVERRIDES))
def test_each_modes_trainer_computes_the_same_gcpo_advantages_and_says_how_many_versions_a_group_spans(
    mode, local_tq, tiny_tokenizer, credit_actor, minilm
):
    """Built by each mode's real constructor, the advantage step is the same; a group whose rollouts were generated
    across weight versions (a partial rollout resumed after an update) is credited on its final texts, and the step
    says how far apart its versions are (padding rows left out)."""
    config = compose_gcpo(BASE_OVERRIDES + MODE_OVERRIDES[mode])
    versions = {0: (2, 2), 1: (2, 3), 2: (3, 3), 3: (3, 3)} if mode != "sync" else None  # sprints: 2 versions
    batch = _put_batch(tiny_tokenizer, step_seed=40, versions=versions)
    trainer = _trainer(GCPO_TRAINERS[mode], config, tiny_tokenizer, credit_actor)
    metrics = {}
    trainer._compute_advantage(batch, metrics)
    expected, valid = _expected(tiny_tokenizer, batch, minilm, CreditConfig())
    np.testing.assert_allclose(_row_advantages(batch), expected, atol=1e-5)
    spans = (2.0, 4 / 3, 1.0) if mode != "sync" else (1.0, 1.0, 0.0)
    assert metrics["gcpo/policy_version/group_span_max"] == spans[0]
    assert metrics["gcpo/policy_version/group_span_mean"] == pytest.approx(spans[1])
    assert metrics["gcpo/policy_version/mixed_groups"] == spans[2]
    assert metrics["gcpo/incomplete_groups"] == 1.0  # sheep's missing rollout, as in sync


def test_the_version_spread_leaves_out_padding_and_injected_references():
    tags = [
        {"min_global_steps": 1, "max_global_steps": 1},
        {"min_global_steps": 4, "max_global_steps": 4, "group_contrastive_reference": True},  # no policy made it
        {"min_global_steps": 1, "max_global_steps": 2},
        {"min_global_steps": 0, "max_global_steps": 9, "is_padding": True},
    ]
    batch = KVBatchMeta(partition_id="train", keys=["a_0_0", "a_1_0", "b_0_0", "pad_0_0"], tags=tags)
    assert policy_version_metrics(batch) == {
        "gcpo/policy_version/group_span_max": 2.0,
        "gcpo/policy_version/group_span_mean": 1.5,
        "gcpo/policy_version/mixed_groups": 1.0,
    }
    assert policy_version_metrics(KVBatchMeta(partition_id="train", keys=[], tags=[])) == {}


def test_a_steps_mini_batches_each_get_their_own_permutations_timings_summed_and_one_dump(
    local_tq, tiny_tokenizer, tmp_path
):
    """separate_async runs the advantage step once per mini-batch of a step (verl's local_trigger_step): each its
    own Monte-Carlo draw (the first's is the other modes'), the step's gcpo timings summed, the dump written once."""
    config = compose_gcpo(
        BASE_OVERRIDES
        + MODE_OVERRIDES["separate_async"]
        + ["algorithm.gcpo.dump.every_n_steps=1", f"algorithm.gcpo.dump.directory={tmp_path}"]
    )
    trainer = _trainer(GCPO_TRAINERS["separate_async"], config, tiny_tokenizer, None, global_steps=7)
    actor = trainer.credit_actor = trainer._create_credit_actor()
    seeds, compute = [], actor.compute
    actor.compute = lambda *a, **k: (seeds.append(k["seed"]), compute(*a, **k))[1]
    try:
        embeds = []
        for mini_batch in (0, 1):
            trainer.local_trigger_step = mini_batch
            trainer._compute_advantage(_put_batch(tiny_tokenizer, step_seed=50 + mini_batch), {})
            embeds.append(trainer.timing_raw["gcpo_embed"])
    finally:
        trainer.release_credit()
        trainer.release_credit()  # idempotent: the task runner calls it again after fit
    assert seeds == [7, 7 + 1_000_003] and trainer.credit_actor is None
    assert embeds[1] > embeds[0] > 0  # the second mini-batch's time added to the first's
    assert [p.name for p in tmp_path.iterdir()] == ["credit_step000007.jsonl"]


@pytest.mark.parametrize("estimator", ["gcpo", "grpo"])
def test_answers_whose_check_timed_out_are_counted_in_the_steps_metrics(
    local_tq, tiny_tokenizer, credit_actor, estimator
):
    config = compose_gcpo([*BASE_OVERRIDES, f"algorithm.adv_estimator={estimator}"])
    # row 0 timed out; verl's padding row is a copy of row 0 and must not count
    batch = _put_batch(tiny_tokenizer, step_seed=11, timed_out={0}, retried={0, 3, 5})
    assert sum(t.get("is_padding", False) for t in batch.tags) == 1
    metrics = {}
    _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor)._compute_advantage(batch, metrics)
    assert metrics["gcpo/reward/timeouts"] == 1.0
    assert metrics["gcpo/reward/timeout_frac"] == pytest.approx(1 / 11)
    assert metrics["gcpo/reward/timeout_retries"] == 3.0  # graded on the second try (row 0: in vain)
    # every metric the step computes is described in the glossary (docs/metrics.md)
    glossary = checks.check_metric_glossary({1: metrics})
    assert glossary.ok, glossary.detail
    assert sum(key.startswith("gcpo/") for key in metrics) >= (30 if estimator == "gcpo" else 3)


def test_responses_are_handed_to_the_actor_after_balancing_and_not_embedded_again(
    local_tq, tiny_tokenizer, credit_actor, minilm, monkeypatch
):
    monkeypatch.setattr(PPOTrainerSync, "_balance_batch", lambda self, batch, metrics, *a, **k: batch)
    config = compose_gcpo(BASE_OVERRIDES)
    batch = _put_batch(tiny_tokenizer, step_seed=6)
    trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor)
    metrics = {}
    batch = trainer._balance_batch(batch, metrics)
    assert trainer._prefetched is not None and trainer._prefetched[0] == list(batch.keys)
    trainer._compute_advantage(batch, metrics)
    assert trainer._prefetched is None
    assert metrics["gcpo/encoder/prefetched_frac"] == 1.0 and trainer.timing_raw["gcpo_embed_prefetch"] > 0
    expected, _ = _expected(tiny_tokenizer, batch, minilm, CreditConfig())
    np.testing.assert_allclose(_row_advantages(batch), expected, atol=1e-5)

    off = _trainer(
        GCPOTrainer,
        compose_gcpo(BASE_OVERRIDES + ["algorithm.gcpo.actor.prefetch=false"]),
        tiny_tokenizer,
        credit_actor,
    )
    off._balance_batch(_put_batch(tiny_tokenizer, step_seed=7), {})
    assert off._prefetched is None


def test_fetching_and_decoding_the_responses_runs_while_the_log_prob_pass_would(
    local_tq, tiny_tokenizer, credit_actor, minilm, monkeypatch
):
    monkeypatch.setattr(PPOTrainerSync, "_balance_batch", lambda self, batch, metrics, *a, **k: batch)
    config = compose_gcpo(BASE_OVERRIDES)
    batch = _put_batch(tiny_tokenizer, step_seed=8)
    trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor)
    log_probs_started = threading.Event()
    seen = {}
    real_decode = trainer._decode_responses

    def decode_after_log_probs_start(b):
        # decoding synchronously in _balance_batch would wait here for the whole time-out
        seen["started_first"] = log_probs_started.wait(timeout=30)
        return real_decode(b)

    monkeypatch.setattr(trainer, "_decode_responses", decode_after_log_probs_start)
    try:
        batch = trainer._balance_batch(batch, {})
        log_probs_started.set()  # verl's old/ref log-prob pass would start now
        metrics = {}
        trainer._compute_advantage(batch, metrics)
        assert seen["started_first"] is True
        assert metrics["gcpo/encoder/prefetched_frac"] == 1.0
        assert {"gcpo_fetch_decode", "gcpo_decode_wait", "gcpo_embed", "gcpo_shapley"} <= set(trainer.timing_raw)
        expected, _ = _expected(tiny_tokenizer, batch, minilm, CreditConfig())
        np.testing.assert_allclose(_row_advantages(batch), expected, atol=1e-5)
    finally:
        if trainer._decoder is not None:
            trainer._decoder.shutdown(wait=True)


def test_kl_in_reward_shapes_gcpo_as_it_shapes_grpo(local_tq, tiny_tokenizer, credit_actor, minilm):
    config = compose_gcpo(BASE_OVERRIDES + ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.kl_coef=0.5"])
    batch = _put_batch(tiny_tokenizer, step_seed=2)
    trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor)
    metrics = {}
    trainer._compute_advantage(batch, metrics)

    data = tq.kv_batch_get(
        keys=batch.keys,
        partition_id=batch.partition_id,
        select_fields=["old_log_probs", "ref_log_prob", "response_mask", "token_level_rewards", "rm_scores"],
    )
    mask = data["response_mask"].to_padded_tensor(padding=0).float()
    kl = (
        data["old_log_probs"].to_padded_tensor(padding=0.0) - data["ref_log_prob"].to_padded_tensor(padding=0.0)
    ) * mask
    shaping = (-0.5 * kl).sum(-1).double().numpy()
    written = data["token_level_rewards"].to_padded_tensor(padding=0.0).sum(-1).double().numpy()
    scores = data["rm_scores"].to_padded_tensor(padding=0.0).sum(-1).double().numpy()
    np.testing.assert_allclose(written - scores, shaping, atol=1e-5)  # verl's KL path ran and wrote back
    expected, _ = _expected(tiny_tokenizer, batch, minilm, CreditConfig(), shaping=shaping)
    np.testing.assert_allclose(_row_advantages(batch), expected, atol=1e-4)
    assert "actor/reward_kl_penalty" in metrics


def test_rollout_correction_runs_and_writes_its_weights_beside_the_gcpo_advantages(
    local_tq, tiny_tokenizer, credit_actor, minilm
):
    config = compose_gcpo(BASE_OVERRIDES + ["algorithm.rollout_correction.rollout_is=token"])
    batch = _put_batch(tiny_tokenizer, step_seed=5)
    metrics = {}
    _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor)._compute_advantage(batch, metrics)
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["rollout_is_weights"])
    assert "rollout_is_weights" in data.keys()
    assert any(key.startswith("rollout_corr/") for key in metrics)
    expected, _ = _expected(tiny_tokenizer, batch, minilm, CreditConfig())
    np.testing.assert_allclose(_row_advantages(batch), expected, atol=1e-5)


def test_other_estimators_run_exactly_as_verls_sync_trainer(local_tq, tiny_tokenizer):
    config = compose_gcpo(BASE_OVERRIDES + ["algorithm.adv_estimator=grpo"])
    results = []
    for cls in (GCPOTrainer, PPOTrainerSync):
        batch = _put_batch(tiny_tokenizer, step_seed=3)
        trainer = _trainer(cls, config, tiny_tokenizer)
        trainer._compute_advantage(batch, {})
        results.append(_row_advantages(batch))
    assert np.array_equal(results[0], results[1])
    assert trainer.config.algorithm.adv_estimator == "grpo"


def test_training_begins_only_once_the_credit_actor_it_did_not_wait_for_is_ready(local_tq, tiny_tokenizer):
    """The trainer creates the credit actor without waiting (its start-up overlaps verl's); on_train_begin waits,
    so an actor that cannot start stops the run before its first step with the start-up time-out's message."""
    config = compose_gcpo(BASE_OVERRIDES)
    ready = CreditActor(options=CreditActorOptions(num_gpus=0, num_cpus=1, startup_timeout_s=120), wait=False)
    trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor=ready)
    try:
        trainer.on_train_begin()
        assert ready._infos is not None and ready.info["device"] == "cpu"
    finally:
        ready.shutdown()
    # more CPUs than the local cluster has: never scheduled
    stuck = CreditActor(options=CreditActorOptions(num_gpus=0, num_cpus=64, startup_timeout_s=3), wait=False)
    trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor=stuck)
    with pytest.raises(CreditActorTimeout, match="not ready within 3 s"):
        trainer.on_train_begin()


def test_copo_writes_the_weighted_local_advantage_and_the_global_one_for_the_actors_loss(local_tq, tiny_tokenizer):
    from gcpo_core.baselines.copo import copo_terms
    from recipe.gcpo.baselines.copo import GLOBAL_ADVANTAGE_FIELD

    config = compose_gcpo(BASE_OVERRIDES + ["algorithm.adv_estimator=copo", "algorithm.copo.gate=soft"])
    batch = _put_batch(tiny_tokenizer, step_seed=5, timed_out=set())
    metrics = {}
    batch = _trainer(GCPOTrainer, config, tiny_tokenizer)._compute_advantage(batch, metrics)
    local = _row_advantages(batch)
    data = tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=[GLOBAL_ADVANTAGE_FIELD, "response_mask", "uid"]
    )
    global_ = data[GLOBAL_ADVANTAGE_FIELD].to_padded_tensor(padding=0.0)
    mask = data["response_mask"].to_padded_tensor(padding=0)
    assert torch.allclose(global_, global_[:, :1] * mask)

    rows = _rollouts()  # the real rows, in order; verl's padding rows follow
    layout = layout_groups([uid for uid, *_ in rows])
    answers = {a: i for i, a in enumerate(sorted({text.split()[-1] for *_, text, _ in rows}))}
    terms = copo_terms(
        layout.gather(torch.tensor([r for *_, r in rows], dtype=torch.float64)),
        layout.gather(torch.tensor([r > 0 for *_, r in rows])).to(torch.bool),
        layout.gather(torch.tensor([answers[text.split()[-1]] for *_, text, _ in rows])),
        layout.mask,
        gate="soft",
    )
    weight = layout.scatter(terms.local_weight).numpy()
    expected_local = weight * layout.scatter(terms.local_advantage).numpy()
    expected_global = (1 - weight) * layout.scatter(terms.global_advantage).numpy()
    n = len(rows)
    np.testing.assert_allclose(local[:n], expected_local, atol=1e-6)
    np.testing.assert_allclose(global_[:n, 0].double().numpy(), expected_global, atol=1e-6)
    assert np.all(local[n:] == 0) and torch.all(global_[n:] == 0)  # verl's padding rows
    assert np.abs(expected_global).max() > 0.1 and np.abs(expected_local).max() > 0.1
    assert 0 < metrics["copo/local_weight/mean"] < 1


def test_resuming_a_step_reproduces_its_monte_carlo_credit(local_tq, tiny_tokenizer):
    config = compose_gcpo(BASE_OVERRIDES + ["algorithm.gcpo.credit.method=mc", "algorithm.gcpo.credit.permutations=8"])
    runs, seeds = {}, []
    own_actor = None
    try:
        for name, step in (("first", 5), ("resumed", 5), ("next", 6)):
            batch = _put_batch(tiny_tokenizer, step_seed=4)
            trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, own_actor, global_steps=step)
            if own_actor is None:  # the trainer builds its actor from algorithm.gcpo (CPU here: num_gpus=0)
                own_actor = trainer.credit_actor = trainer._create_credit_actor()
                compute = own_actor.compute
                own_actor.compute = lambda *a, **k: (seeds.append(k["seed"]), compute(*a, **k))[1]
            trainer._compute_advantage(batch, {})
            runs[name] = _row_advantages(batch)
    finally:
        if own_actor is not None:
            own_actor.shutdown()
    assert np.array_equal(runs["first"], runs["resumed"])
    # groups of at most 4 correct rollouts are exact even under mc (every position's mean marginal is known),
    # so the next step's new permutations show only in its seed
    assert seeds == [5, 5, 6]


def test_credit_dumps_are_written_every_n_steps(local_tq, tiny_tokenizer, credit_actor, tmp_path):
    from gcpo_core.evaluation.dump import read_credit_dump

    config = compose_gcpo(
        BASE_OVERRIDES + ["algorithm.gcpo.dump.every_n_steps=2", f"algorithm.gcpo.dump.directory={tmp_path}"]
    )
    for step in (3, 4):
        trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor, global_steps=step)
        trainer._compute_advantage(_put_batch(tiny_tokenizer, step_seed=10 + step), {})
    assert [p.name for p in tmp_path.iterdir()] == ["credit_step000004.jsonl"]
    records = list(read_credit_dump(tmp_path))
    assert len(records) == 3 and all(len(r["embeddings"][0]) == 384 for r in records)
    assert all(len(r["texts"]) == len(r["shapley"]) == len(r["advantage"]) for r in records)


def test_a_dumps_groups_reach_wandb_and_tensorboard_through_verls_tracker(
    local_tq, tiny_tokenizer, credit_actor, tmp_path, monkeypatch
):
    """At a dump step the first ``dump.table_groups`` groups go to the run's dashboard through verl's own Tracking
    (built as verl's fit builds it): W&B's table of their rollouts, row for row the dump's, and their credit figures
    (read back from W&B's offline run file), TensorBoard's images; the figures beside the dump."""
    import wandb
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from verl.utils.tracking import Tracking

    from gcpo_core.evaluation.credit_report import TABLE_COLUMNS, table_rows
    from gcpo_core.evaluation.dump import read_credit_dump
    from tests.special_e2e.smoke.wandb_run import read_offline_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    dumps = tmp_path / "dumps"
    config = compose_gcpo(
        BASE_OVERRIDES
        + ["algorithm.gcpo.dump.every_n_steps=1", f"algorithm.gcpo.dump.directory={dumps}"]
        + ["algorithm.gcpo.dump.table_groups=2"]
    )
    trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor, global_steps=4)
    trainer.logger = Tracking("gcpo-test", "dashboard", default_backend=["wandb", "tensorboard"], config={})
    try:
        trainer._compute_advantage(_put_batch(tiny_tokenizer, step_seed=21), {})
    finally:
        trainer.logger.finish()
        wandb.teardown()
    assert trainer.timing_raw["gcpo_report"] > 0  # timed beside gcpo_total (timing_s/gcpo_report)
    records = list(read_credit_dump(dumps))
    assert len(records) == 3 and {r["prompt"] for r in records} == {tiny_tokenizer.decode([3, 4, 5])}

    run = read_offline_run(tmp_path)
    assert run.exit_code == 0 and sorted(run.history) == [4]
    table = run.history[4]["gcpo/credit_table"]
    content = __import__("json").loads(run.media(table).read_text())
    assert content["columns"] == list(TABLE_COLUMNS)
    expected = table_rows(records[:2])
    assert len(content["data"]) == 2 * GROUP_SIZE == len(expected)
    for got, want in zip(content["data"], expected):
        assert got[:4] == want[:4] and np.allclose(got[4:], want[4:])
    figures = run.history[4]["gcpo/credit_groups"]
    assert figures["count"] == 2 and all((run.folder / "files" / name).is_file() for name in figures["filenames"])
    pictures = sorted(dumps.glob("*.png"))
    assert [p.name for p in pictures] == [f"credit_step000004_group{n}.png" for n in (0, 1)]
    # one size, whatever each group's rollouts: W&B shows a key's images side by side at one size
    assert len({__import__("matplotlib.image").image.imread(p).shape for p in pictures}) == 1

    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"images": 0})
    events.Reload()
    assert sorted(events.Tags()["images"]) == ["gcpo/credit_group_0", "gcpo/credit_group_1"]
    assert [image.step for image in events.Images("gcpo/credit_group_0")] == [4]


def test_without_a_dashboard_logger_or_with_table_groups_0_a_dump_is_the_file_alone(
    local_tq, tiny_tokenizer, credit_actor, tmp_path
):
    from verl.utils.tracking import Tracking

    for table_groups, backends in ((4, ["console"]), (0, ["console"])):
        dumps = tmp_path / f"dumps{table_groups}"
        config = compose_gcpo(
            BASE_OVERRIDES
            + ["algorithm.gcpo.dump.every_n_steps=1", f"algorithm.gcpo.dump.directory={dumps}"]
            + [f"algorithm.gcpo.dump.table_groups={table_groups}"]
        )
        trainer = _trainer(GCPOTrainer, config, tiny_tokenizer, credit_actor, global_steps=2)
        trainer.logger = Tracking("gcpo-test", "console", default_backend=backends, config={})
        trainer._compute_advantage(_put_batch(tiny_tokenizer, step_seed=22), {})
        assert [p.name for p in dumps.iterdir()] == ["credit_step000002.jsonl"]


def test_group_contrastive_puts_the_reference_into_all_wrong_groups_before_log_probs(
    local_tq, tiny_tokenizer, monkeypatch
):
    """Group Contrastive PO (the other "GCPO"): the trainer hook before verl's batch balancing."""
    from recipe.gcpo.baselines.group_contrastive import GroupContrastiveSettings

    rows = load_demo_rollouts()
    solution = rows[4]["text"]  # the sprints reference solution, in the tokenizer's vocabulary
    keys, fields, tags = [], [], []
    for g, (uid, rewards, with_solution) in enumerate(
        (("wrong-ref", [-1.0] * 3, True), ("wrong-none", [-1.0] * 3, False), ("mixed", [1.0, -1.0, -1.0], True))
    ):
        for s, reward in enumerate(rewards):
            ids = torch.tensor(tiny_tokenizer(rows[s]["text"], add_special_tokens=False)["input_ids"] + [2])
            prompts = torch.tensor([3, 4, 5])
            n = len(ids)
            rm = torch.zeros(n)
            rm[-1] = reward
            extra = {"index": g, "problem": "p"}
            if with_solution:
                extra["solution"] = solution
            fields.append(
                {
                    "uid": uid,
                    "prompts": prompts,
                    "responses": ids,
                    "response_mask": torch.ones(n, dtype=torch.int64),
                    "loss_mask": torch.ones(n, dtype=torch.int64),
                    "input_ids": torch.cat([prompts, ids]),
                    "attention_mask": torch.ones(3 + n, dtype=torch.int64),
                    "position_ids": torch.arange(3 + n),
                    "rm_scores": rm,
                    "rollout_log_probs": torch.zeros(n),
                    "extra_info": extra,
                }
            )
            keys.append(f"{uid}_{s}_0")
            tags.append({"status": "success", "prompt_len": 3, "response_len": n, "seq_len": 3 + n, "global_steps": 1})
    meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
    batch = KVBatchMeta(partition_id="train", keys=meta.keys, tags=meta.tags)

    config = compose_gcpo(BASE_OVERRIDES + ["algorithm.adv_estimator=grpo", "algorithm.group_contrastive.enable=true"])
    trainer = _trainer(GCPOTrainer, config, tiny_tokenizer)
    assert trainer.settings.blocks["group_contrastive"] == GroupContrastiveSettings(enable=True)  # from the config
    monkeypatch.setattr(PPOTrainerSync, "_balance_batch", lambda self, batch, metrics, *a, **k: batch)
    metrics = {}
    batch = trainer._balance_batch(batch, metrics)
    assert metrics == {
        "group_contrastive/all_wrong_groups": 2.0,
        "group_contrastive/injected_groups": 1.0,
        "group_contrastive/missing_solutions": 1.0,
    }

    data = tq.kv_batch_get(
        keys=batch.keys, partition_id="train", select_fields=["responses", "rm_scores", "input_ids", "response_mask"]
    )
    responses = [r.tolist() for r in data["responses"].unbind()]
    assert tiny_tokenizer.decode(responses[0], skip_special_tokens=True) == " ".join(solution.split())
    assert batch.tags[0]["response_len"] == len(responses[0]) and batch.tags[0]["group_contrastive_reference"]
    assert data["rm_scores"].unbind()[0].sum().item() == 1.0 and bool(data["response_mask"].unbind()[0].all())
    assert data["input_ids"].unbind()[0].tolist() == [3, 4, 5] + responses[0]
    assert all(not t.get("group_contrastive_reference") for t in batch.tags[1:])  # other groups untouched

    # verl's next step computes the old log-probs of every row, the reference included
    old = [torch.zeros(len(r)) for r in responses]
    tq.kv_batch_put(
        keys=batch.keys, partition_id="train", fields=list_of_dict_to_tensordict([{"old_log_probs": o} for o in old])
    )
    trainer._compute_advantage(batch, {})  # GRPO now has something to contrast in the first group
    advantages = _row_advantages(batch)
    assert advantages[0] > 0 and np.all(advantages[1:3] < 0) and np.all(advantages[3:6] == 0)


def test_reference_injection_refuses_rows_with_per_token_fields_it_cannot_rebuild(local_tq, tiny_tokenizer):
    from recipe.gcpo.baselines.group_contrastive import GroupContrastiveSettings, inject_references

    prompts, responses = torch.tensor([3, 4, 5]), torch.tensor([6, 7, 2])
    row = {
        "uid": "routed",
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses]),
        "response_mask": torch.ones(3, dtype=torch.int64),
        "rm_scores": torch.tensor([0.0, 0.0, -1.0]),
        "routed_experts": torch.zeros(6, 2, dtype=torch.int64),
        "extra_info": {"solution": "He sprints"},
    }
    meta = tq.kv_batch_put(
        keys=["routed_0_0"],
        partition_id="train",
        fields=list_of_dict_to_tensordict([row]),
        tags=[{"status": "success", "prompt_len": 3, "response_len": 3, "seq_len": 6}],
    )
    batch = KVBatchMeta(partition_id="train", keys=meta.keys, tags=meta.tags)
    with pytest.raises(ValueError, match="per-token field 'routed_experts'"):
        inject_references(batch, tiny_tokenizer, GroupContrastiveSettings(enable=True), 64)
