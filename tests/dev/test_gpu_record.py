"""dev/gpu_record.py, the GPU record in one call: the plan against the budget, each step with the time left, a
step past the budget stopped and reported from the steps it logged, the run folders brought back without
checkpoints, the box described, GCPO beside GRPO, and its refusals. The smoke is a stand-in here (a script that
writes what the smoke writes); its checks and comparison are the real ones."""

import dataclasses
import json
import os
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.scripts.load import load_script

record = load_script("gpu_record", "dev")

# What the stand-in smoke does, by FAKE_SMOKE: pass (a finished run and its report), hang (two steps logged and half
# of a third, then nothing until it is stopped), fail (exit 1). Every other command (the checks, the comparison, the
# box's) runs in this Python for real.
FAKE_SMOKE = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path
    args = sys.argv[1:]
    if args[:3] != ["-m", "tests.special_e2e.smoke", "run"]:
        os.execv(sys.executable, [sys.executable, *args])
    shape = args[args.index("--shape") + 1] if "--shape" in args else "tiny"
    estimator = args[args.index("--estimator") + 1]
    base = Path(os.environ["SMOKE_DIR"]) / ("" if shape == "tiny" else shape)
    run = base / estimator
    (run / "ckpt").mkdir(parents=True, exist_ok=True)
    (run / "ckpt" / "model.bin").write_bytes(b"0" * 1000)
    seen = {"argv": args, "timeout": os.environ["SMOKE_RUN_TIMEOUT"], "attention": os.environ.get("SMOKE_ATTN")}
    Path(os.environ["FAKE_ARGS"]).write_text(json.dumps(seen))
    print(f"smoke: shape {shape}: stand-in", flush=True)
    def step(n):
        data = {"training/global_step": n, "timing_s/step": 20.0 + n, "timing_s/gen": 5.0}
        if estimator == "gcpo":
            data["timing_s/gcpo_total"] = 0.2
        return json.dumps({"step": n, "data": data}) + "\\n"
    mode = os.environ["FAKE_SMOKE"]
    with open(run / "metrics_run1.jsonl", "w") as metrics:
        metrics.write(step(1) + step(2))
        metrics.flush()
        if mode == "hang":
            metrics.write(step(3)[:20])
            metrics.flush()
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
            time.sleep(600)
        metrics.write(step(3))
    (run / "log_run1.txt").write_bytes(b"x" * int(os.environ.get("FAKE_LOG_BYTES", "10")))
    if mode == "fail":
        print("[FAIL] gcpo run 1 (to step 3) exited 1", flush=True)
        sys.exit(1)
    if mode == "smoke-timeout":  # the smoke stopped its trainer at its own bound, as run.py says it
        print("[FAIL] gcpo run 1 (to step 3) did not finish in SMOKE_RUN_TIMEOUT=100 s and was stopped", flush=True)
        sys.exit(1)
    summary = {"step_time_s": {"1": 21.0, "2": 22.0, "3": 23.0}, "warmup_steps": [1], "metrics": {}}
    (run / "summary.json").write_text(json.dumps(summary))
    print(f"## Smoke run: {estimator}, device: stand-in\\n\\n[PASS] run 1 metrics\\n\\nsmoke {estimator}: PASSED")
    print("trailing line after the report")
    """
)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    script = tmp_path / "fake_python"
    script.write_text(f"#!{sys.executable}\n{FAKE_SMOKE}")
    script.chmod(0o755)
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "fake_args.json"))
    monkeypatch.setenv("FAKE_SMOKE", "pass")
    monkeypatch.setattr(record, "STOP_GRACE_S", 2)
    return script


def _main(out: Path, *argv: str, python: Path) -> int:
    return record.main(["run", "--out", str(out), "--python", str(python), *argv])


def test_the_plan_places_each_step_by_its_estimate_and_skips_what_would_not_start():
    steps = [record.STEPS[name] for name in ("box", "gcpo-0.6b", "grpo-0.6b")]
    # one 10-minute call: the box leaves too little for a useful qwen3-0.6b run (through step 2)
    assert record.plan_lines(steps[:2], budget_s=540, reserve_s=20)[1] == (
        "plan: gcpo-0.6b: would be skipped (460 s left by then, needs 480)"
    )
    # detached, over two calls: it starts, and is cut at the budget; nothing is left for GRPO
    lines = record.plan_lines(steps, budget_s=760, reserve_s=20)
    assert lines[0] == "plan: box (item 4): 0 s to 60 s"
    assert lines[1] == "plan: gcpo-0.6b (item 1, 2): 60 s to 670 s"
    assert lines[2] == "plan: grpo-0.6b: would be skipped (70 s left by then, needs 470)"
    assert record.plan_lines(steps[1:2], budget_s=500, reserve_s=10)[0].endswith(
        ", cut at the budget (610 s estimated)"
    )


def test_the_smoke_runs_on_the_gpu_with_cuda_graphs_unless_eager(tmp_path):
    args = record.parse_args(["run", "--out", str(tmp_path), "gcpo-0.6b"])
    command = record.smoke_command(record.STEPS["gcpo-0.6b"], args)
    assert command[1:6] == ["-m", "tests.special_e2e.smoke", "run", "--device", "gpu"]
    assert command[6:] == [
        "--shape",
        "qwen3-0.6b",
        "--estimator",
        "gcpo",
        "--steps",
        "3",
        "actor_rollout_ref.rollout.enforce_eager=false",
    ]
    eager = record.parse_args(["run", "--out", str(tmp_path), "--eager", "--dry-run", "gcpo-0.6b", "tiny-uni"])
    assert record.smoke_command(record.STEPS["gcpo-0.6b"], eager)[6:8] == ["--dry-run", "--shape"]
    assert "actor_rollout_ref.rollout.enforce_eager=false" not in record.smoke_command(record.STEPS["gcpo-0.6b"], eager)
    # --eager leaves other overrides: the uni executor stays
    assert record.smoke_command(record.STEPS["tiny-uni"], eager)[-1] == record.UNI_EXECUTOR[0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bogus"], "unknown step(s) bogus; known: box, fa4, gcpo-0.6b"),
        (["box", "box"], "a step named twice: box box"),
        (["--budget", "10", "--reserve", "20", "box"], "--reserve 20 must be positive and below --budget 10"),
        (["--expect-freeze", "/no/such/freeze.txt", "box"], "--expect-freeze /no/such/freeze.txt: no such file"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2_before_anything_runs(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert record.main(["run", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gpu_record: error: ") and message in err[-1]
    assert not out.exists()


def test_a_passing_step_brings_back_its_run_without_checkpoints_and_its_report(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_LOG_BYTES", str(record.MAX_FILE_BYTES + 100))
    out = tmp_path / "out"
    assert _main(out, "--budget", "600", "gcpo-0.6b", python=fake) == 0
    step = out / "gcpo-0.6b"
    assert (step / "summary.json").is_file() and (step / "metrics_run1.jsonl").is_file()
    assert not (step / "ckpt").exists()
    # a log over the limit comes back as its last part, saying so
    log = (step / "log_run1.txt").read_bytes()
    assert log.startswith(b"[first 100 bytes left out]\n") and len(log) < record.MAX_FILE_BYTES + 100
    assert (step / "report.md").read_text().splitlines() == [
        "## Smoke run: gcpo, device: stand-in",
        "",
        "[PASS] run 1 metrics",
        "",
        "smoke gcpo: PASSED",
    ]
    text = (out / "record.md").read_text()
    assert "| gcpo-0.6b | PASS |" in text and "smoke: shape qwen3-0.6b: stand-in" in text
    # what comes back from the device: the record and one archive of the steps' folders, checkpoints left out
    with tarfile.open(out / "record.tar.gz") as archive:
        names = set(archive.getnames())
    assert {"record/record.md", "record/gcpo-0.6b/summary.json", "record/gcpo-0.6b/smoke.log"} <= names
    assert not any("ckpt" in name for name in names)
    assert (out / "done").read_text() == "0\n"
    # the smoke's own run bound sits inside the call's (the step's time left less the grace to stop it)
    assert int(json.loads(Path(os.environ["FAKE_ARGS"]).read_text())["timeout"]) <= 600 - 20 - 2


def test_a_step_past_the_budget_is_stopped_and_reported_from_the_steps_it_logged(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SMOKE", "hang")
    monkeypatch.setitem(record.STEPS, "gcpo-0.6b", dataclasses.replace(record.STEPS["gcpo-0.6b"], useful_s=1))
    out = tmp_path / "out"
    assert _main(out, "--budget", "12", "--reserve", "2", "gcpo-0.6b", python=fake) == 1
    step = out / "gcpo-0.6b"
    # the half-written record is left out; the two whole steps are the smoke's real checks' and report's
    assert len((step / "metrics_run1.jsonl").read_text().splitlines()) == 2
    summary = json.loads((step / "summary.json").read_text())
    assert sorted(summary["step_time_s"]) == ["1", "2"]
    report = (step / "report.md").read_text()
    assert report.startswith("## Smoke run: gcpo") and "smoke gcpo: " in report
    assert "| gcpo-0.6b | TIMEOUT | " in (out / "record.md").read_text()
    assert "2 step(s) logged" in (out / "record.md").read_text()


def test_a_step_without_the_time_it_needs_is_skipped_and_a_failure_fails_the_call(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SMOKE", "fail")
    out = tmp_path / "out"
    assert _main(out, "--budget", "300", "tiny", "gcpo-0.6b", python=fake) == 1
    text = (out / "record.md").read_text()
    assert "| tiny | FAIL | " in text and "exit 1" in text and "[FAIL] gcpo run 1 (to step 3) exited 1" in text
    assert "| gcpo-0.6b | SKIP | 0.0 | " in text and "needs 480" in text


def test_a_run_whose_twin_passed_needs_the_time_its_twin_took_not_the_h100_estimate(tmp_path, fake, monkeypatch):
    # GCPO at 0.6b let in on a small budget; GRPO at the same shape then needs what GCPO's run measured, scaled as
    # its estimate is, not the H100 record's 470 s (it would be skipped with 100 s)
    monkeypatch.setitem(record.STEPS, "gcpo-0.6b", dataclasses.replace(record.STEPS["gcpo-0.6b"], useful_s=1))
    out = tmp_path / "out"
    assert _main(out, "--budget", "100", "--reserve", "2", "gcpo-0.6b", "grpo-0.6b", "tiny", python=fake) == 0
    text = (out / "record.md").read_text()
    assert "| grpo-0.6b | PASS | " in text and "## GCPO beside GRPO, qwen3-0.6b" in text
    assert "| tiny | SKIP | 0.0 | " in text and "needs 260" in text  # a step with no twin keeps its estimate
    gcpo_wall = 60.0
    grpo = record.STEPS["grpo-0.6b"]
    assert record.useful_seconds(grpo, [record.Outcome("gcpo-0.6b", "PASS", gcpo_wall)]) == pytest.approx(47.0)
    assert record.useful_seconds(grpo, [record.Outcome("gcpo-0.6b", "TIMEOUT", gcpo_wall)]) == 470
    assert record.useful_seconds(grpo, [record.Outcome("gcpo-0.6b", "PASS", 6000.0)]) == 470


def test_gcpo_is_put_beside_grpo_when_both_ran_in_the_call(tmp_path, fake):
    out = tmp_path / "out"
    assert _main(out, "--budget", "2000", "gcpo-0.6b", "grpo-0.6b", python=fake) == 0
    text = (out / "record.md").read_text()
    assert "## GCPO beside GRPO, qwen3-0.6b" in text and "| mean of steps 2, 3 | 22.5 | 22.5 | 1 |" in text


def test_the_box_is_described_and_its_freeze_compared(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "IMPORTTIME_MODULES", ("json", "no_such_module_here"))
    expected = tmp_path / "box-freeze.txt"
    expected.write_text("pytest==0.0.1\nno-such-dist==1.0\n")
    out = tmp_path / "out"
    assert record.main(["run", "--out", str(out), "--expect-freeze", str(expected), "box"]) == 0
    lines = (out / "record.md").read_text()
    assert "| box | PASS |" in lines
    assert f"Python {sys.version.split()[0]}, torch " in lines
    assert "pip freeze against box-freeze.txt: 2 of its 2 distributions differ" in lines
    assert "  no-such-dist 1.0 -> (absent)" in lines and f"  pytest 0.0.1 -> {pytest.__version__}" in lines
    assert "import json: " in lines and " s" in lines.split("import json: ")[1].splitlines()[0]
    assert "import no_such_module_here: did not import (ModuleNotFoundError" in lines
    assert (out / "box" / "pip-freeze.txt").read_text().strip()


def test_the_box_freeze_is_the_boxs_own_not_the_bundles_on_pythonpath(tmp_path, monkeypatch):
    # the H200 run of 2026-11-28: with the bundle first on PYTHONPATH, pip listed the bundle's wheels in place of
    # the box's (`name @ file:///...`), and the comparison called the box's versions absent
    monkeypatch.setattr(record, "IMPORTTIME_MODULES", ())
    site = tmp_path / "bundle-site"
    info = site / "pytest-99.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pytest\nVersion: 99.0\n")
    (info / "direct_url.json").write_text('{"url": "file:///wheels/pytest-99.0-py3-none-any.whl", "archive_info": {}}')
    monkeypatch.setenv("PYTHONPATH", str(site))
    expected = tmp_path / "box-freeze.txt"
    expected.write_text(f"pytest=={pytest.__version__}\n")
    out = tmp_path / "out"
    assert record.main(["run", "--out", str(out), "--expect-freeze", str(expected), "box"]) == 0
    assert "pip freeze against box-freeze.txt: 0 of its 1 distributions differ" in (out / "record.md").read_text()
    assert "99.0" not in (out / "box" / "pip-freeze.txt").read_text()


def test_wait_copies_the_record_of_a_run_still_going_then_of_the_finished_one(tmp_path, capsys):
    run, out = tmp_path / "record", tmp_path / "out"
    run.mkdir()
    (run / "record.md").write_text("# GPU record: run\n| box | PASS |\n")
    (run / "record.tar.gz").write_bytes(b"archive")
    log = tmp_path / "record.log"
    log.write_text("gpu_record: box: PASS\n")
    start = time.monotonic()
    assert record.main(["wait", str(run), "--copy-to", str(out), "--wait-s", "0.5", "--log", str(log)]) == 3
    assert 0.5 <= time.monotonic() - start < 5
    assert sorted(p.name for p in out.iterdir()) == ["record.log", "record.md", "record.tar.gz"]
    assert "still running after 0.5 s: wait again" in capsys.readouterr().out
    (run / "done").write_text("1\n")  # the run ended with a failed step: its status is wait's
    assert record.main(["wait", str(run), "--copy-to", str(out), "--wait-s", "60"]) == 1
    assert "| box | PASS |" in capsys.readouterr().out


def test_the_fa4_check_fails_in_one_step_where_its_kernels_are_absent_and_is_only_imported_in_a_rehearsal(tmp_path):
    out = tmp_path / "out"
    assert record.main(["run", "--out", str(out), "fa4"]) == 1  # no flash-attn-4 or CUTLASS DSL here
    text = (out / "record.md").read_text()
    assert "| fa4 | FAIL | " in text and "flash-attn-4: not installed" in text
    assert "ModuleNotFoundError: No module named 'cutlass'" in text
    rehearsal = tmp_path / "rehearsal"
    assert record.main(["run", "--dry-run", "--out", str(rehearsal), "fa4"]) == 0
    assert "| fa4 | PASS | " in (rehearsal / "record.md").read_text()


def test_runs_after_a_failed_fa4_check_fall_back_from_flash_attention_4(tmp_path, fake):
    out = tmp_path / "out"
    argv = ["--budget", "2000", "--attention", "flash_attention_4", "fa4", "tiny-uni"]
    assert _main(out, *argv, python=fake) == 1  # the check fails here (no kernels); the run goes on without them
    text = (out / "record.md").read_text()
    assert (
        "| fa4 | FAIL | " in text and "the runs after it use SMOKE_ATTN=auto" in text and "| tiny-uni | PASS |" in text
    )
    assert json.loads(Path(os.environ["FAKE_ARGS"]).read_text())["attention"] == "auto"


def test_a_run_the_smoke_stopped_at_its_own_bound_is_a_timeout_not_a_failure(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_SMOKE", "smoke-timeout")
    out = tmp_path / "out"
    assert _main(out, "--budget", "2000", "tiny-uni", python=fake) == 1
    text = (out / "record.md").read_text()
    assert "| tiny-uni | TIMEOUT | " in text and "3 step(s) logged" in text and "exit 1" not in text
