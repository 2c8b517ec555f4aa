"""A baseline added in the three steps of docs/training.md#adding-a-baseline (its module: this file; its YAML block:
the ``+algorithm.toy.*`` overrides; one registration line) reaches the driver's checks and the trainer's hook, with
neither naming it (recipe/gcpo/settings.py, recipe/gcpo/baselines/__init__.py)."""

from dataclasses import dataclass

import pytest
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from gcpo_core.credit.config import check_fields, integer
from recipe.gcpo.checks import RECIPE, recipe_rules
from recipe.gcpo.gcpo_trainer import GCPOTrainer
from recipe.gcpo.settings import BASELINES, Baseline, TrainerNeed, register
from tests.recipe.gcpo.conftest import compose_gcpo
from verl_preflight import ConfigError
from verl_preflight.schema import check_resolves, check_schema


# ---- step 1, the module: its settings, checks and hook
@dataclass(frozen=True)
class ToySettings:
    enable: bool = False
    most_rollouts: int = 8

    def __post_init__(self) -> None:
        check_fields(self, "toy", most_rollouts=integer(2))


def check_toy(config, settings: ToySettings, recipe) -> None:
    n = config.actor_rollout_ref.rollout.n
    if n > settings.most_rollouts:
        raise ConfigError(
            "actor_rollout_ref.rollout.n", f"the toy takes at most {settings.most_rollouts} rollouts, got {n}"
        )


def check_verl_config(config) -> None:
    """verl's schema of keys, the recipe's blocks free."""
    check_schema(check_resolves(config), RECIPE.blocks(), RECIPE.reader)


def count_rows(trainer, settings: ToySettings, batch, metrics):
    metrics["toy/rows"] = float(len(batch.keys))
    metrics["toy/most_rollouts"] = float(settings.most_rollouts)
    return batch


TOY = Baseline(
    "toy",
    ToySettings,
    needs_trainer=lambda settings: TrainerNeed("algorithm.toy.enable=true", "counts the rows"),
    check=check_toy,
    before_balance=count_rows,
)
# ---- step 2, the YAML block: written here as the overrides a config file would hold
TOY_BLOCK = ["+algorithm.toy.enable=true", "+algorithm.toy.most_rollouts=4"]
GRPO = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.name=vllm"]


@pytest.fixture
def toy_registered():
    register(TOY)  # ---- step 3, the registration line
    yield
    del BASELINES["toy"]


def test_unregistered_the_block_is_a_key_nothing_reads():
    with pytest.raises(ConfigError, match="algorithm.toy: not a key verl 0.9.1 or the recipe reads"):
        check_verl_config(compose_gcpo(GRPO + TOY_BLOCK))


def test_the_driver_parses_and_checks_a_registered_baseline(toy_registered):
    check_verl_config(compose_gcpo(GRPO + TOY_BLOCK))  # the schema check takes the block
    settings = recipe_rules(compose_gcpo(GRPO + TOY_BLOCK))
    assert settings.blocks["toy"] == ToySettings(enable=True, most_rollouts=4)
    assert settings.trainer_need() == TrainerNeed("algorithm.toy.enable=true", "counts the rows")
    with pytest.raises(ConfigError, match="the toy takes at most 4 rollouts, got 8"):
        recipe_rules(compose_gcpo(GRPO + TOY_BLOCK + ["actor_rollout_ref.rollout.n=8"]))
    with pytest.raises(ConfigError, match=r"^algorithm.toy.most_rollouts: must be an integer >= 2, got 1$"):
        recipe_rules(compose_gcpo(GRPO + ["+algorithm.toy.most_rollouts=1"]))  # parsed even when not enabled
    with pytest.raises(ConfigError, match=r"algorithm.toy: unknown key\(s\) \['most_rolouts'\]"):
        recipe_rules(compose_gcpo(GRPO + ["+algorithm.toy.most_rolouts=3"]))
    # the recipe's trainer serves it in every mode; verl's own trainer classes refuse it as they are built
    assert recipe_rules(compose_gcpo(GRPO + TOY_BLOCK + ["trainer.v1.trainer_mode=colocate_async"])).blocks["toy"]
    with pytest.raises(ValueError, match="algorithm.toy.enable=true needs the GCPO trainer, which counts the rows"):
        PPOTrainerSync(compose_gcpo(GRPO + TOY_BLOCK))
    assert recipe_rules(compose_gcpo(GRPO + ["+algorithm.toy.most_rollouts=2"])).trainer_need() is None


def test_the_trainer_runs_a_registered_baselines_hook(toy_registered, monkeypatch):
    monkeypatch.setattr(PPOTrainerSync, "_balance_batch", lambda self, batch, metrics, *a, **k: batch)
    batch = KVBatchMeta(partition_id="train", keys=["a_0_0", "a_1_0", "b_0_0"], tags=[{}, {}, {}])
    metrics = {}
    assert GCPOTrainer(compose_gcpo(GRPO + TOY_BLOCK))._balance_batch(batch, metrics) is batch
    assert metrics == {"toy/rows": 3.0, "toy/most_rollouts": 4.0}
    metrics = {}
    GCPOTrainer(compose_gcpo(GRPO))._balance_batch(batch, metrics)  # registered but not enabled: not run
    assert metrics == {}


def test_a_name_is_registered_once_and_only_an_estimators_baseline_has_an_advantage_step(toy_registered):
    with pytest.raises(ValueError, match="'toy' is registered already"):
        register(TOY)
    with pytest.raises(ValueError, match="an advantage step needs the estimator that selects it"):
        register(Baseline("toy2", ToySettings, advantage=lambda *args: None))
