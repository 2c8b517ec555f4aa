import hashlib
import json
import os
import stat

import pytest

import experiments.miniature.__main__ as cli
from experiments.miniature.__main__ import main
from experiments.miniature.arms import RunSpec
from experiments.miniature.runner import policy_dir, run_dir
from experiments.miniature.runner import train as train_run
from tests.special_e2e import ROOT

MINIATURE_SCRIPT = ROOT / "scripts" / "miniature.sh"


def train(arm, seed, spec, out, timeout_s, extra=(), python=None, warm_seed=0):
    return train_run(arm, seed, spec, out, timeout_s, extra, python=python, warm_seed=warm_seed)


@pytest.fixture
def fake_python(tmp_path):
    """A python stand-in recording its arguments and environment; STUB_EXIT sets its exit code."""
    script = tmp_path / "python"
    script.write_text(
        "#!/usr/bin/env bash\n"
        'printf \'%s\\n\' "$@" > "$(dirname "$0")/args.txt"\n'
        'env > "$(dirname "$0")/env.txt"\n'
        '[[ -z "${STUB_SLEEP:-}" ]] || sleep "${STUB_SLEEP}"\n'
        'exit "${STUB_EXIT:-0}"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_run_goes_through_main_gcpo_on_the_cpu_platform_and_is_kept_once_done(tmp_path, fake_python, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    out = tmp_path / "out"
    record = train(
        "gcpo_group",
        2,
        RunSpec(steps=3, eval_every=3),
        out,
        60,
        ["trainer.val_before_train=false"],
        python=str(fake_python),
    )
    args = (tmp_path / "args.txt").read_text().splitlines()
    env = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines() if "=" in line)
    assert args[:2] == ["-m", "recipe.gcpo.main_gcpo"] and args[-1] == "trainer.val_before_train=false"
    assert "algorithm.gcpo.credit.all_correct_scale=group" in args and "trainer.total_training_steps=3" in args
    assert env["VERL_PLATFORM"] == "cpu" and env["VERL_USE_EXTERNAL_MODULES"] == "tests.special_e2e.cpu_platform"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)  # the experiment and the platform from the checkout
    assert "RAY_ADDRESS" not in env and env["GCPO_SMOKE_MARKER"].startswith("gcpo-miniature-")
    assert env["VERL_FILE_LOGGER_PATH"] == str(run_dir(out, "gcpo_group", 2) / "metrics.jsonl")
    assert f"actor_rollout_ref.model.path={policy_dir(out, 0)}" in args
    assert record["arm"] == "gcpo_group" and record["seed"] == 2 and record["warm_seed"] == 0
    assert json.loads((run_dir(out, "gcpo_group", 2) / "done.json").read_text()) == record
    (tmp_path / "args.txt").unlink()
    assert train("gcpo_group", 2, RunSpec(steps=3, eval_every=3), out, 60, python=str(fake_python)) == record
    assert not (tmp_path / "args.txt").exists()  # kept, not run again
    again = train("gcpo_group", 2, RunSpec(steps=3, eval_every=3), out, 60, python=str(fake_python), warm_seed=5)
    assert (tmp_path / "args.txt").exists() and again["warm_seed"] == 5  # from another start: trained again
    # which weights a run trained from: unknown without them, else their SHA-256 (pairs runs across experiments)
    assert record["warm_start_sha256"] is None and again["warm_start_sha256"] is None
    policy_dir(out, 6).mkdir(parents=True)
    (policy_dir(out, 6) / "model.safetensors").write_bytes(b"weights")
    third = train("gcpo_group", 2, RunSpec(steps=3, eval_every=3), out, 60, python=str(fake_python), warm_seed=6)
    assert third["warm_start_sha256"] == hashlib.sha256(b"weights").hexdigest()


