"""The DIVER and Div-R1 arms in the recipe's trainer: DIVER's shaped rewards through verl's advantage step on a
local Ray cluster and TransferQueue (real GCPOTrainer, real verl classes, a tiny word-level tokenizer), and
Div-R1's loss handed to the actor workers."""

import numpy as np
import pytest
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, pre_tokenizers
from transfer_queue import KVBatchMeta
from transformers import PreTrainedTokenizerFast
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

import recipe.gcpo.register  # noqa: F401  (the start-up check)
from gcpo_core.baselines.diver import DiverConfig, diver_bonus
from gcpo_core.credit.advantages import group_normalize
from gcpo_core.credit.grouping import layout_groups
from recipe.gcpo.baselines.div_r1 import div_r1_loss
from recipe.gcpo.checks import recipe_rules
from recipe.gcpo.gcpo_trainer import GCPOTrainer
from tests.recipe.gcpo.conftest import compose_gcpo

GROUP_SIZE = 4
BASE = [
    f"actor_rollout_ref.rollout.n={GROUP_SIZE}",
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=64",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
]
# (uid, text, reward): equations are single words, so a word-level tokenizer round-trips them
ROLLOUTS = [
    ("p", "so $x+1=2$ and $x=1$", 1.0),
    ("p", "we get $x=1$", 1.0),
    ("p", "then $y=3$ and $f(x)=y$", 1.0),
    ("p", "no math here", -1.0),
    ("q", "all $a=b$ correct $c=d$", 1.0),
    ("q", "all $a=b$ correct", 1.0),
    ("q", "all $a=b$", 1.0),
    ("r", "wrong $z=0$", -1.0),
    ("r", "wrong $z=1$", -1.0),
    ("r", "wrong again", -1.0),
]


@pytest.fixture(scope="module")
def local_tq():
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    tq.init(
        OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1, "total_storage_size": 10000}}})
    )
    yield
    tq.close()
    ray.shutdown()


@pytest.fixture(scope="module")
def tokenizer():
    words = sorted({w for _, text, _ in ROLLOUTS for w in text.split()})
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "</s>"] + words)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", eos_token="</s>")


def _put_batch(tokenizer, step):
    keys, fields, tags = [], [], []
    for session, (uid, text, reward) in enumerate(ROLLOUTS):
        ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
        rm = torch.zeros(len(ids))
        rm[-1] = reward
        fields.append(
            {
                "uid": f"{uid}-{step}",
                "prompts": torch.tensor([3, 4]),
                "responses": ids,
                "response_mask": torch.ones(len(ids), dtype=torch.int64),
                "rm_scores": rm,
                "old_log_probs": torch.zeros(len(ids)),
            }
        )
        keys.append(f"{uid}-{step}_{session}_0")
        tags.append(
            {
                "status": "success",
                "prompt_len": 2,
                "response_len": len(ids),
                "seq_len": 2 + len(ids),
                "global_steps": step,
            }
        )
    meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields), tags=tags)
    batch = KVBatchMeta(partition_id="train", keys=meta.keys, tags=meta.tags)
    return upsample_batch_to_divisible_size(batch, GROUP_SIZE, tokenizer.eos_token_id)  # + 2 padding rows


def _advantages(batch):
    data = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["advantages"])
    return data["advantages"].to_padded_tensor(padding=0.0)[:, 0].double().numpy()


def _trainer(config, tokenizer, step):
    trainer = GCPOTrainer(config)
    trainer.tokenizer = tokenizer  # what _setup would load; no workers are needed for the advantage step
    trainer.global_steps = step
    return trainer


