"""The comparison protocol (docs/protocol.md): every arm's launcher composes, differs from the GCPO run only in
its method's keys, and PROTOCOL=stock / verl-grpo / dapo-recipe set the published recipes' values.

The key-by-key diffs compose each launcher's exact command line in this process (a stub ``python3`` records
what the launcher would run; Hydra then composes it as ``recipe.gcpo.main_gcpo`` does and the entry point's
start-up checks run on it); the new launchers and the stock protocol also go through a real ``--dry-run``.
"""

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from recipe.gcpo.checks import validate
from recipe.gcpo.run_summary import DRY_RUN_MARKER
from tests.recipe.gcpo.conftest import compose_gcpo

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ["-m", "recipe.gcpo.main_gcpo"]
# Every launcher: the keys whose composed values differ from run_qwen3_4b_gcpo.sh's under the same protocol,
# with their values. Nothing else may differ (experiment name and checkpoint folder aside).
ARM_KEYS = {
    "run_qwen3_4b_gcpo.sh": {},
    "run_qwen3_1.7b_gcpo.sh": {
        "actor_rollout_ref.model.path": "Qwen/Qwen3-1.7B-Base",  # and verl's copy of it:
        "actor_rollout_ref.rollout.prometheus.served_model_name": "Qwen/Qwen3-1.7B-Base",
    },
    "run_qwen3_4b_grpo.sh": {"algorithm.adv_estimator": "grpo"},
    "run_qwen3_4b_dapo.sh": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "acc",
    },
    # metric=gcpo_signal is the recipe's default (the launcher sets it anyway, so that it says what it filters on)
    "run_qwen3_4b_gcpo_dynamic.sh": {"algorithm.filter_groups.enable": True},
    "run_qwen3_4b_diver.sh": {"algorithm.adv_estimator": "diver"},
    "run_qwen3_4b_div_r1.sh": {"algorithm.adv_estimator": "grpo", "algorithm.div_r1.enable": True},
    "run_qwen3_4b_dqo.sh": {"algorithm.adv_estimator": "dqo", "algorithm.gcpo.credit.mix_coef": 2.0},
    "run_qwen3_4b_copo.sh": {"algorithm.adv_estimator": "copo"},
    # G + 1 rollouts, G = 8 (and verl's copies of rollout.n)
    "run_qwen3_4b_mc_grpo.sh": {
        "algorithm.adv_estimator": "mc_grpo",
        "actor_rollout_ref.rollout.n": 9,
        "actor_rollout_ref.actor.rollout_n": 9,
        "actor_rollout_ref.ref.rollout_n": 9,
        "critic.rollout_n": 9,
    },
    "run_qwen3_4b_dra_grpo.sh": {"algorithm.adv_estimator": "dra_grpo"},
    "run_qwen3_4b_group_contrastive.sh": {
        "algorithm.adv_estimator": "grpo",
        "algorithm.group_contrastive.enable": True,
        "data.train_files": "/data/gcpo/train_math.parquet",
    },
    "run_qwen3_4b_gcpo_loo.sh": {"algorithm.gcpo.credit.method": "loo"},
    "run_qwen3_4b_gcpo_no_quality.sh": {
        "algorithm.gcpo.credit.quality": "none",
        "algorithm.gcpo.credit.advantage": "mix",
        "algorithm.gcpo.credit.mix_coef": 0.5,
    },
    "run_qwen3_4b_gcpo_bonus.sh": {"algorithm.gcpo.credit.advantage": "mix", "algorithm.gcpo.credit.mix_coef": 0.5},
}
PAPER_ARMS = [
    "run_qwen3_4b_grpo.sh",
    "run_qwen3_4b_dapo.sh",
    "run_qwen3_4b_div_r1.sh",
    "run_qwen3_4b_diver.sh",
    "run_qwen3_4b_dqo.sh",
    "run_qwen3_4b_gcpo_dynamic.sh",
]
NEW_LAUNCHERS = ("run_qwen3_4b_diver.sh", "run_qwen3_4b_div_r1.sh", "run_qwen3_4b_gcpo_dynamic.sh")
INFLIGHT = {"shared": 2, "verl-grpo": 1, "dapo-recipe": 3}  # prompt batches in flight; verl's default: 1
NAMING = {"trainer.experiment_name", "trainer.default_local_dir"}
SIZE_KEY = "reward.reward_kwargs.overlong_buffer_cfg.len"

