"""The front door (verl_preflight/front_door.py) as a user meets it: a command line through the recipe's entry point and
through ``python -m verl_preflight``, on the recipe's config, a user's own and verl's stock one. A fuzz of what Hydra
meets first (malformed YAML of each kind, a config that shadows verl's, overrides shaped like config groups, Hydra's
flags in every place, misspelt keys without a +, values inside lists): each case with its expected outcome, and
zero tracebacks, multi-line reports or run directories in all of them (issue 69)."""

from __future__ import annotations

import contextlib
import io
import os
import random
from pathlib import Path
from typing import NamedTuple, Optional

import pytest
import verl

from recipe.gcpo import main_gcpo
from tests.recipe.gcpo.test_main_gcpo import OWN_CONFIG, VALID
from verl_preflight import __main__ as preflight_cli

SEED = 69
VERL_CONFIG = Path(verl.__file__).resolve().parent / "trainer" / "config"
# verl's config groups: an override named like one chooses a file, not a value
GROUPS = sorted(p.name for p in VERL_CONFIG.iterdir() if p.is_dir() and not p.name.startswith("_"))
STOCK_VALID = [o for o in VALID if not o.startswith("actor_rollout_ref.rollout.n=")] + [
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.rollout.n=4",
]


class Case(NamedTuple):
    """A command line and what it must end in: ``code`` 0 (accepted) or 2 (refused), and a text the one line (or,
    accepted, standard output) must hold."""

    argv: tuple[str, ...]
    code: int
    says: str = ""


