"""The recipe's blocks in a whole config (recipe/gcpo/preflight/recipe_blocks.py): the trainer they need, their groups,
their interplay with verl's keys. Each baseline's own checks are tested beside it, in tests/recipe/gcpo/baselines/."""

import pytest

from recipe.gcpo.preflight.recipe_blocks import check_recipe
from tests.recipe.gcpo.conftest import compose_gcpo


def checked_gcpo(config):
    """The recipe's checks of a full config; its GCPO settings (None for another estimator)."""
    return check_recipe(config).gcpo


def test_gcpo_outside_verls_v1_sync_trainer_is_refused_naming_the_entry_point():
    assert checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=8"])) is not None  # verl's defaults
    for override in ("trainer.v1.trainer_mode=colocate_async", "trainer.use_v1=false"):
        with pytest.raises(ValueError, match="python -m recipe.gcpo.main_gcpo"):
            checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=8", override]))


def test_groups_need_at_least_two_rollouts():
    with pytest.raises(
        ValueError, match="rollout.n: gcpo credits rollouts within a group, so it needs at least 2, got 1"
    ):
        checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=1"]))


def test_other_estimators_skip_the_gcpo_checks():
    assert checked_gcpo(compose_gcpo(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1"])) is None


def test_dapo_filtering_that_would_drop_all_correct_groups_is_explicit():
    base = ["actor_rollout_ref.rollout.n=8", "algorithm.filter_groups.enable=true"]
    assert checked_gcpo(compose_gcpo(base)) is not None  # the recipe's default metric is gcpo_signal
    with pytest.raises(ValueError, match="drops every group whose rollouts are all correct"):
        checked_gcpo(compose_gcpo(base + ["algorithm.filter_groups.metric=acc"]))
    accepted = compose_gcpo(base + ["algorithm.filter_groups.metric=acc", "algorithm.gcpo.filter_all_correct=true"])
    assert checked_gcpo(accepted).filter_all_correct


def test_multi_turn_and_oversized_exact_games_are_refused_at_start_up():
    with pytest.raises(ValueError, match="multi_turn.enable: true is not supported: .* multi-turn agent loops"):
        checked_gcpo(
            compose_gcpo(["actor_rollout_ref.rollout.n=8", "actor_rollout_ref.rollout.multi_turn.enable=true"])
        )
    with pytest.raises(ValueError, match="method: exact enumerates 2\\^n coalitions"):
        checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=32", "algorithm.gcpo.credit.method=exact"]))
    assert checked_gcpo(compose_gcpo(["actor_rollout_ref.rollout.n=32"])).credit.method == "auto"
