"""The GCPO trainer is verl's own trainer of each mode (sync, colocate_async, separate_async) in every branch that
depends on the trainer mode.

verl 0.9.1's V1 trainer reads ``trainer.v1.trainer_mode`` in its constructor (replay buffer class and
arguments), its dataloader (``data.gen_batch_size``), its rollout submission (what TransferQueue keeps), its
checkpoints (a TransferQueue checkpoint in the async modes) and its resume. Each test builds the trainer with
its real constructor from a launcher's composed config in each mode and runs verl's own method next to verl's stock
class of that mode; what only GPUs can build (the actor's worker group, the rollout) is replaced by a recorder.
"""

import ast
import inspect
import os
import textwrap

import numpy as np
import pandas as pd
import pytest
import torch
import transfer_queue as tq
from tokenizers import Tokenizer, models, pre_tokenizers
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import PreTrainedTokenizerFast
from verl.trainer.main_ppo import TaskRunnerV1
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync
from verl.trainer.ppo.v1.trainer_base import PPOTrainer, get_trainer_cls
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from recipe.gcpo.gcpo_trainer import GCPO_TRAINERS, GCPOSteps, GCPOTrainer
from recipe.gcpo.main_gcpo import GCPOTaskRunner, trainer_class
from tests.recipe.gcpo.conftest import MODE_OVERRIDES, compose_gcpo
from tests.scripts.launch import launcher_overrides

SYNC_LAUNCHERS = ["run_qwen3_4b_gcpo.sh", "run_qwen3_4b_grpo.sh", "run_qwen3_4b_dapo.sh"]
MODES = ["sync", "colocate_async", "separate_async"]


@pytest.fixture
def stock(monkeypatch):
    """verl's own trainer class of a mode, built with verl's own constructor: recipe.gcpo.register (if a test
    imported it) wraps that constructor to refuse the GCPO estimators under a stock trainer, which is exactly what
    these comparisons build, so the wrapper is taken off."""
    monkeypatch.setattr(PPOTrainer, "__init__", getattr(PPOTrainer.__init__, "__wrapped__", PPOTrainer.__init__))
    return get_trainer_cls


@pytest.fixture
def stock_sync(stock):
    return stock("sync")


def _launcher_config(script, mode="sync", **env):
    """A launcher's config in a trainer mode, as TRAINER_MODE gives it (verl's asynchronous examples' settings)."""
    return compose_gcpo(launcher_overrides(script, env={"TRAINER_MODE": mode, **env}))


def test_the_recipe_has_a_trainer_for_every_mode_verl_registers_each_verls_class_with_gcpos_steps():
    assert set(GCPO_TRAINERS) == set(trainer_base.TRAINER_REGISTRY)
    for mode, cls in GCPO_TRAINERS.items():
        assert cls.__mro__[1:3] == (GCPOSteps, get_trainer_cls(mode)) and trainer_class(mode) is cls
        assert trainer_base.TRAINER_REGISTRY[mode] is not cls  # verl's registry is verl's
    assert GCPOTrainer is GCPO_TRAINERS["sync"]


@pytest.mark.parametrize("mode", MODES)
def test_each_modes_trainer_is_verls_in_its_constructor_replay_buffer_and_mode(mode, stock, monkeypatch):
    """Through the real constructors: the same replay buffer (class and arguments), mode and mini-batch cadence as
    verl's own class of the mode; only GCPO's settings and credit actor slot are added."""
    config = _launcher_config("run_qwen3_4b_gcpo.sh", mode)
    ours = _replay_buffer_construction(GCPO_TRAINERS[mode], config, monkeypatch)
    theirs = _replay_buffer_construction(stock(mode), _launcher_config("run_qwen3_4b_gcpo.sh", mode), monkeypatch)
    assert ours == theirs
    assert ours[0] is (ReplayBuffer if mode == "sync" else ReplayBufferAsync)
    trainer = GCPO_TRAINERS[mode](config)
    assert trainer.trainer_mode == mode and trainer.gcpo is not None and trainer.credit_actor is None
    assert trainer.parameter_sync_step == (4 if mode == "separate_async" else 1)  # 256 prompts / mini-batches of 64