def test_diver_adds_the_bonus_to_correct_rewards_and_normalises_like_grpo(local_tq, tokenizer):
    config = compose_gcpo(BASE + ["algorithm.adv_estimator=diver"])
    batch = _put_batch(tokenizer, step=10)
    assert sum(t.get("is_padding", False) for t in batch.tags) == 2
    metrics = {}
    _trainer(config, tokenizer, step=10)._compute_advantage(batch, metrics)

    texts = [text for _, text, _ in ROLLOUTS]
    rewards = np.array([r for _, _, r in ROLLOUTS])
    uids = [uid for uid, _, _ in ROLLOUTS]
    bonus = diver_bonus(texts, rewards, uids, step=10, config=DiverConfig()).bonus
    # by hand, group p: ED (1/2, 0, 1, -) of correct responses, 1 clipped at 0.68; q: ({c=d} unique) 1/2, 0, 0
    weight = np.cos(0.5 * np.pi * 10 / 100)
    np.testing.assert_allclose(bonus, 2.0 * weight * np.array([0.5, 0, 0.68, 0, 0.5, 0, 0, 0, 0, 0]))
    layout = layout_groups(uids)
    expected = layout.scatter(group_normalize(layout.gather(torch.from_numpy(rewards + bonus)), layout.mask)).numpy()
    got = _advantages(batch)
    np.testing.assert_allclose(got[:10], expected, atol=1e-5)
    assert np.all(got[10:] == 0)  # padding rows
    assert got[4] > 0 > got[5] and got[5] == pytest.approx(got[6], abs=1e-6)  # all-correct q: a signal GRPO lacks
    assert np.all(got[7:10] == 0)
    assert metrics["diver/lambda"] == pytest.approx(2.0 * weight) and metrics["diver/shaped_groups"] == 2.0


def test_diver_is_grpo_once_its_steps_are_over(local_tq, tokenizer):
    results = []
    for estimator, step in (("diver", 100), ("grpo", 100)):
        batch = _put_batch(tokenizer, step=step + (estimator == "grpo"))
        _trainer(compose_gcpo(BASE + [f"algorithm.adv_estimator={estimator}"]), tokenizer, step)._compute_advantage(
            batch, {}
        )
        results.append(_advantages(batch))
    np.testing.assert_allclose(results[0], results[1], atol=1e-6)


def test_diver_runs_in_every_trainer_mode_of_the_recipe_and_is_refused_by_verls_own_trainers():
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

    colocate = compose_gcpo(BASE + ["algorithm.adv_estimator=diver", "trainer.v1.trainer_mode=colocate_async"])
    assert recipe_rules(colocate).trainer_need() is not None  # the recipe's trainer of the mode serves it
    with pytest.raises(ValueError, match="needs the GCPO trainer"):  # verl's own trainer class of each mode
        PPOTrainerSync(compose_gcpo(BASE + ["algorithm.adv_estimator=diver", "trainer.v1.trainer_mode=sync"]))
    with pytest.raises(ValueError, match="needs the GCPO trainer.*trainer class PPOTrainerColocateAsync"):
        PPOTrainerColocateAsync(colocate)
    with pytest.raises(ValueError, match="algorithm.diver.metric: must be one of"):
        recipe_rules(compose_gcpo(BASE + ["algorithm.diver.metric=bleu"]))  # checked even when unused
    assert get_adv_estimator_fn("diver") is get_adv_estimator_fn("gcpo")


class RecordingWorkerGroup:
    def __init__(self):
        self.loss_fns = []

    def set_loss_fn(self, loss_fn):
        self.loss_fns.append(loss_fn)


def test_div_r1_loss_is_given_to_the_actor_workers_once_they_are_built(monkeypatch):
    workers = RecordingWorkerGroup()

    def build_workers(self):  # verl's _setup builds the worker groups (GPUs); here only the actor's handle
        self.actor_rollout_wg = workers

    monkeypatch.setattr(PPOTrainerSync, "_setup", build_workers)
    config = compose_gcpo(BASE + ["algorithm.adv_estimator=grpo", "algorithm.div_r1.enable=true"])
    GCPOTrainer(config)._setup()
    (loss_fn,) = workers.loss_fns
    assert loss_fn.func is div_r1_loss and loss_fn.keywords["settings"].coef == 0.01

    workers.loss_fns.clear()
    GCPOTrainer(compose_gcpo(BASE + ["algorithm.adv_estimator=grpo"]))._setup()
    assert workers.loss_fns == []  # verl's own loss stays


def test_div_r1_is_refused_outside_the_recipes_trainer():
    with pytest.raises(ValueError, match="div_r1"):
        PPOTrainerSync(
            compose_gcpo(
                BASE + ["algorithm.adv_estimator=grpo", "algorithm.div_r1.enable=true", "trainer.v1.trainer_mode=sync"]
            )
        )