def test_each_run_records_when_it_started_in_utc(tmp_path, fake_python, monkeypatch):
    from datetime import datetime, timedelta, timezone

    monkeypatch.setenv("STUB_SLEEP", "1.5")
    before = datetime.now(timezone.utc)
    record = train("grpo", 101, RunSpec(steps=3, eval_every=3), tmp_path / "out", 60, python=str(fake_python))
    after = datetime.now(timezone.utc)
    started = datetime.fromisoformat(record["started_at"])  # ISO 8601
    assert started.utcoffset() == timedelta(0)  # in UTC
    # the start, not the end: before the run's 1.5 s (whole seconds, truncated)
    assert before - timedelta(seconds=1) < started <= after - timedelta(seconds=1.5) and record["wall_s"] >= 1.5
    saved = json.loads((run_dir(tmp_path / "out", "grpo", 101) / "done.json").read_text())
    assert saved["started_at"] == record["started_at"] and "warm_start_sha256" in saved


def test_a_failed_or_stopped_run_is_an_error_and_starts_over_next_time(tmp_path, fake_python, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("STUB_EXIT", "3")
    with pytest.raises(RuntimeError, match="grpo seed 1 exited 3"):
        train("grpo", 1, RunSpec(), out, 60, python=str(fake_python))
    assert not (run_dir(out, "grpo", 1) / "done.json").exists()
    monkeypatch.setenv("STUB_EXIT", "0")
    monkeypatch.setenv("STUB_SLEEP", "5")
    with pytest.raises(RuntimeError, match="did not finish in 1 s"):
        train("grpo", 1, RunSpec(), out, 1, python=str(fake_python))
    monkeypatch.delenv("STUB_SLEEP")
    assert train("grpo", 1, RunSpec(), out, 60, python=str(fake_python))["arm"] == "grpo"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--arms", "grpo,ppo"], "--arms must name some of"),
        (["--seeds", "0"], "--seeds must be a positive"),
        (["--steps", "0"], "steps must be a positive"),
        (["--", "not-an-override"], "overrides are key=value"),
        (["--warm-seed", "first"], "must be 'per-seed' or a non-negative integer"),
        (["--warm-seed", "-1"], "non-negative"),
    ],
)
def test_bad_options_are_refused_before_anything_is_built(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--out", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_script_refuses_unknown_options_and_prints_its_usage():
    import subprocess

    usage = subprocess.run(["bash", str(MINIATURE_SCRIPT), "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and "Usage: bash scripts/miniature.sh" in usage.stdout
    bad = subprocess.run(["bash", str(MINIATURE_SCRIPT), "--frob"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown option --frob" in bad.stderr


def test_the_warm_seed_sets_the_warm_starts_seed_and_a_new_seed_builds_a_new_start(tmp_path, monkeypatch):
    built = _fake_warm_starts(monkeypatch)
    out = tmp_path / "out"
    for seed in ("7", "7", "8"):
        assert main(["build", "--out", str(out), "--warm-seed", seed]) == 0
    assert [spec.seed for spec in built] == [7, 8]  # the same seed again keeps the start; another rebuilds it
    assert (policy_dir(out, 7) / "warm_start.json").is_file() and (policy_dir(out, 8) / "warm_start.json").is_file()


def _fake_warm_starts(monkeypatch):
    import experiments.miniature.warm_start as warm_start

    built = []

    def fake_build(out_dir, spec):
        built.append(spec)
        out_dir.mkdir(parents=True, exist_ok=True)
        record = {"spec": __import__("dataclasses").asdict(spec), "heldout": {"accuracy": 0.2, "distinct_correct": 2.0}}
        (out_dir / "warm_start.json").write_text(json.dumps(record))
        return record

    monkeypatch.setattr(warm_start, "build_warm_start", fake_build)
    return built


def _record_training(monkeypatch):
    """Warm starts built and runs trained as records, (spec, ...) and (arm, seed, warm_seed, run spec), no report."""
    import experiments.miniature.runner as runner

    built, trained = _fake_warm_starts(monkeypatch), []
    monkeypatch.setattr(
        runner, "train", lambda arm, seed, spec, *a, warm_seed, **k: trained.append((arm, seed, warm_seed, spec))
    )
    monkeypatch.setattr(cli, "report", lambda out, figures: "")
    return built, trained


@pytest.mark.parametrize("warm_seed, starts", [([], {1: 1, 2: 2, 3: 3}), (["--warm-seed", "4"], {1: 4, 2: 4, 3: 4})])
def test_each_seed_trains_from_its_own_warm_start_unless_one_is_named(tmp_path, monkeypatch, warm_seed, starts):
    built, trained = _record_training(monkeypatch)
    out = tmp_path / "out"
    assert main(["run", "--out", str(out), "--arms", "grpo,gcpo_batch", "--seeds", "3", *warm_seed]) == 0
    assert sorted({spec.seed for spec in built}) == sorted(set(starts.values()))  # each start built once
    assert [run[:3] for run in trained] == [
        (arm, seed, starts[seed]) for seed in (1, 2, 3) for arm in ("grpo", "gcpo_batch")
    ]
    assert all((policy_dir(out, start) / "warm_start.json").is_file() for start in starts.values())


def test_the_default_experiment_is_the_four_ablation_arms_on_four_seeds_each_from_its_own_start(tmp_path, monkeypatch):
    from experiments.miniature.arms import DEFAULT_ARMS as ARMS

    built, trained = _record_training(monkeypatch)
    monkeypatch.setattr(cli, "DOCUMENTED_RESULTS", tmp_path / "absent.json")
    assert main(["run", "--out", str(tmp_path / "out")]) == 0
    assert [run[:3] for run in trained] == [(arm, seed, seed) for seed in (1, 2, 3, 4) for arm in ARMS]
    assert [spec.seed for spec in built] == [1, 2, 3, 4]
    assert {spec for *_, spec in trained} == {RunSpec()}  # the documented budget: 40 steps, evaluated every 10


def test_the_report_says_which_start_each_seed_trained_from():
    from experiments.miniature.report import warm_starts_line

    runs = {
        "grpo": {1: {"warm_seed": 1}, 2: {"warm_seed": 2}},
        "gcpo_batch": {1: {"warm_seed": 1}, 2: {"warm_seed": 2}},
    }
    assert warm_starts_line(runs) == "Warm starts: seed 1 from start 1, seed 2 from start 2."
    runs["gcpo_batch"][2]["warm_seed"] = 0  # arms of one seed from different starts: both named
    assert warm_starts_line(runs) == "Warm starts: seed 1 from start 1, seed 2 from start 0/2."


def test_a_finished_experiment_is_compared_with_the_documented_run_when_the_budgets_match(
    tmp_path, monkeypatch, capsys
):
    from dataclasses import asdict

    import experiments.miniature.runner as runner
    from tests.experiments.miniature.test_report import _write_run

    _fake_warm_starts(monkeypatch)

    def fake_train(arm, seed, spec, out, *args, warm_seed, **kwargs):
        answers = [["tiger", "tiger"], ["tiger", "lion"], ["lion", "wolf"]][seed - 1]
        _write_run(out, arm, seed, {0: {"animal": ["tiger", "x"]}, spec.steps: {"animal": answers}})
        done = run_dir(out, arm, seed) / "done.json"
        done.write_text(json.dumps(json.loads(done.read_text()) | {"warm_seed": warm_seed, "spec": asdict(spec)}))

    monkeypatch.setattr(runner, "train", fake_train)
    reference = tmp_path / "reference"
    assert main(["run", "--out", str(reference), "--arms", "grpo", "--seeds", "3", "--steps", "4"]) == 0
    monkeypatch.setattr(cli, "DOCUMENTED_RESULTS", reference / "results.json")
    capsys.readouterr()

    out = tmp_path / "out"
    assert main(["run", "--out", str(out), "--arms", "grpo", "--seeds", "3", "--steps", "4"]) == 0
    assert "Within the 95 % reproduction interval: 5 of 5" in (out / "reproduction.md").read_text()
    assert (out / "reproduction.md").read_text() in capsys.readouterr().out
    short = tmp_path / "short"  # a CI-sized run is a different budget: said, not compared, and no failure
    assert main(["run", "--out", str(short), "--arms", "grpo", "--seeds", "1", "--steps", "2"]) == 0
    assert "not compared with the documented run (results.json): the runs' budgets differ" in capsys.readouterr().out
    assert not (short / "reproduction.md").exists()


def test_the_first_seed_and_the_eval_samples_reach_every_run_and_each_seed_keeps_its_own_start(tmp_path, monkeypatch):
    """Issue 56's seeds 101-116: ``--first-seed 101 --seeds N`` trains seeds 101..100+N, seed s from warm start s,
    each evaluated with ``--eval-samples`` held-out samples a prompt."""
    built, trained = _record_training(monkeypatch)
    monkeypatch.setattr(cli, "DOCUMENTED_RESULTS", tmp_path / "absent.json")
    argv = ["run", "--out", str(tmp_path / "out"), "--arms", "grpo,gcpo_loo_mix4", "--seeds", "3"]
    assert main([*argv, "--first-seed", "101", "--eval-samples", "64"]) == 0
    assert [run[:3] for run in trained] == [
        (arm, seed, seed) for seed in (101, 102, 103) for arm in ("grpo", "gcpo_loo_mix4")
    ]
    assert [spec.seed for spec in built] == [101, 102, 103]
    assert {spec for *_, spec in trained} == {RunSpec(eval_samples=64)}
    trained.clear()
    assert main([*argv, "--first-seed", "101", "--warm-seed", "7"]) == 0  # one named start still wins
    assert [run[1:3] for run in trained] == [(seed, 7) for seed in (101, 102, 103) for _ in range(2)]
    assert {spec.eval_samples for *_, spec in trained} == {16}  # the default


def test_dump_rollouts_reaches_every_run_as_verls_rollout_dump_and_is_recorded(tmp_path, fake_python, monkeypatch):
    """``run --dump-rollouts`` (issue 72: the all-correct share of every arm, GRPO's included): each run's training
    rollouts go to its own rollouts/ folder through verl's ``trainer.rollout_data_dir``; off unless asked for."""
    out = tmp_path / "out"
    record = train_run(
        "grpo", 3, RunSpec(steps=3, eval_every=3), out, 60, python=str(fake_python), warm_seed=3, dump_rollouts=True
    )
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert f"trainer.rollout_data_dir={run_dir(out, 'grpo', 3) / 'rollouts'}" in args
    assert record["rollouts_dumped"] is True
    plain = train("grpo", 4, RunSpec(steps=3, eval_every=3), out, 60, python=str(fake_python))
    assert not any(a.startswith("trainer.rollout_data_dir=") for a in (tmp_path / "args.txt").read_text().splitlines())
    assert plain["rollouts_dumped"] is False and "rollouts_dumped" not in plain["spec"]  # budgets still compare
    _record_training(monkeypatch)  # fake warm starts and no report
    seen = []
    import experiments.miniature.runner as runner

    monkeypatch.setattr(runner, "train", lambda arm, seed, spec, *a, warm_seed, **k: seen.append(k["dump_rollouts"]))
    monkeypatch.setattr(cli, "DOCUMENTED_RESULTS", tmp_path / "absent.json")
    argv = ["run", "--out", str(tmp_path / "cli"), "--arms", "grpo,gcpo_blend25", "--seeds", "1", "--first-seed", "201"]
    assert main([*argv, "--dump-rollouts"]) == 0 and seen == [True, True]
    seen.clear()
    assert main(argv) == 0 and seen == [False, False]


def test_the_eval_samples_reach_verls_validation_sampling():
    from pathlib import Path

    from experiments.miniature.arms import run_overrides

    args = run_overrides("grpo", 101, RunSpec(eval_samples=64), *(Path(f"/m/{d}") for d in ("d", "p", "r", "ray")))
    assert "actor_rollout_ref.rollout.val_kwargs.n=64" in args and "data.seed=101" in args


@pytest.mark.parametrize(
    "argv, message",
    [(["--first-seed", "-1"], "--first-seed must be a non-negative"), (["--eval-samples", "0"], "eval_samples must")],
)
def test_bad_seed_ranges_and_sample_counts_are_refused(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--out", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_script_takes_the_first_seed_and_the_eval_samples():
    """Known to the script's parser (a missing value is its own error, not an unknown option) and in its usage;
    nothing is run: the value check comes before the CPU environment."""
    import subprocess

    usage = subprocess.run(["bash", str(MINIATURE_SCRIPT), "--help"], capture_output=True, text=True).stdout
    assert "--first-seed S" in usage and "--eval-samples N" in usage
    for option in ("--first-seed", "--eval-samples"):
        bad = subprocess.run(["bash", str(MINIATURE_SCRIPT), option], capture_output=True, text=True)
        assert bad.returncode == 2 and f"error: {option} needs a value" in bad.stderr


def test_the_script_takes_the_rollout_dump_and_the_timeout():
    """The flags issue 72's runs need reach the script's parser: ``--dump-rollouts`` is known (the run goes on to the
    next option, whose missing value is the error) and ``--timeout`` takes a value; nothing is run."""
    import subprocess

    usage = subprocess.run(["bash", str(MINIATURE_SCRIPT), "--help"], capture_output=True, text=True).stdout
    assert "--dump-rollouts" in usage and "--timeout S" in usage
    bad = subprocess.run(
        ["bash", str(MINIATURE_SCRIPT), "--dump-rollouts", "--timeout"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "error: --timeout needs a value" in bad.stderr
    bad = subprocess.run(["bash", str(MINIATURE_SCRIPT), "--dump-rollout"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown option --dump-rollout" in bad.stderr


def test_a_run_from_the_first_seed_is_reported_by_arm_and_seed(tmp_path, monkeypatch):
    from dataclasses import asdict

    import experiments.miniature.runner as runner
    from experiments.miniature.report import collect
    from tests.experiments.miniature.test_report import _write_run

    _fake_warm_starts(monkeypatch)
    monkeypatch.setattr(cli, "DOCUMENTED_RESULTS", tmp_path / "absent.json")

    def fake_train(arm, seed, spec, out, *args, warm_seed, **kwargs):
        _write_run(out, arm, seed, {0: {"animal": ["tiger", "x"]}, spec.steps: {"animal": ["tiger", "lion"]}})
        done = run_dir(out, arm, seed) / "done.json"
        done.write_text(json.dumps(json.loads(done.read_text()) | {"warm_seed": warm_seed, "spec": asdict(spec)}))

    monkeypatch.setattr(runner, "train", fake_train)
    out = tmp_path / "out"
    argv = ["run", "--out", str(out), "--arms", "grpo,gcpo_group", "--seeds", "2", "--first-seed", "101"]
    assert main([*argv, "--steps", "4"]) == 0
    runs = collect(out)
    assert {arm: sorted(seeds) for arm, seeds in runs.items()} == {"grpo": [101, 102], "gcpo_group": [101, 102]}
    assert runs["grpo"][102]["warm_seed"] == 102
    assert "seed 101 from start 101, seed 102 from start 102" in (out / "table.md").read_text()


def test_a_relative_out_folder_reaches_the_runs_as_an_absolute_path(tmp_path, monkeypatch):
    """verl's workers start in other folders, so the start-up refuses a relative model path (the warm start in OUT):
    ``--out`` relative to where the command runs is made absolute before anything is built or trained."""
    import experiments.miniature.runner as runner

    _fake_warm_starts(monkeypatch)
    outs = []
    monkeypatch.setattr(runner, "train", lambda arm, seed, spec, out, *a, **k: outs.append(out))
    monkeypatch.setattr(cli, "report", lambda out, figures: "")
    monkeypatch.setattr(cli, "DOCUMENTED_RESULTS", tmp_path / "absent.json")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--out", "exp", "--arms", "grpo,gcpo_group", "--seeds", "1"]) == 0
    assert outs == [tmp_path / "exp"] * 2 and all(out.is_absolute() for out in outs)
    assert (tmp_path / "exp" / "data").is_dir()