def _replay_buffer_construction(trainer_cls, config, monkeypatch):
    """(class, refill function, other keyword arguments) of the replay buffer the trainer's constructor builds."""
    calls = []
    original = ReplayBuffer.__init__  # ReplayBufferAsync inherits it

    def recording(self, **kwargs):
        calls.append((type(self), dict(kwargs)))
        original(self, **kwargs)

    monkeypatch.setattr(ReplayBuffer, "__init__", recording)
    trainer = trainer_cls(config)
    monkeypatch.setattr(ReplayBuffer, "__init__", original)
    [(cls, kwargs)] = calls
    refill = kwargs.pop("refill_fn")
    assert refill.__self__ is trainer
    return cls, refill.__func__, kwargs


@pytest.mark.parametrize("script", SYNC_LAUNCHERS)
def test_the_replay_buffer_is_verls_sync_one(script, stock_sync, monkeypatch):
    ours = _replay_buffer_construction(GCPOTrainer, _launcher_config(script), monkeypatch)
    stock = _replay_buffer_construction(stock_sync, _launcher_config(script), monkeypatch)
    assert ours[0] is ReplayBuffer  # the sync sampler, not ReplayBufferAsync
    assert ours == stock
    if script == "run_qwen3_4b_dapo.sh":  # verl's speculative sync refill: whole batches in flight
        assert ours[2]["filter_groups_metric"] == "acc" and ours[2]["max_inflight_gen_batches"] == 2
        assert ours[2]["train_batch_size"] == 256 and ours[2]["gen_batch_size"] == 1


@pytest.fixture(scope="module")
def chat_tokenizer():
    """A word-level tokenizer with a chat template: enough for verl's dataset and its prompt-length filter."""
    words = ["what", "is", "plus"] + [str(i) for i in range(40)]
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "</s>"] + words)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", eos_token="</s>"
    )
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return tokenizer


@pytest.fixture
def data_dir(tmp_path):
    """train.parquet and val_aime24.parquet in verl's RL format, 12 prompts each."""
    rows = [
        {
            "data_source": "math",
            "prompt": [{"role": "user", "content": f"what is {i} plus {i}"}],
            "reward_model": {"ground_truth": str(2 * i), "style": "rule"},
            "extra_info": {"index": i},
        }
        for i in range(12)
    ]
    for name in ("train", "val_aime24"):
        pd.DataFrame(rows).to_parquet(tmp_path / f"{name}.parquet")
    return tmp_path


@pytest.mark.parametrize("script, gen_batch_size", [("run_qwen3_4b_gcpo.sh", 256), ("run_qwen3_4b_dapo.sh", 1)])
def test_the_dataloader_fetches_verls_sync_gen_batch(script, gen_batch_size, chat_tokenizer, data_dir, stock_sync):
    """In sync mode prompts are fetched a whole train batch at a time (one at a time only for DAPO's exact
    refills); in any other mode verl forces data.gen_batch_size=1."""
    sizes = []
    for cls in (GCPOTrainer, stock_sync):
        config = _launcher_config(script, DATA_DIR=str(data_dir), VAL_SETS="aime24")
        trainer = cls(config)
        trainer.tokenizer, trainer.processor = chat_tokenizer, None  # what init() loads from the model path
        trainer._init_dataloader()
        sizes.append((trainer.train_dataloader.batch_size, config.data.gen_batch_size))
    assert sizes[0] == sizes[1]
    assert sizes[0][0] == gen_batch_size