def run(cli, argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli(list(argv))
        except SystemExit as stop:
            code = stop.code
    return code, out.getvalue(), err.getvalue()


def malformed_yaml(folder: Path) -> list[Case]:
    """A user's config of each malformed kind: one line naming the file (and the line where YAML has one)."""
    head = OWN_CONFIG
    bodies = {
        "syntax": (head + "trainer: [oops\n", ", line "),
        "tab": (head + "trainer:\n\tproject_name: x\n", ", line 8"),
        "duplicate": (head + "trainer:\n  project_name: x\n  project_name: y\n", "found duplicate key project_name"),
        "two_documents": (head + "trainer:\n  project_name: x\n---\nfoo: 1\n", "but found another document"),
        "python_tag": (head + "trainer:\n  project_name: !!python/object/apply:os.system [x]\n", "python/object/apply"),
        "unclosed_quote": (head + "trainer:\n  project_name: 'x\n", ", line "),
        "bad_indent": (head + "trainer:\n  project_name: x\n experiment_name: y\n", ", line "),
    }
    cases = []
    for name, (text, says) in bodies.items():
        (folder / f"{name}.yaml").write_text(text, encoding="utf-8")
        cases.append(Case(("--config-path", str(folder), "--config-name", name), 2, f"{folder / name}.yaml"))
        cases.append(Case(("--config-path", str(folder), "--config-name", name), 2, says))
    (folder / "latin1.yaml").write_bytes((head + "trainer:\n  project_name: caf\xe9\n").encode("latin-1"))
    (folder / "binary.yaml").write_bytes(bytes(range(200, 256)) * 4)
    for name in ("latin1", "binary"):
        cases.append(Case(("--config-path", str(folder), "--config-name", name), 2, f"{folder / name}.yaml: not UTF-8"))
    return cases


def shadowing(folder: Path) -> list[Case]:
    """A ppo_trainer.yaml of the user's own that extends verl's names itself: refused naming it; one that is an edited
    copy, extended by another file of theirs, is theirs to use (accepted); a null block in a YAML: refused."""
    shadow = folder / "shadow"
    shadow.mkdir()
    (shadow / "ppo_trainer.yaml").write_text(OWN_CONFIG + "trainer:\n  project_name: mine\n")
    null_block = folder / "null_block"
    null_block.mkdir()
    (null_block / "mine.yaml").write_text(OWN_CONFIG + "trainer: null\n")
    return [
        Case(("--config-path", str(shadow), "--config-name", "ppo_trainer"), 2, "which is this file itself"),
        Case(("--config-path", str(null_block), "--config-name", "mine"), 2, "trainer: must be verl's block"),
    ]


def group_shaped(rng: random.Random) -> list[Case]:
    """An override of one of verl's config groups with a value, a missing option, or a + on a chosen one."""
    cases = []
    for group in GROUPS:
        cases.append(Case((f"{group}=null",), 2, f"{group}"))
        cases.append(Case((f"{group}=no_such_option_{rng.randint(0, 99)}",), 2, f"{group}"))
    cases.append(Case(("=5",), 2, "an override is key=value"))
    return cases


HYDRA_FLAGS = (
    (("--resolve",), "--resolve goes with --cfg"),
    (("--package", "trainer"), "--package goes with --cfg"),
    (("--shell-completion",), "Hydra's own"),
    (("-sc",), "Hydra's own"),
    (("--hydra-help",), "Hydra's own"),
    (("--info",), "Hydra's own"),
    (("--info", "defaults"), "Hydra's own"),
    (("--experimental-rerun", "x.pickle"), "Hydra's own"),
    (("--config-dir", "/tmp"), "Hydra's own"),
    (("-m",), "--multirun (-m) is not supported"),
    (("--cfg", "job", "-m"), "--multirun (-m) is not supported"),
    (("--cfg", "bogus"), "invalid choice: 'bogus'"),
    (("--no-such-flag",), "unrecognized arguments: --no-such-flag"),
    (("--version",), "unrecognized arguments: --version"),
    (("--config-path", "/no/such/folder"), "--config-path /no/such/folder: no such folder"),
    (("--config-name", "no_such_config"), "no config no_such_config.yaml"),
)


def hydra_flags(rng: random.Random) -> list[Case]:
    """Hydra's flags, refused or taken, each before, between and after the overrides."""
    cases = []
    for flag, says in HYDRA_FLAGS:
        where = rng.randrange(3)
        cases.append(Case(("__VALID_BEFORE__",) * (where > 0) + flag + ("__VALID_AFTER__",) * (where < 2), 2, says))
    cases += [
        Case(("--cfg", "job", "__VALID_AFTER__"), 0, "actor_rollout_ref:"),
        Case(("__VALID_BEFORE__", "--cfg", "job", "--resolve", "--package", "trainer"), 0, "project_name:"),
        Case(("--cfg", "hydra", "__VALID_AFTER__"), 0, "runtime:"),
        Case(("--help",), 0, "usage: "),
    ]
    return cases


def misspelt_keys(rng: random.Random) -> list[Case]:
    """A typo of a real key, without a +: one line with the key the user meant."""
    keys = (
        "actor_rollout_ref.rollout.temperature",
        "actor_rollout_ref.actor.optim.lr",
        "trainer.total_training_steps",
        "data.max_response_length",
        "algorithm.norm_adv_by_std_in_grpo",
    )
    cases = []
    for key in keys:
        last = key.rsplit(".", 1)[1]
        i = rng.randrange(1, len(last))
        typo = key[: -len(last)] + last[:i] + "x" + last[i:]
        cases.append(Case((f"{typo}=1",), 2, f"did you mean {key}?"))
    return cases


def list_values() -> list[Case]:
    """The elements of verl's lists: refused naming the key, valid ones taken."""
    actor = "actor_rollout_ref.actor"
    return [
        Case((f"{actor}.optim.betas=[0.9]",), 2, f"{actor}.optim.betas: must be 2 values"),
        Case((f"{actor}.optim.betas=[0,0.999]",), 2, f"{actor}.optim.betas: element 0 must be a float in [0, 1)"),
        Case((f"{actor}.optim.betas=[0.9,0.95]",), 0),
        Case((f"{actor}.checkpoint.save_contents=[model,optimzer]",), 2, "did you mean optimizer?"),
        Case((f"{actor}.checkpoint.save_contents=[model,hf_model]",), 0),
        Case(("trainer.logger=[console,null]",), 2, "trainer.logger: must be a list of logger names"),
        Case(("trainer.logger=1",), 2, "trainer.logger: must be a list of logger names"),
        Case(("trainer.logger=[console]",), 0),
    ]


def all_cases(rng: random.Random, folder: Path) -> list[Case]:
    return [
        *malformed_yaml(folder),
        *shadowing(folder),
        *group_shaped(rng),
        *hydra_flags(rng),
        *misspelt_keys(rng),
        *list_values(),
    ]


@pytest.fixture(autouse=True)
def quiet_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GCPO_DRY_RUN", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    for var in ("RAY_ADDRESS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HYDRA_FULL_ERROR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(main_gcpo, "train", lambda config: pytest.fail("a dry run reached training"))


@pytest.mark.parametrize("entry", ["recipe", "stock"])
def test_every_case_ends_in_its_outcome_with_one_line_and_no_traceback(entry, tmp_path):
    """Through the recipe's entry point (its config) and ``python -m verl_preflight`` (verl's stock config)."""
    cli, valid = (main_gcpo.cli, VALID) if entry == "recipe" else (preflight_cli.main, STOCK_VALID)
    folder = tmp_path / "configs"
    folder.mkdir()
    cases = all_cases(random.Random(SEED), folder)
    if entry == "recipe":  # the recipe's config chooses a protocol (none) already
        cases.append(Case(("+protocol=shared",), 2, "drop the +"))
    assert len(cases) >= 70 and {c.code for c in cases} == {0, 2}
    unmet = []
    for case in cases:
        argv = [a for arg in case.argv for a in (valid if arg.startswith("__VALID_") else [arg])]
        if not any(a.startswith("__VALID_") for a in case.argv):  # the overrides a run needs, then the case's
            argv = [*argv[:4], *valid, *argv[4:]] if argv[:1] == ["--config-path"] else [*valid, *argv]
        code, out, err = run(cli, argv)
        lines = [line for line in err.splitlines() if line.strip()]
        problem: Optional[str] = None
        if "Traceback" in err or "Error executing job" in err or "Set the environment variable" in err:
            problem = "a traceback or Hydra's report"
        elif code != case.code:
            problem = f"exit {code}, not {case.code}"
        elif code == 2 and (
            len([t for t in lines if t.startswith("error: ")]) != 1 or not lines[-1].startswith("error:")
        ):
            problem = f"not one line: {lines[-3:]}"
        elif code == 2 and case.says not in lines[-1]:
            problem = f"the line does not say {case.says!r}"
        elif code == 0 and case.says not in out:
            problem = f"standard output does not say {case.says!r}"
        if problem is not None:
            unmet.append(f"{entry}: {' '.join(argv)[-160:]} -> {problem}: {(lines or ['-'])[-1][:300]}")
    assert not unmet, f"{len(unmet)} of {len(cases)}:\n" + "\n".join(unmet)
    written = [p.name for p in tmp_path.iterdir() if p.name != "configs"]
    assert written == [], written  # no run directory, no outputs/


def test_the_stock_checker_takes_verls_example_launcher(tmp_path):
    """verl's examples/grpo_trainer/run_qwen3-8b.sh's overrides (its data and model paths, 8 GPUs): accepted by
    ``python -m verl_preflight``, with what this machine would refuse as warnings; a misspelt one refused."""
    example = [
        "algorithm.adv_estimator=grpo",
        "data.train_files=/root/data/gsm8k/train.parquet",
        "data.val_files=/root/data/gsm8k/test.parquet",
        "data.train_batch_size=1024",
        "data.max_prompt_length=512",
        "data.max_response_length=1024",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        "actor_rollout_ref.model.path=Qwen/Qwen3-8B",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.actor.ppo_mini_batch_size=256",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.rollout.n=5",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.ref.fsdp_config.param_offload=True",
        "algorithm.use_kl_in_reward=False",
        "trainer.critic_warmup=0",
        "trainer.logger=[console,wandb]",
        "trainer.project_name=verl_grpo_example_gsm8k",
        "trainer.experiment_name=qwen3_8b_function_rm",
        "trainer.n_gpus_per_node=8",
        "trainer.nnodes=1",
        "trainer.save_freq=20",
        "trainer.test_freq=5",
        "trainer.total_epochs=15",
    ]
    code, out, err = run(preflight_cli.main, example)
    assert code == 0, err[-2000:]
    assert "passes: algorithm.adv_estimator=grpo" in out and "warning (a run here stops on it)" in out
    code, _, err = run(preflight_cli.main, [*example, "actor_rollout_ref.actor.kl_loss_type=low_var_kll"])
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: actor_rollout_ref.actor.kl_loss_type: must be")


def test_the_stock_checker_is_a_module_a_user_runs(tmp_path):
    """``python -m verl_preflight`` as a process: one line, exit 2, nothing started or written."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    proc = subprocess.run(
        [sys.executable, "-m", "verl_preflight", "actor_rollout_ref.rollout.temprature=0.7"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "error: actor_rollout_ref.rollout.temprature: not a key verl 0.9.1 reads: did you mean "
            "actor_rollout_ref.rollout.temperature?"
        )
    )
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []
