"""What the tests of verl_preflight (and the recipe's tests of its checks) share: verl's stock config composed, a
reward file of the user's own, small data files, and the reading of a check's failure style in the source."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq
import verl
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

# verl's own config folder (ppo_trainer.yaml), as `python -m verl.trainer.main_ppo` composes it
VERL_CONFIG = Path(verl.__file__).resolve().parent / "trainer" / "config"
# a stock verl run every check accepts (not this machine's): GRPO (no critic), a micro batch for each log-prob pass,
# data files that are not here (the machine's check), a logger that needs nothing of this machine
VERL_BASE = [
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.model.path=/models/m",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
    "trainer.logger=[console]",
    "data.train_files=/nowhere/train.parquet",
    "data.val_files=/nowhere/test.parquet",
]


def compose_verl(overrides: Iterable[str] = ()) -> DictConfig:
    """verl 0.9.1's stock ``ppo_trainer`` config with ``overrides``, composed as verl's entry point composes it."""
    with initialize_config_dir(config_dir=str(VERL_CONFIG), version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def reward_file(
    tmp_path, body="def my_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
):
    path = tmp_path / "my_reward.py"
    path.write_text(body)
    return path


def rows(count: int) -> list[dict]:
    """``count`` rows as verl's RLHFDataset and its reward managers read them (chat prompt, data_source,
    reward_model.ground_truth)."""
    return [
        {
            "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
            "data_source": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
        }
        for i in range(count)
    ]


def write_parquet(path: Path, count: int = 3, drop: tuple[str, ...] = ()) -> Path:
    """A real parquet file of ``count`` :func:`rows`, without the columns in ``drop``."""
    table = pa.Table.from_pylist(rows(max(count, 1)))
    table = table.drop_columns(list(drop)).slice(0, count)
    pq.write_table(table, path)
    return path


# what a check may return instead of None (the problems it finds it raises, as a ConfigError)
CHECK_RETURNS = {
    "check_config": "Checked",  # the notes, a dry run's warnings and the extension's settings
    "check_resolves": "dict",  # the config resolved, for the checks that walk it all
    "check_function": "Optional[Callable]",  # the reward function it loaded
}


def check_style_problems(root: Path, paths: Iterable[Path]) -> list[str]:
    """Each ``check_*`` function of ``paths`` that raises something other than a ConfigError (by name: ``refuse``
    raises one) or returns something other than None (outside :data:`CHECK_RETURNS`), one line each."""
    problems = []
    for path in sorted(paths):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("check_")):
                continue
            raised = {
                ast.unparse(r.exc.func if isinstance(r.exc, ast.Call) else r.exc)
                for r in ast.walk(node)
                if isinstance(r, ast.Raise) and r.exc is not None
            }
            returns = ast.unparse(node.returns) if node.returns is not None else "None"
            values = [r for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None]
            expected = CHECK_RETURNS.get(node.name, "None")
            if raised - {"ConfigError"} or returns != expected or (expected == "None" and values):
                problems.append(
                    f"{path.relative_to(root)}:{node.name} raises {sorted(raised)}, returns {returns}"
                    + (f" ({len(values)} return with a value)" if expected == "None" and values else "")
                )
    return problems