class _ActorWorkers:
    """Stands in for the actor's worker group (its FSDP shards need GPUs): records checkpoint calls."""

    def __init__(self):
        self.calls = []

    def save_checkpoint(self, local_path, remote_path, global_steps, max_ckpt_to_keep=None):
        self.calls.append(("save", local_path, global_steps))

    def load_checkpoint(self, local_path, del_local_after_load=False):
        self.calls.append(("load", local_path))


class _AgentLoop:
    def __init__(self):
        self.batches = []

    def generate_sequences(self, batch):
        self.batches.append(len(batch))


def _record_transfer_queue(monkeypatch):
    calls = []
    for name in ("save_checkpoint", "load_checkpoint", "kv_list", "kv_batch_put"):
        monkeypatch.setattr(tq, name, lambda *args, _name=name, **kwargs: calls.append((_name, sorted(kwargs))))
    return calls


def _dataloader():
    loader = StatefulDataLoader(list(range(16)), batch_size=4)
    iterator = iter(loader)
    next(iterator), next(iterator)
    return loader


def _a_step_with_a_checkpoint_and_a_resume(trainer_cls, ckpt_dir, monkeypatch, mode="sync"):
    """Submit a batch of prompts, save a checkpoint at step 50, then resume a new trainer from it."""
    tq_calls = _record_transfer_queue(monkeypatch)
    config = _launcher_config("run_qwen3_4b_gcpo.sh", mode, CKPT_DIR=str(ckpt_dir))
    trainer = trainer_cls(config)
    trainer.global_steps = 50
    trainer.agent_loop_manager = _AgentLoop()
    prompts = tu.get_tensordict({"uid": np.array(["u0", "u1"], dtype=object), "input_ids": torch.ones(2, 3)})
    trainer._submit_batch_to_rollout(prompts)
    trainer.actor_rollout_wg, trainer.train_dataloader = _ActorWorkers(), _dataloader()
    trainer._save_checkpoint()
    written = sorted(str(p.relative_to(ckpt_dir)) for p in ckpt_dir.rglob("*"))

    resumed = trainer_cls(config)
    resumed.actor_rollout_wg = _ActorWorkers()
    resumed.train_dataloader = StatefulDataLoader(list(range(16)), batch_size=4)
    resumed._load_checkpoint()
    reissued = resumed._reissue_inflight_prompts()
    relative = [
        (call[0], os.path.relpath(call[1], ckpt_dir), *call[2:])
        for call in trainer.actor_rollout_wg.calls + resumed.actor_rollout_wg.calls
    ]
    return {
        "transfer_queue": tq_calls,
        "files": written,
        "actor": relative,
        "resumed_step": resumed.global_steps,
        "reissued": reissued,
        "restored_prompts": resumed._restored_tq_prompt_count,
        "dataloader": resumed.train_dataloader.state_dict() == trainer.train_dataloader.state_dict(),
    }


@pytest.mark.parametrize("mode", MODES)
def test_checkpoints_and_resume_are_verls_own_in_each_mode(mode, tmp_path, stock, monkeypatch):
    ours = _a_step_with_a_checkpoint_and_a_resume(GCPO_TRAINERS[mode], tmp_path / "ours", monkeypatch, mode)
    theirs = _a_step_with_a_checkpoint_and_a_resume(stock(mode), tmp_path / "stock", monkeypatch, mode)
    assert ours == theirs
    assert ours["resumed_step"] == 50 and ours["dataloader"]
    if mode == "sync":  # prompts are registered as tags only, no TransferQueue checkpoint is written or read
        assert ours["transfer_queue"] == [("kv_batch_put", ["keys", "partition_id", "tags"])]
        assert not any("transfer_queue" in path for path in ours["files"]) and ours["reissued"] == 0
    else:  # the asynchronous modes keep their prompts and rollouts in TransferQueue's own checkpoint
        assert [call[0] for call in ours["transfer_queue"]].count("save_checkpoint") == 1


class _Started(Exception):
    """Raised where the trainer would start its workers on GPUs."""