# verl's stock GRPO example for Qwen3-4B (verl examples/grpo_trainer/run_qwen3_4b_fsdp.sh) and verl's defaults it
# keeps; verl-recipe's DAPO recipe (dapo/run_dapo_qwen2.5_32b.sh)
VERL_GRPO = {
    "data.train_batch_size": 512,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "actor_rollout_ref.rollout.n": 5,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_coef": 0.001,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.2,
    "actor_rollout_ref.actor.clip_ratio_c": 3.0,
    "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.entropy_coeff": 0,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.optim.lr_warmup_steps": -1,
    "actor_rollout_ref.actor.optim.weight_decay": 0.01,
    "algorithm.use_kl_in_reward": False,
    "reward.reward_kwargs.overlong_buffer_cfg.enable": False,
    "data.truncation": "error",
    "actor_rollout_ref.rollout.val_kwargs.temperature": 0,
    "actor_rollout_ref.rollout.val_kwargs.top_p": 1.0,
    "actor_rollout_ref.rollout.val_kwargs.n": 1,
    "trainer.test_freq": 5,
    "trainer.save_freq": 20,
}
DAPO_RECIPE = {
    "data.train_batch_size": 512,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 32,
    "actor_rollout_ref.rollout.n": 16,
    "data.max_prompt_length": 2048,
    "data.max_response_length": 20480,
    "reward.reward_kwargs.max_resp_len": 20480,
    "reward.reward_kwargs.overlong_buffer_cfg.enable": True,
    "reward.reward_kwargs.overlong_buffer_cfg.len": 4096,
    "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,
    "actor_rollout_ref.actor.use_kl_loss": False,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    "actor_rollout_ref.actor.clip_ratio_c": 10.0,
    "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.optim.lr_warmup_steps": 10,
    "actor_rollout_ref.actor.optim.weight_decay": 0.1,
    "actor_rollout_ref.actor.optim.clip_grad": 1.0,
    "actor_rollout_ref.rollout.temperature": 1.0,
    "actor_rollout_ref.rollout.top_p": 1.0,
    "actor_rollout_ref.rollout.val_kwargs.temperature": 1.0,
    "actor_rollout_ref.rollout.val_kwargs.top_p": 0.7,
    "actor_rollout_ref.rollout.val_kwargs.top_k": -1,
    "actor_rollout_ref.rollout.val_kwargs.n": 1,
    "trainer.test_freq": 5,
    "trainer.save_freq": 5,
}


@pytest.fixture(scope="module")
def stub_python(tmp_path_factory):
    """A python3 that prints its arguments, NUL-separated, instead of training."""
    folder = tmp_path_factory.mktemp("stub")
    stub = folder / "python3"
    stub.write_text('#!/usr/bin/env bash\nprintf "%s\\0" "$@"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return folder


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in {"WANDB_API_KEY", "PROTOCOL", "RAY_ADDRESS"}}
    env.update({"DATA_DIR": "/data/gcpo", "EXPERIMENT_NAME": "same"}, **extra)
    return env


def _overrides(script, stub, *args, **env):
    """The Hydra overrides the launcher hands to the entry point."""
    env = _env(**env)
    env["PATH"] = f"{stub}:{env['PATH']}"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    if out.startswith("+ "):  # a launcher's echo of its command
        out = out.split("\n", 1)[1]
    argv = out.split("\0")[:-1]
    assert argv[:2] == ENTRY
    return argv[2:]


def _flat(node, prefix=""):
    out = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _composed(script, stub, *args, **env):
    """The launcher's config, composed and checked as the entry point composes and checks it; flattened."""
    config = compose_gcpo(_overrides(script, stub, *args, **env))
    validate(config)
    return _flat(OmegaConf.to_container(config, resolve=True))


def _diff(a, b):
    return {
        k: (a.get(k, "<absent>"), b.get(k, "<absent>"))
        for k in a.keys() | b.keys()
        if k not in NAMING and a.get(k, "<absent>") != b.get(k, "<absent>")
    }


