"""validate (recipe/gcpo/preflight/__init__.py): every start-up check of the config, each refusal a ConfigError that
names its key, which the entry point alone turns into its one line."""

import ast
from pathlib import Path

import pytest

from recipe.gcpo.config import ConfigError
from recipe.gcpo.preflight import validate
from tests.recipe.gcpo.conftest import BASE, compose_gcpo

RECIPE = Path(__file__).resolve().parents[4] / "recipe" / "gcpo"


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["algorithm.adv_estimator=grpo", "trainer.use_v1=false"], "trainer.use_v1"),
        (["algorithm.adv_estimator=gcp"], "algorithm.adv_estimator"),
        (["algorithm.gcpo.credit.method=shap"], "algorithm.gcpo.credit.method"),
        (["actor_rollout_ref.rollout.n=1"], "actor_rollout_ref.rollout.n"),
        (
            ["algorithm.adv_estimator=copo", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"],
            "actor_rollout_ref.actor.policy_loss.loss_mode",
        ),
        (["reward.custom_reward_function.path=/no/such/reward.py"], "reward.custom_reward_function.path"),
        (['trainer.logger=["console","tensorbord"]'], "trainer.logger"),
        (["data.train_batch_size=0"], "data.train_batch_size"),
        (["trainer.nnodes=0"], "trainer.nnodes"),
    ],
)
def test_each_refusal_is_a_config_error_naming_its_key(overrides, key):
    with pytest.raises(ConfigError) as refused:
        validate(compose_gcpo(BASE + overrides))
    assert refused.value.key == key and "\n" not in str(refused.value)


def _raised_names(function: ast.FunctionDef) -> set[str]:
    """The exception classes a function raises by name (``raise X(...)``)."""
    return {
        node.exc.func.id
        for node in ast.walk(function)
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name)
    }


def test_the_start_up_checks_raise_config_errors_and_the_entry_point_alone_prints_them():
    """One failure style: no check returns its problem or exits; only the entry point's callback turns a refusal
    into its line (on_run_start), beside the entry point's own two refusals: a multirun, and a task whose config the
    callback did not check (main)."""
    styles = []
    for path in sorted(RECIPE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("check_"):
                other = _raised_names(node) - {"ConfigError"}
                returns = ast.unparse(node.returns) if node.returns is not None else "None"
                if other or "str" in returns:  # a problem returned as a string, not raised
                    styles.append(f"{path.relative_to(RECIPE)}:{node.name} raises {sorted(other)}, returns {returns}")
    assert not styles, styles
    entry = ast.parse((RECIPE / "main_gcpo.py").read_text(encoding="utf-8"))
    callers = [
        function.name
        for function in ast.walk(entry)
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "fail"
    ]
    assert sorted(callers) == ["main", "on_multirun_start", "on_run_start"]


def test_two_modules_defining_one_fact_is_a_bug_named_at_start_up(monkeypatch):
    from recipe.gcpo.preflight import config_facts, machine

    monkeypatch.setattr(machine, "FACTS", {**machine.FACTS, "estimator": lambda f: "shadowed"})
    with pytest.raises(RuntimeError, match=r"start-up facts defined by two modules: \['estimator'\]"):
        config_facts(compose_gcpo(BASE))