ASYNC = {mode: overrides for mode, overrides in MODE_OVERRIDES.items() if mode != "sync"}


@pytest.mark.parametrize(
    "overrides, trainer_cls",
    [
        (["actor_rollout_ref.rollout.n=4"], GCPOTrainer),
        (["algorithm.adv_estimator=grpo"], GCPOTrainer),
        *[(["actor_rollout_ref.rollout.n=4", *o], GCPO_TRAINERS[m]) for m, o in ASYNC.items()],
        *[(["algorithm.adv_estimator=grpo", *o], GCPO_TRAINERS[m]) for m, o in ASYNC.items()],
    ],
)
def test_the_task_runner_builds_the_gcpo_trainer_of_verls_mode(overrides, trainer_cls, monkeypatch):
    built = []

    def start(self):
        built.append(self)
        raise _Started

    monkeypatch.setattr(PPOTrainer, "init", start)
    monkeypatch.setattr(tq, "init", lambda config: None)  # the runner's TransferQueue (Ray actors)
    monkeypatch.setattr(tq, "close", lambda: None)
    with pytest.raises(_Started):
        GCPOTaskRunner().run(compose_gcpo(overrides))
    [trainer] = built
    assert type(trainer) is trainer_cls
    assert trainer.trainer_mode == compose_gcpo(overrides).trainer.v1.trainer_mode
    if trainer_cls is GCPOTrainer:
        assert trainer.trainer_mode == "sync" and type(trainer.replay_buffer) is ReplayBuffer


def test_the_recipe_registers_no_trainer_mode_of_its_own():
    import recipe.gcpo.register  # noqa: F401

    assert set(trainer_base.TRAINER_REGISTRY) == set(MODES)
    assert trainer_base.TRAINER_REGISTRY["sync"] is PPOTrainerSync


class _DropCalls(ast.NodeTransformer):
    """Removes the statements that only call one of ``names`` (the recipe's deliberate additions to verl's run)."""

    def __init__(self, names):
        self.names = set(names)

    def visit_Expr(self, node):
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in self.names:
            return None
        return node


def _run_statements(method, skipped_imports, added_calls=()):
    """The statements of a task runner's ``run``, docstring, the given imports and the statements calling
    ``added_calls`` left out, as AST dumps."""
    [function] = ast.parse(textwrap.dedent(inspect.getsource(method))).body
    function = _DropCalls(added_calls).visit(function)
    body = (
        function.body[1:]
        if isinstance(function.body[0].value if isinstance(function.body[0], ast.Expr) else None, ast.Constant)
        else function.body
    )
    kept = [s for s in body if not (isinstance(s, (ast.Import, ast.ImportFrom)) and ast.unparse(s) in skipped_imports)]
    return [ast.dump(s).replace("'get_trainer_cls'", "'trainer_class'") for s in kept]


def test_the_task_runner_is_verls_but_for_the_trainer_class():
    """GCPOTaskRunner.run mirrors verl 0.9.1's TaskRunnerV1.run, choosing the trainer class where verl looks it
    up by mode: this fails when either side changes, so that the mirror is redone."""
    # the additions: the training data loader's workers are stopped once training is over (verl keeps them alive in
    # trainer.train_dataloader_it, and Ray's shutdown killed them with a traceback after a good run), and the credit
    # actors released (verl's fit returns on its last step without on_train_end), and W&B's service stopped while the
    # runner is alive (its atexit hook otherwise prints a traceback after a good run)
    ours = _run_statements(
        GCPOTaskRunner.run,
        {"from verl.utils.logging_utils import configure_verl_logging", "import recipe.gcpo.register"},
        added_calls={"stop_dataloader_workers", "release_credit", "end_wandb_service"},
    )
    verls = _run_statements(TaskRunnerV1.__ray_actor_class__.run, {"from verl.trainer.ppo.v1 import get_trainer_cls"})
    assert ours == verls
