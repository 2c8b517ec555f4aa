import pytest
from omegaconf import OmegaConf

from recipe.gcpo.settings import GCPOSettings, validate_gcpo_config
from tests.recipe.gcpo.conftest import compose_gcpo


def test_the_recipe_config_parses_to_the_engine_defaults():
    settings = GCPOSettings.from_algorithm_config(compose_gcpo(["actor_rollout_ref.rollout.n=8"]).algorithm)
    assert settings.credit.method == "auto" and settings.credit.norm_by_std
    assert settings.encoder.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert settings.actor.num_gpus == 0.1 and not settings.filter_all_correct


@pytest.mark.parametrize(
    "override, message",
    [
        ("algorithm.gcpo.credit.method=shap", r"algorithm.gcpo.credit.method must be one of \['auto', 'exact', 'mc', 'loo'\]"),
        ("algorithm.gcpo.credit.permutations=3", r"algorithm.gcpo.credit.permutations must be an integer in \[4"),
        ("algorithm.gcpo.credit.epsilon=0", "algorithm.gcpo.credit.epsilon must be a finite number > 0"),
        ("algorithm.gcpo.encoder.long_text=middle", "algorithm.gcpo.encoder.long_text must be one of"),
        ("algorithm.gcpo.actor.num_gpus=-1", r"algorithm.gcpo.actor.num_gpus must be in \[0, 64\]"),
        ("+algorithm.gcpo.credit.permutation=8", r"algorithm.gcpo.credit: unknown key\(s\) \['permutation'\]"),
        ("+algorithm.gcpo.colour=red", r"algorithm.gcpo: unknown key\(s\) \['colour'\]"),
        ("algorithm.gcpo.dump.every_n_steps=-2", "algorithm.gcpo.dump.every_n_steps must be an integer >= 0"),
        ("+algorithm.gcpo.credit.norm_by_std=false", "use verl's algorithm.norm_adv_by_std_in_grpo"),
    ],
)
def test_bad_values_fail_at_start_up_naming_the_key(override, message):
    config = compose_gcpo(["actor_rollout_ref.rollout.n=8", override])
    with pytest.raises(ValueError, match=message):
        validate_gcpo_config(config)


def test_norm_by_std_follows_verls_grpo_switch():
    config = compose_gcpo(["actor_rollout_ref.rollout.n=8", "algorithm.norm_adv_by_std_in_grpo=false"])
    assert validate_gcpo_config(config).credit.norm_by_std is False


def test_gcpo_outside_verls_v1_sync_trainer_is_refused_naming_the_entry_point():
    assert validate_gcpo_config(compose_gcpo(["actor_rollout_ref.rollout.n=8"])) is not None  # verl's defaults
    for override in ("trainer.v1.trainer_mode=colocate_async", "trainer.use_v1=false"):
        with pytest.raises(ValueError, match="python -m recipe.gcpo.main_gcpo"):
            validate_gcpo_config(compose_gcpo(["actor_rollout_ref.rollout.n=8", override]))


def test_groups_need_at_least_two_rollouts():
    with pytest.raises(ValueError, match="rollout.n must be >= 2"):
        validate_gcpo_config(compose_gcpo(["actor_rollout_ref.rollout.n=1"]))