def _dry_run_output(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return _flat(yaml.safe_load(out.split(DRY_RUN_MARKER, 1)[1].rsplit("# dry run (", 1)[0]))


@pytest.fixture(scope="module")
def dry_runs():
    """Real ``--dry-run``s (the entry point in its own process), started together: the new launchers under the
    shared protocol, and the DAPO launcher under PROTOCOL=stock."""
    runs = [(script, {}) for script in NEW_LAUNCHERS] + [("run_qwen3_4b_dapo.sh", {"PROTOCOL": "stock"})]
    procs = {
        (script, env.get("PROTOCOL", "shared")): subprocess.Popen(
            ["bash", str(ROOT / "scripts" / script), "--dry-run"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(**env),
        )
        for script, env in runs
    }
    return {key: _dry_run_output(proc) for key, proc in procs.items()}


def test_every_launcher_is_listed_with_its_method_keys():
    assert sorted(p.name for p in (ROOT / "scripts").glob("run_*.sh")) == sorted(ARM_KEYS)


@pytest.mark.parametrize(
    "protocol, scripts",
    [
        ("shared", sorted(ARM_KEYS)),
        # the protocol's keys come before the method's: the paper's baselines suffice to show they do not mix
        ("verl-grpo", PAPER_ARMS),
        ("dapo-recipe", PAPER_ARMS),
    ],
)
def test_each_arm_differs_from_gcpo_only_in_its_methods_keys(stub_python, protocol, scripts):
    gcpo = _composed("run_qwen3_4b_gcpo.sh", stub_python, PROTOCOL=protocol)
    for script in scripts:
        keys = dict(ARM_KEYS[script])
        arm = _composed(script, stub_python, PROTOCOL=protocol)
        diff = _diff(gcpo, arm)
        assert {k: new for k, (_, new) in diff.items()} == keys, script


@pytest.mark.parametrize("script", NEW_LAUNCHERS)
def test_the_new_launchers_compose_in_a_real_dry_run(dry_runs, script):
    config = dry_runs[script, "shared"]
    for key, value in ARM_KEYS[script].items():
        assert config[key] == value, key
    assert config["reward.reward_manager.name"] == "dapo"
    assert config["actor_rollout_ref.actor.clip_ratio_high"] == 0.28  # the shared protocol
    if script == "run_qwen3_4b_gcpo_dynamic.sh":
        assert config["algorithm.filter_groups.metric"] == "gcpo_signal"


def test_stock_is_the_dapo_recipe_for_dynamic_sampling_launchers_in_a_real_dry_run(dry_runs):
    config = dry_runs["run_qwen3_4b_dapo.sh", "stock"]
    for key, value in DAPO_RECIPE.items():
        assert config[key] == value, key
    assert (config["algorithm.filter_groups.enable"], config["algorithm.filter_groups.metric"]) == (True, "acc")
    assert config["algorithm.filter_groups.max_inflight_gen_batches"] == 3  # its gen batch 1536 = 3 x 512 prompts


@pytest.mark.parametrize(
    "script, protocol, expected",
    [
        ("run_qwen3_4b_grpo.sh", "stock", VERL_GRPO),
        ("run_qwen3_4b_gcpo.sh", "stock", VERL_GRPO),
        ("run_qwen3_4b_gcpo.sh", "verl-grpo", VERL_GRPO),
        ("run_qwen3_4b_gcpo_dynamic.sh", "stock", DAPO_RECIPE),
        ("run_qwen3_4b_grpo.sh", "dapo-recipe", DAPO_RECIPE),
    ],
)
def test_stock_protocols_set_the_published_values(stub_python, script, protocol, expected):
    config = _composed(script, stub_python, PROTOCOL=protocol)
    for key, value in expected.items():
        assert config[key] == value, key


def test_the_stock_grpo_protocol_has_a_reference_model_for_its_kl_loss(stub_python):
    from verl.trainer.ppo.utils import need_reference_policy

    config = compose_gcpo(_overrides("run_qwen3_4b_grpo.sh", stub_python, PROTOCOL="stock"))
    assert need_reference_policy(config)
    assert config.actor_rollout_ref.ref.log_prob_use_dynamic_bsz is True


def test_the_protocols_trainer_settings_are_a_hydra_group_the_recipe_leaves_unset(stub_python):
    """PROTOCOL chooses recipe/gcpo/config/protocol/<name>.yaml (protocol=<name>, before every other override);
    the entry point alone keeps verl's values; a protocol=<name> on the command line replaces the launcher's
    choice (its trainer settings: the sizes stay the environment's)."""
    overrides = _overrides("run_qwen3_4b_gcpo.sh", stub_python, PROTOCOL="stock")
    assert overrides[0] == "protocol=verl-grpo"
    protocol_keys = set()
    for path in (ROOT / "recipe/gcpo/config/protocol").glob("*.yaml"):
        raw = OmegaConf.load(path)
        raw.pop("defaults", None)
        protocol_keys |= set(_flat(OmegaConf.to_container(raw, resolve=False)))
    assert "actor_rollout_ref.actor.clip_ratio_high" in protocol_keys
    protocol_keys.discard(SIZE_KEY)  # the buffer's length: the protocol's default, the launchers' OVERLONG_BUFFER
    # the group sets them, not the command line (where they would win over the group's choice), in every launcher
    for script in ARM_KEYS:
        for protocol in ("shared", "stock"):
            keys = {o.split("=", 1)[0].lstrip("+") for o in _overrides(script, stub_python, PROTOCOL=protocol)}
            assert protocol_keys.isdisjoint(keys), (script, protocol, protocol_keys & keys)
    verl_defaults = _flat(OmegaConf.to_container(compose_gcpo(["actor_rollout_ref.model.path=m"]), resolve=True))
    shared = _flat(
        OmegaConf.to_container(compose_gcpo(["protocol=shared", "actor_rollout_ref.model.path=m"]), resolve=True)
    )
    assert verl_defaults["actor_rollout_ref.actor.clip_ratio_high"] == 0.2  # verl's own default
    assert shared["actor_rollout_ref.actor.clip_ratio_high"] == 0.28
    chosen = _composed("run_qwen3_4b_gcpo.sh", stub_python, "protocol=verl-grpo")
    assert chosen["actor_rollout_ref.actor.use_kl_loss"] is True and chosen["trainer.save_freq"] == 20
    assert chosen["data.train_batch_size"] == 256  # the shared protocol's size: PROTOCOL sets the sizes


@pytest.mark.parametrize("protocol", sorted(INFLIGHT))
def test_each_protocol_passes_the_start_up_checks_at_the_entry_point_alone(protocol):
    """protocol=<name> without a launcher: the group's reward manager and overlong buffer are complete, with the
    response length a run of the protocol needs (verl's default of 512 is shorter than the buffer)."""
    config = compose_gcpo(
        [
            f"protocol={protocol}",
            "actor_rollout_ref.model.path=Qwen/Qwen3-0.6B",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "data.max_response_length=8192",
            'trainer.logger=["console"]',
        ]
    )
    validate(config)
    assert config.reward.reward_manager.name == "dapo" and config.reward.reward_kwargs.max_resp_len == 8192
    assert config.algorithm.filter_groups.max_inflight_gen_batches == INFLIGHT[protocol]


def test_environment_and_command_line_win_over_the_protocol(stub_python):
    config = _composed(
        "run_qwen3_4b_grpo.sh", stub_python, "actor_rollout_ref.actor.clip_ratio_high=0.3", PROTOCOL="stock", N_RESP="8"
    )
    assert config["actor_rollout_ref.rollout.n"] == 8
    assert config["actor_rollout_ref.actor.clip_ratio_high"] == 0.3
    assert config["data.train_batch_size"] == 512


def test_an_unknown_protocol_is_refused_naming_the_choices(stub_python):
    env = _env(PROTOCOL="grpo")
    env["PATH"] = f"{stub_python}:{env['PATH']}"
    proc = subprocess.run(["bash", str(ROOT / "scripts/run_qwen3_4b_gcpo.sh")], capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    assert "PROTOCOL must be one of shared, verl-grpo, dapo-recipe, stock; got 'grpo'" in proc.stderr
    assert "recipe.gcpo.main_gcpo" not in proc.stdout


def test_readme_lists_the_five_baselines_with_their_sources_and_launchers():
    readme = (ROOT / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `run_")]
    launchers = {re.match(r"\| `(run_[^`]+)`", row).group(1): row for row in rows}
    for script in launchers:
        assert (ROOT / "scripts" / script).is_file(), script
    sources = {  # the paper's five baselines: launcher, how the row names it, its source
        "GRPO": ("run_qwen3_4b_grpo.sh", "arXiv 2402.03300"),
        "DAPO": ("run_qwen3_4b_dapo.sh", "arXiv 2503.14476"),
        "Div-R1": ("run_qwen3_4b_div_r1.sh", "arXiv 2505.23433"),
        "DIVER": ("run_qwen3_4b_diver.sh", "arXiv 2509.26209"),
        "DQO": ("run_qwen3_4b_dqo.sh", "arXiv 2509.04784"),
    }
    for name, (script, source) in sources.items():
        assert script in launchers, name
        assert name in launchers[script] and source in launchers[script], launchers[script]
    assert "our reading" in launchers["run_qwen3_4b_div_r1.sh"]
    gcpo_runs = {"run_qwen3_4b_gcpo.sh", "run_qwen3_1.7b_gcpo.sh"}  # named in the text above the table
    assert set(launchers) == set(ARM_KEYS) - gcpo_runs


def test_protocol_doc_names_every_launcher():
    doc = (ROOT / "docs" / "protocol.md").read_text()
    for script in ARM_KEYS:
        assert script in doc, script


# rows of docs/protocol.md's hyperparameter table: (row label, config key, then per column -- shared, verl GRPO
# example, DAPO recipe -- (composed value under that PROTOCOL, how the cell starts), or None where the protocol
# deliberately does not copy the stock value (the doc says why))
DOC_ROWS = [
    ("`data.train_batch_size` (prompts / step)", "data.train_batch_size", (256, "256"), (512, "512"), (512, "512")),
    ("`actor_rollout_ref.rollout.n`", "actor_rollout_ref.rollout.n", (16, "16"), (5, "5"), (16, "16")),
    (
        "`actor.ppo_mini_batch_size` (prompts / update)",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        (64, "64"),
        (256, "256"),
        (32, "32"),
    ),
    ("`data.max_prompt_length`", "data.max_prompt_length", (2048, "2,048"), None, (2048, "2,048")),
    ("`data.max_response_length`", "data.max_response_length", (8192, "8,192"), None, (20480, "20,480")),
    ("`actor.optim.lr`", "actor_rollout_ref.actor.optim.lr", (1e-6, "1e-6"), (1e-6, "1e-6"), (1e-6, "1e-6")),
    (
        "`actor.optim.lr_warmup_steps`",
        "actor_rollout_ref.actor.optim.lr_warmup_steps",
        (10, "10"),
        (-1, "none"),
        (10, "10"),
    ),
    (
        "`actor.optim.weight_decay`",
        "actor_rollout_ref.actor.optim.weight_decay",
        (0.1, "0.1"),
        (0.01, "0.01"),
        (0.1, "0.1"),
    ),
    (
        "`actor.optim.clip_grad` (gradient norm clip)",
        "actor_rollout_ref.actor.optim.clip_grad",
        (1.0, "1.0"),
        (1.0, "1.0"),
        (1.0, "1.0"),
    ),
    (
        "`actor.clip_ratio_c` (dual clip)",
        "actor_rollout_ref.actor.clip_ratio_c",
        (10.0, "10.0"),
        (3.0, "3.0"),
        (10.0, "10.0"),
    ),
    (
        "`actor.clip_ratio_low` / `clip_ratio_high`",
        "actor_rollout_ref.actor.clip_ratio_high",
        (0.28, "0.2 / 0.28"),
        (0.2, "0.2 / 0.2"),
        (0.28, "0.2 / 0.28"),
    ),
    (
        "`actor.use_kl_loss` / `kl_loss_coef` / `kl_loss_type`",
        "actor_rollout_ref.actor.use_kl_loss",
        (False, "off"),
        (True, "on, 0.001"),
        (False, "off"),
    ),
    (
        "overlong buffer (`reward_kwargs.overlong_buffer_cfg`)",
        "reward.reward_kwargs.overlong_buffer_cfg.enable",
        (True, "on, 4,096"),
        (False, "off"),
        (True, "on, 4,096"),
    ),
    (
        "validation temperature / top-p / n (`rollout.val_kwargs`)",
        "actor_rollout_ref.rollout.val_kwargs.top_p",
        (0.95, "0.6 / 0.95 / 16"),
        (1.0, "greedy (0) / 1.0 / 1"),
        (0.7, "1.0 / 0.7 / 1"),
    ),
    ("`trainer.test_freq` / `save_freq`", "trainer.save_freq", (50, "10 / 50"), (20, "5 / 20"), (5, "5 / 5")),
]


def test_protocol_docs_table_is_what_the_protocols_compose(stub_python):
    doc = (ROOT / "docs" / "protocol.md").read_text()
    rows = {
        cells[0]: cells[1:]
        for cells in (
            [c.strip() for c in line.strip().strip("|").split("|")]
            for line in doc.splitlines()
            if line.startswith("| ")
        )
    }
    configs = [
        _composed("run_qwen3_4b_gcpo.sh", stub_python, PROTOCOL=p) for p in ("shared", "verl-grpo", "dapo-recipe")
    ]
    for label, key, *columns in DOC_ROWS:
        assert label in rows, label
        for column, (config, expected) in enumerate(zip(configs, columns)):
            if expected is None:
                continue
            value, cell = expected
            assert rows[label][column].startswith(cell), (label, column, rows[label][column])
            assert config[key] == value, (label, column)


def test_the_formula_table_names_tests_that_exist():
    """docs/protocol.md's "Every arm, formula by formula": each test it names is a test of this repository."""
    section = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8").split("## Every arm, formula by formula")[1]
    section = section.split("\n## ", 1)[0]
    references = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", section)
    assert len(references) >= 10
    for path, name in references:
        text = (ROOT / path).read_text(encoding="utf-8")
        assert not name or f"def {name}(" in text, f"{path}::{name}"
