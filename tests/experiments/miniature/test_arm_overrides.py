import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.miniature.arms import ARMS, CREDIT_SHAPE_ARMS, DEFAULT_ARMS, DIAL_ARMS, RunSpec, run_overrides
from tests.special_e2e.cpu_platform import cpu_overrides

ROOT = Path(__file__).resolve().parents[3]


def _args(arm, seed=1, spec=RunSpec(), root=Path("/m"), dump_rollouts=False):
    return run_overrides(
        arm, seed, spec, root / "data", root / "policy", root / "run", root / "ray", dump_rollouts=dump_rollouts
    )


def test_the_arms_run_on_the_cpu_as_the_cpu_smoke():
    """The CPU platform's overrides, from the one list the CPU smoke runs with too (its test checks that side)."""
    device = cpu_overrides("/m/ray")
    assert all(_args(arm)[-len(device) :] == device for arm in ARMS)


def test_the_arms_differ_only_in_the_advantage():
    runs = {arm: _args(arm) for arm in ARMS}
    shared = set.intersection(*(set(a) for a in runs.values()))
    own = {arm: sorted(set(a) - shared) for arm, a in runs.items()}
    assert own["grpo"] == ["algorithm.adv_estimator=grpo", "trainer.experiment_name=grpo-seed1"]
    assert own["gcpo_group"] == [
        "algorithm.adv_estimator=gcpo",
        "algorithm.gcpo.credit.all_correct_scale=group",
        "algorithm.gcpo.credit.seed=1",
        "trainer.experiment_name=gcpo_group-seed1",
    ]
    assert "algorithm.gcpo.credit.all_correct_scale=batch" in own["gcpo_batch"]
    # each ablation arm is gcpo_group but for the one thing it changes
    group = set(runs["gcpo_group"]) - {"trainer.experiment_name=gcpo_group-seed1"}
    loo = set(runs["gcpo_loo"]) - {"trainer.experiment_name=gcpo_loo-seed1"}
    assert loo - group == {"algorithm.gcpo.credit.method=loo"} and group - loo == set()
    # the credit-shape run's dose match (issue 56): leave-one-out mixed into the reward at four times the credit
    mix4 = set(runs["gcpo_loo_mix4"]) - {"trainer.experiment_name=gcpo_loo_mix4-seed1"}
    assert mix4 - group == {
        "algorithm.gcpo.credit.method=loo",
        "algorithm.gcpo.credit.advantage=mix",
        "algorithm.gcpo.credit.mix_coef=4.0",
    }
    assert group - mix4 == set()
    # the dial (issue 72): gcpo_group but for the blend and its weight
    for arm, weight in (("gcpo_blend25", "0.25"), ("gcpo_blend75", "0.75")):
        blend = set(runs[arm]) - {f"trainer.experiment_name={arm}-seed1"}
        assert blend - group == {
            "algorithm.gcpo.credit.advantage=blend",
            f"algorithm.gcpo.credit.blend_weight={weight}",
        }
        assert group - blend == set()
    dqo = set(runs["dqo"]) - {"trainer.experiment_name=dqo-seed1"}
    assert dqo - group == {"algorithm.adv_estimator=dqo", "algorithm.gcpo.credit.mix_coef=2.0"}
    # dqo fixes all_correct_scale=group itself (and quality=none, method=loo, advantage=mix)
    assert group - dqo == {"algorithm.adv_estimator=gcpo", "algorithm.gcpo.credit.all_correct_scale=group"}


def test_the_default_arms_are_the_decisive_ablations_and_all_exist():
    assert DEFAULT_ARMS == ("grpo", "gcpo_group", "gcpo_loo", "dqo") and set(DEFAULT_ARMS) <= set(ARMS)
    # the credit-shape run's arms exist; its dose-matched arm runs only when asked for
    assert CREDIT_SHAPE_ARMS == ("grpo", "gcpo_group", "gcpo_loo", "gcpo_loo_mix4")
    assert set(CREDIT_SHAPE_ARMS) <= set(ARMS) and "gcpo_loo_mix4" not in DEFAULT_ARMS
    # issue 72's dial arms exist and run only when asked for
    assert DIAL_ARMS == ("grpo", "gcpo_group", "gcpo_blend25", "gcpo_blend75") and set(DIAL_ARMS) <= set(ARMS)
    assert not {"gcpo_blend25", "gcpo_blend75"} & set(DEFAULT_ARMS)


def test_the_seed_reaches_data_order_sampling_and_gcpos_permutations():
    args = set(_args("gcpo_batch", seed=3))
    assert {"data.seed=3", "actor_rollout_ref.rollout.seed=3", "algorithm.gcpo.credit.seed=3"} <= args
    assert "trainer.validation_data_dir=/m/run/heldout" in args and "trainer.val_before_train=true" in args


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("steps", 0, "steps must be"),
        ("rollouts", 1, "rollouts must"),
        ("lr", 0.0, "lr must be"),
        ("eval_every", -1, "eval_every"),
    ],
)
def test_bad_budgets_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        RunSpec(**{field: value})
    with pytest.raises(ValueError, match="unknown arm"):
        _args("ppo")


@pytest.mark.parametrize("arm", list(ARMS))
def test_every_arm_composes_and_validates_through_the_real_entry_point(arm, tmp_path):
    """verl's own config composition and validation (main_gcpo's dry run) accept each arm's overrides."""
    from experiments.miniature.task import write_task_data

    write_task_data(tmp_path / "data")
    env = {**os.environ, "GCPO_DRY_RUN": "1"}
    # the dial's runs dump their training rollouts: verl's key composes and validates too
    dump = arm in DIAL_ARMS
    proc = subprocess.run(
        [sys.executable, "-m", "recipe.gcpo.main_gcpo", *_args(arm, root=tmp_path, dump_rollouts=dump)],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    estimator = {"grpo": "grpo", "dqo": "dqo"}.get(arm, "gcpo")
    assert f"dry run (adv_estimator={estimator})" in proc.stdout
    if arm != "grpo":
        scale = "batch" if arm == "gcpo_batch" else "group"
        assert f"all_correct_scale: {scale}" in proc.stdout
    if arm in ("gcpo_loo", "gcpo_loo_mix4", "dqo"):  # named as what it is: leave-one-out, not Shapley
        assert "leave-one-out credit of each group's log-det team value (method loo;" in proc.stdout
    elif arm != "grpo":
        assert "Shapley credit of each group's log-det team value (method auto" in proc.stdout
    if arm == "gcpo_loo_mix4":  # mixed into the reward at four times the credit, as composed
        assert "advantage mix;" in proc.stdout and "mix_coef: 4.0" in proc.stdout
    if arm in ("gcpo_blend25", "gcpo_blend75"):  # the blend and its weight, as composed
        assert "advantage blend;" in proc.stdout and f"blend_weight: 0.{arm[-2:]}" in proc.stdout
    if dump:
        assert f"rollout_data_dir: {tmp_path / 'run' / 'rollouts'}" in proc.stdout