def test_other_estimators_skip_the_gcpo_checks():
    assert validate_gcpo_config(compose_gcpo(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1"])) is None


def test_dapo_filtering_that_would_drop_all_correct_groups_is_explicit():
    base = ["actor_rollout_ref.rollout.n=8", "algorithm.filter_groups.enable=true"]
    assert validate_gcpo_config(compose_gcpo(base)) is not None  # the recipe's default metric is gcpo_signal
    with pytest.raises(ValueError, match="drops every group whose rollouts are all correct"):
        validate_gcpo_config(compose_gcpo(base + ["algorithm.filter_groups.metric=acc"]))
    accepted = compose_gcpo(base + ["algorithm.filter_groups.metric=acc", "algorithm.gcpo.filter_all_correct=true"])
    assert validate_gcpo_config(accepted).filter_all_correct


def test_a_missing_block_means_defaults():
    algorithm = OmegaConf.create({"adv_estimator": "gcpo", "norm_adv_by_std_in_grpo": True})
    assert GCPOSettings.from_algorithm_config(algorithm).credit.method == "auto"


def test_group_contrastive_needs_solutions_and_no_rollout_correction(tmp_path):
    import pandas as pd

    from recipe.gcpo.settings import validate_group_contrastive

    base = ["algorithm.adv_estimator=grpo", "algorithm.group_contrastive.enable=true"]
    assert validate_group_contrastive(compose_gcpo(base)).enable  # remote / absent files are not read
    with pytest.raises(ValueError, match="set algorithm.rollout_correction.rollout_is=null"):
        validate_group_contrastive(compose_gcpo(base + ["algorithm.rollout_correction.rollout_is=token"]))
    no_solution = tmp_path / "train.parquet"
    pd.DataFrame([{"extra_info": {"index": 0, "problem": "p"}}]).to_parquet(no_solution)
    with pytest.raises(ValueError, match="has no extra_info.solution"):
        validate_group_contrastive(compose_gcpo(base + [f"data.train_files={no_solution}"]))
    with_solution = tmp_path / "train_math.parquet"
    pd.DataFrame([{"extra_info": {"index": 0, "problem": "p", "solution": "s"}}]).to_parquet(with_solution)
    assert validate_group_contrastive(compose_gcpo(base + [f"data.train_files={with_solution}"])).enable
    with pytest.raises(ValueError, match="algorithm.group_contrastive.enable must be true or false"):
        validate_group_contrastive(compose_gcpo(["algorithm.group_contrastive.enable=maybe"]))


def test_bypass_mode_is_refused_with_reference_injection():
    from recipe.gcpo.settings import validate_group_contrastive

    with pytest.raises(ValueError, match="bypass_mode=false"):
        validate_group_contrastive(compose_gcpo(["algorithm.adv_estimator=grpo", "algorithm.group_contrastive.enable=true",
                                                 "algorithm.rollout_correction.bypass_mode=true"]))


def test_multi_turn_and_oversized_exact_games_are_refused_at_start_up():
    with pytest.raises(ValueError, match="multi-turn agent loops"):
        validate_gcpo_config(compose_gcpo(["actor_rollout_ref.rollout.n=8",
                                           "actor_rollout_ref.rollout.multi_turn.enable=true"]))
    with pytest.raises(ValueError, match="method=exact enumerates 2\\^n coalitions"):
        validate_gcpo_config(compose_gcpo(["actor_rollout_ref.rollout.n=32", "algorithm.gcpo.credit.method=exact"]))
    assert validate_gcpo_config(compose_gcpo(["actor_rollout_ref.rollout.n=32"])).credit.method == "auto"


LAUNCHER_REWARD = ["reward.reward_manager.name=dapo", "+reward.reward_kwargs.max_resp_len=8192",
                   "+reward.reward_kwargs.overlong_buffer_cfg.enable=true", "+reward.reward_kwargs.overlong_buffer_cfg.len=4096",
                   "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
                   "+reward.reward_kwargs.overlong_buffer_cfg.log=false"]


@pytest.mark.parametrize("overrides, message", [
    (["+reward.reward_kwargs.max_response_len=1"],
     r"reward.reward_kwargs: unknown key\(s\) \['max_response_len'\] \(did you mean 'max_resp_len'\?\)"),
    (["+reward.reward_kwargs.overlong_buffer_cfg.penalty=1"],
     r"reward.reward_kwargs.overlong_buffer_cfg: unknown key\(s\) \['penalty'\] \(did you mean 'penalty_factor'\?\)"),
    (["reward.reward_manager.name=naive"], r"read only by reward.reward_manager.name=dapo .*naive would ignore it"),
    (["reward.reward_kwargs.max_resp_len=2048"], r"max_resp_len=2048 must be >= overlong_buffer_cfg.len=4096"),
    (["reward.reward_kwargs.overlong_buffer_cfg.len=0"], r"overlong_buffer_cfg.len must be > 0"),
])
def test_reward_kwargs_are_checked_against_what_the_reward_manager_reads(overrides, message):
    from recipe.gcpo.settings import validate_reward_kwargs

    validate_reward_kwargs(compose_gcpo(LAUNCHER_REWARD))
    with pytest.raises(ValueError, match=message):
        validate_reward_kwargs(compose_gcpo(LAUNCHER_REWARD + overrides))


def test_an_enabled_overlong_buffer_needs_every_value_the_dapo_manager_reads():
    from recipe.gcpo.settings import validate_reward_kwargs

    partial = [o for o in LAUNCHER_REWARD if "penalty_factor" not in o and "max_resp_len" not in o]
    with pytest.raises(ValueError, match="also reads overlong_buffer_cfg.penalty_factor"):
        validate_reward_kwargs(compose_gcpo(partial))
    with pytest.raises(ValueError, match="needs reward.reward_kwargs.max_resp_len"):
        validate_reward_kwargs(compose_gcpo(partial + ["+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1"]))


def _reward_kwargs_verl_reads() -> dict[str, dict]:
    """Reward manager name -> {key: the sub-keys it reads, None for a value}, from verl's reward manager source:
    ``config.reward.get("reward_kwargs", ...).get(KEY)`` and then ``self.KEY.SUB``."""
    import ast
    from pathlib import Path

    import verl.experimental.reward_loop.reward_manager as managers

    found = {}
    for path in Path(managers.__file__).parent.glob("*.py"):
        for cls in [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]:
            names = [d.args[0].value for d in cls.decorator_list if isinstance(d, ast.Call) and d.args
                     and isinstance(d.args[0], ast.Constant) and getattr(d.func, "id", "") == "register"]
            keys = {}
            for node in ast.walk(cls):
                inner = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
                if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "get"
                        and inner.args and getattr(inner.args[0], "value", None) == "reward_kwargs"):
                    keys[node.args[0].value] = None
            for node in ast.walk(cls):
                owner = node.value if isinstance(node, ast.Attribute) else None
                if (isinstance(owner, ast.Attribute) and owner.attr in keys and isinstance(owner.value, ast.Name)
                        and owner.value.id == "self"):
                    keys[owner.attr] = (keys[owner.attr] or frozenset()) | {node.attr}
            if keys:
                found.update({name: keys for name in names})
    return found


def test_the_reward_kwargs_table_is_what_verls_reward_managers_read():
    from recipe.gcpo.settings import REWARD_KWARGS

    assert _reward_kwargs_verl_reads() == REWARD_KWARGS


@pytest.mark.parametrize("overrides, message", [
    (["+reward.custom_reward_function.reward_kwargs.correct_scor=2"],
     r"reward.custom_reward_function.reward_kwargs \(keyword arguments of pkg://recipe.gcpo.reward:compute_score\): "
     r"unknown key\(s\) \['correct_scor'\] \(did you mean 'correct_score'\?\); known: \['correct_score', 'timeout_s', 'wrong_score'\]"),
    (["+reward.custom_reward_function.reward_kwargs.ground_truth=1"],
     r"\['ground_truth'\] would replace the argument\(s\) verl passes"),
    (["reward.custom_reward_function.path=null", "+reward.custom_reward_function.reward_kwargs.correct_score=2"],
     r"reward_kwargs is set but custom_reward_function.path is not"),
    (["reward.custom_reward_function.path=/no/such/reward.py", "+reward.custom_reward_function.reward_kwargs.a=1"],
     r"\(/no/such/reward.py, compute_score\) cannot be loaded here"),
])
def test_custom_reward_function_kwargs_are_checked_by_name(overrides, message):
    from recipe.gcpo.settings import validate_custom_reward_kwargs

    with pytest.raises(ValueError, match=message):
        validate_custom_reward_kwargs(compose_gcpo(overrides))


def test_custom_reward_function_kwargs_the_function_reads_pass(tmp_path):
    from recipe.gcpo.settings import validate_custom_reward_kwargs

    validate_custom_reward_kwargs(compose_gcpo(["+reward.custom_reward_function.reward_kwargs.correct_score=2",
                                                "+reward.custom_reward_function.reward_kwargs.wrong_score=0"]))
    # a user's function with **kwargs reads what it reads; one without names its keywords
    module = tmp_path / "my_reward.py"
    module.write_text("def open_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n"
                      "def closed_score(data_source, solution_str, ground_truth, extra_info=None, *, scale=1.0):\n"
                      "    return 0.0\n")
    base = [f"reward.custom_reward_function.path={module}"]
    validate_custom_reward_kwargs(compose_gcpo(base + ["reward.custom_reward_function.name=open_score",
                                                       "+reward.custom_reward_function.reward_kwargs.anything=1"]))
    validate_custom_reward_kwargs(compose_gcpo(base + ["reward.custom_reward_function.name=closed_score",
                                                       "+reward.custom_reward_function.reward_kwargs.scale=2"]))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['scal'\] \(did you mean 'scale'\?\)"):
        validate_custom_reward_kwargs(compose_gcpo(base + ["reward.custom_reward_function.name=closed_score",
                                                           "+reward.custom_reward_function.reward_kwargs.scal=2"]))



def test_filtering_on_gcpo_signal_needs_a_reward_that_reports_it(tmp_path):
    from recipe.gcpo.main_gcpo import validate

    base = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=gcpo_signal",
            "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.use_dynamic_bsz=true",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true"]
    validate(compose_gcpo(base))  # the recipe's reward reports it
    validate(compose_gcpo(base + ["reward.custom_reward_function.path=pkg://tests.special_e2e.smoke.reward"]))
    own = tmp_path / "my_reward.py"
    own.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
                   "    return {'score': 1.0, 'acc': 1.0}\n")
    with pytest.raises(ValueError, match=r"never reports 'gcpo_signal': return it from the reward function"):
        validate(compose_gcpo(base + [f"reward.custom_reward_function.path={own}"]))
    with pytest.raises(ValueError, match="verl's built-in reward does not report it"):
        validate(compose_gcpo(base + ["reward.custom_reward_function.path=null"]))
    # filtering on acc needs nothing of the reward's
    validate(compose_gcpo([b.replace("gcpo_signal", "acc") for b in base]
                          + ["algorithm.gcpo.filter_all_correct=true", f"reward.custom_reward_function.path={own}"]))
