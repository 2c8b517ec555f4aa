"""The smoke run's checks on synthetic runs: metrics written by verl's own file logger, credit dumps written by
the trainer's dump writer from real credit (MiniLM on the CPU), checkpoints laid out as verl lays them out."""

import json

import pytest
from verl.utils.tracking import FileLogger

from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.pipeline import credit_rollouts
from gcpo_core.evaluation.dump import write_credit_dump
from tests.special_e2e.smoke import checks
from tests.special_e2e.smoke.__main__ import main
from tests.special_e2e.smoke.reward import compute_score
from tests.special_e2e.smoke.run import RunDir

N_RESP = 8


def step_metrics(step, gcpo=True, **changes):
    data = {
        "training/global_step": step,
        "timing_s/step": 1.5 + step,
        "timing_s/gen": 0.5,
        "critic/score/mean": 0.0,
        "critic/values/mean": float("nan"),
    }  # verl logs NaN critic values without a critic: not checked
    if gcpo:
        data.update({key: 0.25 for key in checks.REQUIRED_GCPO_METRICS}, **{"gcpo/groups": 3.0})
        # the default all_correct_scale=group: an all-correct push of the order of the mixed one
        data.update({"gcpo/all_correct_adv_abs": 0.76, "gcpo/mixed_adv_abs": 0.79})
    data.update(changes)
    return {k: v for k, v in data.items() if v is not ...}


def write_metrics(path, records, monkeypatch):
    """What verl's file logger writes for ``records`` ({step: metrics})."""
    path.parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = FileLogger("gcpo-smoke", "test")
    for step, data in records.items():
        logger.log(data=data, step=step)
    logger.finish()
    return path


def group_texts(uid):
    return [f"response {k} of prompt {uid}: so the sum is {17 * k + len(uid)} and then {k * k}" for k in range(N_RESP)]


_credited = {}


def write_dump(dump_dir, step, minilm, rates=(0.0, 0.5, 1.0)):
    """A credit dump of one step as the trainer writes it: smoke-reward rewards, real credit (computed once per
    set of rates: every step of a synthetic run has the same rollouts)."""
    if rates not in _credited:
        texts, rewards, uids = [], [], []
        for g, rate in enumerate(rates):
            uid = f"prompt{g}"
            for text in group_texts(uid):
                texts.append(text)
                rewards.append(
                    compute_score("gcpo_smoke", text, "540", extra_info={"smoke_correct_rate": rate})["score"]
                )
                uids.append(uid)
        result = credit_rollouts(
            texts, rewards, uids, minilm, CreditConfig(), expected_group_size=N_RESP, return_embeddings=True, seed=0
        )
        _credited[rates] = (texts, rewards, uids, result)
    texts, rewards, uids, result = _credited[rates]
    return write_credit_dump(dump_dir, step, texts, rewards, uids, [True] * len(texts), result, max_groups=64)


def failed(results):
    return [r for r in results if not r.ok]


# --- metrics ---------------------------------------------------------------------------------------------


def test_metrics_of_every_step_present_and_finite_pass(tmp_path, monkeypatch):
    path = write_metrics(
        tmp_path / "m.jsonl", {0: {"val-core/acc": 0.1}, 1: step_metrics(1), 2: step_metrics(2)}, monkeypatch
    )
    metrics = checks.read_metrics(path)
    assert sorted(metrics) == [1, 2]  # the validation record before training is not a step
    assert metrics[1]["critic/values/mean"] is None  # orjson writes NaN as null
    assert not failed(checks.check_metrics(metrics, [1, 2], gcpo=True, groups_per_step=3))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"gcpo/team_value/mean": float("nan")},
            "not finite: ['gcpo/team_value/mean=None']",
        ),  # orjson writes NaN as null
        ({"timing_s/gcpo_shapley": float("inf")}, "not finite"),
        ({"timing_s/gcpo_total": ...}, "missing ['timing_s/gcpo_total']"),
        ({"gcpo/groups": 2.0}, "gcpo/groups = 2.0, prompts per step = 3"),
        ({"timing_s/step": ...}, "timing_s/step = None"),
    ],
)
def test_a_missing_or_non_finite_gcpo_metric_fails(tmp_path, monkeypatch, change, message):
    path = write_metrics(tmp_path / "m.jsonl", {1: step_metrics(1), 2: step_metrics(2, **change)}, monkeypatch)
    bad = failed(checks.check_metrics(checks.read_metrics(path), [1, 2], gcpo=True, groups_per_step=3))
    assert len(bad) == 1 and bad[0].name.startswith("step 2") and message in bad[0].detail


def test_a_missing_step_fails_and_grpo_needs_no_gcpo_metrics(tmp_path, monkeypatch):
    path = write_metrics(tmp_path / "m.jsonl", {1: step_metrics(1, gcpo=False)}, monkeypatch)
    metrics = checks.read_metrics(path)
    assert not failed(checks.check_metrics(metrics, [1], gcpo=False))
    bad = failed(checks.check_metrics(metrics, [1, 2], gcpo=False))
    assert [r.name for r in bad] == ["steps logged"]
    assert [r.name for r in failed(checks.check_metrics(metrics, [1], gcpo=True))] == ["step 1 gcpo metrics"]


def test_a_line_that_is_not_a_logger_record_is_an_error(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "data": {}}\nnot json\n')
    with pytest.raises(ValueError, match=r"m.jsonl:2: not a verl file-logger record"):
        checks.read_metrics(path)


# --- resume ----------------------------------------------------------------------------------------------


def saved(tmp_path, step):
    (tmp_path / "ckpt" / f"global_step_{step}" / "actor").mkdir(parents=True)
    return tmp_path / "ckpt"


def test_resume_from_the_saved_step_passes(tmp_path):
    first, resumed = {1: step_metrics(1), 2: step_metrics(2)}, {3: step_metrics(3)}
    assert not failed(checks.check_resume(first, resumed, saved(tmp_path, 2), saved_step=2))


def test_a_resumed_run_that_started_from_scratch_fails(tmp_path):
    first, resumed = {1: step_metrics(1), 2: step_metrics(2)}, {s: step_metrics(s) for s in (1, 2, 3)}
    bad = failed(checks.check_resume(first, resumed, saved(tmp_path, 2), saved_step=2))
    assert [r.name for r in bad] == ["resumed from the saved step"]


def test_no_checkpoint_or_a_mislabelled_step_fails(tmp_path):
    first, resumed = {1: step_metrics(1), 2: step_metrics(2)}, {3: step_metrics(3, **{"training/global_step": 1})}
    bad = failed(checks.check_resume(first, resumed, tmp_path / "ckpt", saved_step=2))
    assert [r.name for r in bad] == ["checkpoint saved", "step numbers consistent"]


# --- credit dumps ----------------------------------------------------------------------------------------


def test_real_credit_of_smoke_rewards_passes(tmp_path, minilm):
    for step in (1, 2):
        write_dump(tmp_path, step, minilm)
    results = checks.check_credit_dumps(tmp_path, [1, 2])
    assert not failed(results)
    assert results[-1].detail.startswith("2 all_wrong, 2 mixed, 2 all_correct (")
    correct = int(results[-1].detail.split("(")[1].split()[0])
    assert results[-1].detail.endswith(f"({correct} of 48 rollouts correct)") and 16 < correct < 32


def test_an_all_wrong_group_with_advantage_fails(tmp_path, minilm):
    path = write_dump(tmp_path, 1, minilm)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    wrong = next(r for r in records if max(r["rewards"]) < 0)
    wrong["advantage"][0], wrong["score"][0] = 0.7, 0.3  # what a broken estimator would hand to verl
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    bad = failed(checks.check_credit_dumps(tmp_path, [1]))
    assert len(bad) == 1 and "(all wrong): advantage [0.7" in bad[0].detail and "unequal credit scores" in bad[0].detail


def test_a_wrong_rollout_with_credit_fails(tmp_path, minilm):
    path = write_dump(tmp_path, 1, minilm)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    mixed = next(r for r in records if 0 < sum(q > 0 for q in r["quality"]) < N_RESP)
    mixed["shapley"][mixed["quality"].index(0.0)] = 0.1
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    bad = failed(checks.check_credit_dumps(tmp_path, [1]))
    assert len(bad) == 1 and "a wrong rollout got Shapley credit" in bad[0].detail


def test_a_run_without_all_wrong_groups_or_without_its_dump_fails(tmp_path, minilm):
    write_dump(tmp_path, 1, minilm, rates=(0.5, 1.0))
    bad = failed(checks.check_credit_dumps(tmp_path, [1, 2]))
    assert [r.name for r in bad] == ["step 2 credit dump", "group kinds occurred"]
    assert "none ['all_wrong']" in bad[1].detail


# --- the command the script calls --------------------------------------------------------------------------


def synthetic_run(root, monkeypatch, minilm=None, resumed_steps=(3,)):
    run = RunDir(root)
    write_metrics(run.metrics(1), {1: step_metrics(1), 2: step_metrics(2)}, monkeypatch)
    write_metrics(run.metrics(2), {s: step_metrics(s) for s in resumed_steps}, monkeypatch)
    saved(root, 2)
    run.wall(1).write_text("30.0\n")
    run.wall(2).write_text("20.0\n")
    run.gpu_memory(1).write_text(
        json.dumps(
            {
                "samples": 3,
                "processes": [
                    {"pid": 7, "peak_mib": 2048.0, "name": "ray::WorkerDict"},
                    {"pid": 8, "peak_mib": 600.0, "name": "ray::CreditWorker"},
                ],
            }
        )
    )
    if minilm is not None:
        for step in (1, 2, 3):
            write_dump(run.dumps, step, minilm)
    return run


def test_check_command_passes_a_good_run_and_writes_its_summary(tmp_path, monkeypatch, minilm, capsys):
    run = synthetic_run(tmp_path, monkeypatch, minilm)
    assert (
        main(["check", "--run-dir", str(tmp_path), "--estimator", "gcpo", "--steps", "2", "--groups-per-step", "3"])
        == 0
    )
    out = capsys.readouterr().out
    assert "[FAIL]" not in out and "smoke gcpo: PASSED" in out
    assert "| 1 | 1, 2 | 30 | 24 |" in out  # 30 s wall - (2.5 + 3.5) s of steps
    assert "| run 1 | 7 | 2048 | ray::WorkerDict |" in out
    assert "| generation | 0.5 | 0.5 | 0.5 |" in out and "| credit (in advantage) | 0.25 | 0.25 | 0.25 |" in out
    assert "| gcpo/groups | 3 | 3 | 3 |" in out  # the metrics table
    summary = json.loads(run.summary.read_text())
    assert summary["ok"] and summary["step_time_s"] == {"1": 2.5, "2": 3.5, "3": 4.5}


def test_check_command_fails_a_run_that_did_not_resume(tmp_path, monkeypatch, minilm, capsys):
    synthetic_run(tmp_path, monkeypatch, minilm, resumed_steps=(1, 2, 3))
    assert main(["check", "--run-dir", str(tmp_path), "--estimator", "gcpo", "--steps", "2"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] resumed from the saved step: expected [3], logged [1, 2, 3]" in out and "FAILED" in out


def checked_and_compared(tmp_path, monkeypatch, minilm, capsys, resumed_grpo_step_s=2.0) -> str:
    """A synthetic GCPO run and a GRPO run (2 s a step; the resumed step as given), both checked, then compared:
    the comparison's output."""
    synthetic_run(tmp_path / "gcpo", monkeypatch, minilm)
    grpo = RunDir(tmp_path / "grpo")
    write_metrics(
        grpo.metrics(1), {s: step_metrics(s, gcpo=False, **{"timing_s/step": 2.0}) for s in (1, 2)}, monkeypatch
    )
    write_metrics(
        grpo.metrics(2), {3: step_metrics(3, gcpo=False, **{"timing_s/step": resumed_grpo_step_s})}, monkeypatch
    )
    saved(grpo.root, 2)
    for name in ("gcpo", "grpo"):
        assert main(["check", "--run-dir", str(tmp_path / name), "--estimator", name, "--steps", "2"]) == 0
    capsys.readouterr()
    assert main(["compare", "--gcpo", str(tmp_path / "gcpo"), "--grpo", str(tmp_path / "grpo")]) == 0
    return capsys.readouterr().out


def test_grpo_is_checked_without_credit_dumps_and_compared_with_gcpo(tmp_path, monkeypatch, minilm, capsys):
    out = checked_and_compared(tmp_path, monkeypatch, minilm, capsys)
    assert "| step 2 | 3.5 | 2 | 1.75 |" in out and "| mean of steps 2 | 3.5 | 2 | 1.75 |" in out


def test_compare_without_a_finished_run_is_a_clear_error(tmp_path, capsys):
    assert main(["compare", "--gcpo", str(tmp_path / "gcpo"), "--grpo", str(tmp_path / "grpo")]) == 2
    assert "summary.json not found (run the gcpo smoke first)" in capsys.readouterr().err


# --- the CPU smoke's additions: clean output, faults, launchers, steady-state comparison -----------------------


def test_a_traceback_or_a_killed_loader_worker_fails_the_clean_output_check(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("step:1 - ok\nall done\n")
    assert checks.check_clean_log(log).ok
    log.write_text(
        "step:2\nRuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly\n"
        "  ... is killed by signal: Killed.\n"
    )
    result = checks.check_clean_log(log)
    assert not result.ok and "is killed by signal" in result.detail
    log.write_text("Traceback (most recent call last):\n  File x\n")
    assert not checks.check_clean_log(log).ok
    assert not checks.check_clean_log(tmp_path / "absent.txt").ok


# what a run printed when Ray stopped TransferQueue's storage units at its end (CPU smoke, 2026-11-26): Python
# ignores the SystemExit that Ray's SIGTERM handler raised inside a ZMQ socket's __del__
SHUTDOWN_NOISE = """\
\x1b[36m(SimpleStorageUnit pid=11393)\x1b[0m Exception ignored in: <function Socket.__del__ at 0x7fb73de3f560>
\x1b[36m(SimpleStorageUnit pid=11393)\x1b[0m Traceback (most recent call last):
\x1b[36m(GCPOTaskRunner pid=11215)\x1b[0m 'Final validation metrics: None'
\x1b[36m(SimpleStorageUnit pid=11393)\x1b[0m   File "zmq/sugar/socket.py", line 186, in __del__
\x1b[36m(SimpleStorageUnit pid=11393)\x1b[0m   File "ray/_private/worker.py", line 1063, in sigterm_handler
\x1b[36m(SimpleStorageUnit pid=11393)\x1b[0m     raise_sys_exit_with_custom_error_message(
\x1b[36m(SimpleStorageUnit pid=11393)\x1b[0m SystemExit: 1
\x1b[36m(SimpleStorageUnit pid=11536)\x1b[0m Exception ignored in: <function Socket.__del__> [repeated 2x across cluster]
\x1b[36m(SimpleStorageUnit pid=11536)\x1b[0m Traceback (most recent call last): [repeated 2x across cluster]
\x1b[36m(SimpleStorageUnit pid=11536)\x1b[0m   File "ray/_private/worker.py", in sigterm_handler [repeated 2x across cluster]
\x1b[36m(SimpleStorageUnit pid=11536)\x1b[0m SystemExit: 1 [repeated 2x across cluster]
"""


def _clean(tmp_path, text, **kwargs):
    """Does a run whose output is ``text`` pass the clean-output check?"""
    log = tmp_path / "log.txt"
    log.write_text(text)
    return checks.check_clean_log(log, **kwargs).ok


def test_a_traceback_python_ignored_at_shutdown_after_rays_sigterm_is_not_a_failure(tmp_path):
    assert _clean(tmp_path, SHUTDOWN_NOISE)
    # any other exception in the same place is a failure
    assert not _clean(tmp_path, SHUTDOWN_NOISE.replace("SystemExit: 1 [repeated", "RuntimeError: boom [repeated"))
    # a SystemExit that Ray's SIGTERM handler did not raise, or one Python did not ignore, too
    assert not _clean(tmp_path, SHUTDOWN_NOISE.replace("in sigterm_handler [repeated", "in run [repeated"))
    assert not _clean(tmp_path, SHUTDOWN_NOISE.replace("Exception ignored in: <function Socket.__del__ at", "Oops at"))


# what the GRPO side of a CPU smoke printed after its fit finished (2026-11-27): Ray stopped vLLM's engine-core
# process before its HTTP server, whose output handler then reported the engine dead
ENGINE_TEARDOWN = """\
\x1b[36m(GCPOTaskRunner pid=27470)\x1b[0m 'Final validation metrics: None'
\x1b[36m(vLLMHttpServer pid=27831)\x1b[0m WARNING 11-27 01:18:00 [core_client.py:702] [shutdown] MPClient: engine core \
exited unexpectedly; starting cleanup
\x1b[36m(vLLMHttpServer pid=27831)\x1b[0m ERROR 11-27 01:18:00 [async_llm.py:704] AsyncLLM output_handler failed.
\x1b[36m(vLLMHttpServer pid=27831)\x1b[0m ERROR 11-27 01:18:00 [async_llm.py:704] Traceback (most recent call last):
\x1b[36m(vLLMHttpServer pid=27831)\x1b[0m ERROR 11-27 01:18:00 [async_llm.py:704]   File "vllm/v1/engine/async_llm.py", \
line 660, in output_handler
\x1b[36m(SimpleStorageUnit pid=27566)\x1b[0m 2026-11-27 01:17:59,098 - WARNING - transfer_queue.utils.common - threads
\x1b[36m(vLLMHttpServer pid=27831)\x1b[0m ERROR 11-27 01:18:00 [async_llm.py:704]     raise self._format_exception(outputs)
\x1b[36m(vLLMHttpServer pid=27831)\x1b[0m ERROR 11-27 01:18:00 [async_llm.py:704] vllm.v1.engine.exceptions.EngineDeadError: \
EngineCore encountered an issue. See stack trace (above) for the root cause.
"""


def test_vllms_engine_teardown_after_a_finished_fit_is_not_a_failure_and_nothing_else_is(tmp_path):
    assert _clean(tmp_path, ENGINE_TEARDOWN)
    assert _clean(tmp_path, ENGINE_TEARDOWN, markers=checks.UNCLEAN_JOB_MARKERS)  # the Slurm job's markers too
    # before the fit finished the engine's death is a failure
    assert not _clean(tmp_path, ENGINE_TEARDOWN.replace("'Final validation metrics: None'", "step:2 - done"))
    # another exception after the notice, or the traceback without vLLM's own shutdown notice, too
    assert not _clean(tmp_path, ENGINE_TEARDOWN.replace("vllm.v1.engine.exceptions.EngineDeadError:", "RuntimeError:"))
    assert not _clean(tmp_path, ENGINE_TEARDOWN.replace("[shutdown] MPClient", "MPClient"))
    # a traceback of another process after the finish stays a failure
    other = (
        "\x1b[36m(WorkerDict pid=1)\x1b[0m Traceback (most recent call last):\n\x1b[36m(WorkerDict pid=1)\x1b[0m "
        + ("vllm.v1.engine.exceptions.EngineDeadError: x\n")
    )
    assert not _clean(tmp_path, ENGINE_TEARDOWN + other)


def test_the_check_command_fails_a_run_that_printed_a_traceback(tmp_path, monkeypatch, minilm, capsys):
    run = synthetic_run(tmp_path, monkeypatch, minilm)
    (run.root / "log_run1.txt").write_text("fine\n")
    (run.root / "log_run2.txt").write_text("Traceback (most recent call last):\n")
    assert main(["check", "--run-dir", str(tmp_path), "--estimator", "gcpo", "--steps", "2"]) == 1
    assert "[FAIL] clean output" in capsys.readouterr().out


def fault_record(target, after=1, killed=(4242,)):
    return {"target": target, "after_step": after, "killed": [{"pid": p, "title": "ray::X"} for p in killed]}


def test_a_credit_fault_passes_when_later_steps_kept_their_credit():
    run = {s: step_metrics(s) for s in (1, 2, 3)}
    assert not failed(checks.check_fault("credit", fault_record("credit"), run, 3, gcpo=True, log="x"))
    del run[3]["gcpo/groups"]
    (bad,) = failed(checks.check_fault("credit", fault_record("credit"), run, 3, gcpo=True, log="x"))
    assert bad.name == "credit after the restart" and "[2] of [2, 3]" in bad.detail


def test_a_fault_that_found_nothing_or_a_run_that_stopped_fails():
    run = {s: step_metrics(s, gcpo=False) for s in (1, 2)}
    (bad,) = failed(checks.check_fault("reward", fault_record("reward", killed=()), run, 2, gcpo=False, log="x"))
    assert bad.name == "reward fault injected"
    names = [r.name for r in failed(checks.check_fault("reward", fault_record("reward"), {1: run[1]}, 2, False, "x"))]
    assert names == ["steps after the reward fault", "scores after the fault"]
    (never,) = checks.check_fault("reward", None, run, 2, gcpo=False, log="x")
    assert not never.ok and "never reached" in never.detail


def test_a_reward_fault_needs_finite_scores_after_it():
    run = {s: step_metrics(s, gcpo=False) for s in (1, 2)}
    assert not failed(checks.check_fault("reward", fault_record("reward"), run, 2, gcpo=False, log="x"))
    run[2]["critic/score/mean"] = float("nan")
    assert [r.name for r in failed(checks.check_fault("reward", fault_record("reward"), run, 2, False, "x"))] == [
        "scores after the fault"
    ]


def launcher_run(root, monkeypatch, steps=2, validation=(0, 2), log="done\n", gcpo=True, minilm=None, penalty=0.5):
    """A launcher smoke's run folder; with ``minilm``, the credit dumps of the smoke's prompts under ``penalty``."""
    if minilm is not None:
        for step in range(1, steps + 1):
            write_penalised_dump(root / "gcpo_dumps", step, minilm, penalty)
    records = {}
    for step in validation:
        records.setdefault(step, {})["val-core/aime24/acc/mean@1"] = 0.0
    write_metrics(root / "metrics_run1.jsonl", {}, monkeypatch)
    logger_records = [(s, step_metrics(s, gcpo=gcpo)) for s in range(1, steps + 1)]
    logger_records += [(s, d) for s, d in records.items()]
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(root / "metrics_run1.jsonl"))
    logger = FileLogger("gcpo-smoke", "test")
    for step, data in sorted(logger_records, key=lambda r: r[0]):
        logger.log(data=data, step=step)
    logger.finish()
    (root / "log_run1.txt").write_text(log)
    (root / "ckpt" / f"global_step_{steps}" / "actor").mkdir(parents=True)


def test_a_launcher_run_with_validation_checkpoint_and_clean_output_passes(tmp_path, monkeypatch, capsys, minilm):
    launcher_run(tmp_path, monkeypatch, minilm=minilm)
    assert (
        main(["check-launcher", "--run-dir", str(tmp_path), "--launcher", "run_qwen3_4b_gcpo.sh", "--steps", "2"]) == 0
    )
    out = capsys.readouterr().out
    assert "launcher smoke run_qwen3_4b_gcpo.sh: PASSED" in out and "step 2 gcpo metrics" in out
    assert "[PASS] non-zero credit: all-correct groups" in out
    assert json.loads((tmp_path / "summary.json").read_text())["ok"]


def test_a_gcpo_launcher_run_whose_credit_is_all_zero_fails(tmp_path, monkeypatch, capsys, minilm):
    """The launcher smoke at the launchers' full overlong penalty: every correct answer scored 0."""
    launcher_run(tmp_path, monkeypatch, minilm=minilm, penalty=1.0)
    assert (
        main(["check-launcher", "--run-dir", str(tmp_path), "--launcher", "run_qwen3_4b_gcpo.sh", "--steps", "2"]) == 1
    )
    assert "[FAIL] non-zero credit: mixed groups: 0 of" in capsys.readouterr().out


def test_a_launcher_run_without_final_validation_or_with_a_traceback_fails(tmp_path, monkeypatch, capsys):
    launcher_run(tmp_path / "a", monkeypatch, validation=(0,))
    assert (
        main(["check-launcher", "--run-dir", str(tmp_path / "a"), "--launcher", "run_qwen3_4b_grpo.sh", "--steps", "2"])
        == 1
    )
    assert "[FAIL] validation before and after training: validation logged at steps [0]" in capsys.readouterr().out
    launcher_run(
        tmp_path / "b",
        monkeypatch,
        gcpo=False,
        log="x\nRuntimeError: DataLoader worker (pid 9) is killed by signal: Killed.\n",
    )
    assert (
        main(["check-launcher", "--run-dir", str(tmp_path / "b"), "--launcher", "run_qwen3_4b_grpo.sh", "--steps", "2"])
        == 1
    )
    assert "[FAIL] clean output" in capsys.readouterr().out


def test_a_gcpo_launcher_needs_gcpo_metrics_a_grpo_one_does_not(tmp_path, monkeypatch, capsys):
    launcher_run(tmp_path, monkeypatch, gcpo=False)
    assert (
        main(["check-launcher", "--run-dir", str(tmp_path), "--launcher", "run_qwen3_4b_grpo.sh", "--steps", "2"]) == 0
    )
    assert (
        main(["check-launcher", "--run-dir", str(tmp_path), "--launcher", "run_qwen3_4b_gcpo_loo.sh", "--steps", "2"])
        == 1
    )
    assert "missing ['gcpo/groups'" in capsys.readouterr().out


def test_a_copo_launcher_needs_both_loss_terms_at_some_step():
    def step(local, global_, **more):
        return {"copo/local_adv_abs": local, "copo/global_adv_abs": global_, "actor/copo_global_pg_loss": 0.1} | more

    assert checks.check_copo_loss({1: step(0.0, 0.0), 2: step(0.3, 0.5)}, [1, 2]).ok
    zero = checks.check_copo_loss({1: step(0.0, 0.0), 2: step(0.0, 0.4)}, [1, 2])
    assert not zero.ok and "every advantage was 0" in zero.detail
    lacking = checks.check_copo_loss({1: step(0.3, 0.5), 2: {"copo/local_adv_abs": 0.3}}, [1, 2])
    assert not lacking.ok and "step 2 lacks copo/global_adv_abs, actor/copo_global_pg_loss" in lacking.detail


def test_the_copo_launcher_is_checked_for_its_loss(tmp_path, monkeypatch, capsys):
    launcher_run(tmp_path, monkeypatch, gcpo=False)
    assert (
        main(["check-launcher", "--run-dir", str(tmp_path), "--launcher", "run_qwen3_4b_copo.sh", "--steps", "2"]) == 1
    )
    assert "[FAIL] COPO's blended loss: step 1 lacks copo/local_adv_abs" in capsys.readouterr().out


def test_compare_leaves_each_process_first_step_out_of_the_mean(tmp_path, monkeypatch, minilm, capsys):
    out = checked_and_compared(tmp_path, monkeypatch, minilm, capsys, resumed_grpo_step_s=9.0)
    assert "| step 1 (warm-up) | 2.5 | 2 | 1.25 |" in out and "| step 3 (warm-up) | 4.5 | 9 | 0.5 |" in out
    assert "| mean of steps 2 | 3.5 | 2 | 1.75 |" in out
    assert "| generation | 0.5 | 0.5 | 1 |" in out  # where the time goes, steady-state steps only


def test_a_fault_that_cost_rollouts_fails_even_when_the_run_went_on():
    """verl 0.9.1 does not restart a killed reward worker: the rollouts sent to it fail and verl pads their rows."""
    run = {s: step_metrics(s, **{"gcpo/excluded_rows": 0.0}) for s in (1, 2, 3)}
    assert not failed(checks.check_fault("reward", fault_record("reward", after=2), run, 3, gcpo=True, log="x"))
    run[3]["gcpo/excluded_rows"] = 13.0
    (bad,) = failed(checks.check_fault("reward", fault_record("reward", after=2), run, 3, gcpo=True, log="x"))
    assert bad.name == "complete batches after the reward fault" and "step 3: 13 rollouts lost" in bad.detail


def test_a_later_fault_is_not_blamed_on_an_earlier_one():
    run = {s: step_metrics(s, **{"gcpo/excluded_rows": 0.0}) for s in (1, 2, 3)}
    run[3]["gcpo/excluded_rows"] = 13.0  # lost to a reward fault after step 2
    credit = checks.check_fault(
        "credit", fault_record("credit", after=1), run, 3, gcpo=True, log="x", next_fault_after=2
    )
    assert not failed(credit) and "steps [2]: no rollout lost" in credit[-1].detail


# --- non-zero credit (the launcher and cluster smokes) -------------------------------------------------------


def write_penalised_dump(dump_dir, step, minilm, penalty):
    """A step of the smoke's three prompts as DAPO's reward manager scores them when every response reaches the
    length limit: the smoke reward's +1 / -1 minus the whole overlong penalty."""
    texts, rewards, uids = [], [], []
    for g, rate in enumerate((0.0, 0.5, 1.0)):
        for text in group_texts(f"prompt{g}"):
            texts.append(text)
            score = compute_score("gcpo_smoke", text, "540", extra_info={"smoke_correct_rate": rate})["score"]
            rewards.append(score - penalty)
            uids.append(f"prompt{g}")
    result = credit_rollouts(texts, rewards, uids, minilm, CreditConfig(), expected_group_size=N_RESP, seed=0)
    return write_credit_dump(dump_dir, step, texts, rewards, uids, [True] * len(texts), result, max_groups=64)


def test_credit_that_pushes_mixed_and_all_correct_groups_passes(tmp_path, minilm):
    write_penalised_dump(tmp_path, 1, minilm, penalty=0.5)  # the smokes' penalty: correct answers keep 0.5
    results = checks.check_credit_signal(tmp_path, [1])
    assert not failed(results), results
    assert results[1].detail.startswith("1 of 1 all-correct groups")


def test_credit_on_zeros_fails(tmp_path, minilm):
    """The launchers' full penalty: a correct answer's reward is 1 - 1 = 0, every quality 0, every credit 0 --
    what the launcher smoke checked before, and passed."""
    write_penalised_dump(tmp_path, 1, minilm, penalty=1.0)
    assert not failed(checks.check_credit_dumps(tmp_path, [1])[:1])  # the older checks still pass on zeros
    bad = failed(checks.check_credit_signal(tmp_path, [1]))
    assert [r.name for r in bad] == [
        "non-zero credit: mixed groups",
        "non-zero credit: all-correct groups",
        "positive Shapley credit of correct rollouts",
    ]


def test_no_dump_is_no_credit(tmp_path):
    assert len(failed(checks.check_credit_signal(tmp_path, [1, 2]))) == 3


# --- the cluster smoke's checks -----------------------------------------------------------------------------


def test_a_checkpoint_needs_every_ranks_shards(tmp_path):
    actor = tmp_path / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        (actor / f"{kind}_world_size_2_rank_0.pt").write_bytes(b"x")
    bad = checks.check_checkpoint_ranks(tmp_path, 2, 2)
    assert not bad.ok and "model_world_size_2_rank_1.pt" in bad.detail
    for kind in ("model", "optim", "extra_state"):
        (actor / f"{kind}_world_size_2_rank_1.pt").write_bytes(b"x")
    assert checks.check_checkpoint_ranks(tmp_path, 2, 2).ok
    assert not checks.check_checkpoint_ranks(tmp_path, 3, 2).ok


@pytest.mark.parametrize(
    "state, exit_code, ok",
    [("COMPLETED", "0:0", True), ("FAILED", "1:0", False), ("COMPLETED", "0:9", False), ("CANCELLED", "0:15", False)],
)
def test_a_job_passes_only_completed_with_exit_zero(state, exit_code, ok):
    assert checks.check_job("train", state, exit_code).ok is ok


def test_actors_must_run_on_every_node():
    names = {"10.0.0.1": "n1", "10.0.0.2": "n2"}
    everywhere = {role: {"10.0.0.1": 1, "10.0.0.2": 1} for role in checks.PLACED_ON_EVERY_NODE}
    assert not failed(checks.check_actor_placement(everywhere, names))
    one_node = {**everywhere, "credit-actor shards": {"10.0.0.1": 2}}
    bad = failed(checks.check_actor_placement(one_node, names))
    assert [r.name for r in bad] == ["credit-actor shards on every node"] and "none on ['n2']" in bad[0].detail
    (nothing,) = checks.check_actor_placement({}, names, "ServerUnavailable: no dashboard")
    assert not nothing.ok and "no dashboard" in nothing.detail


def test_a_node_loss_must_end_the_job_in_time_with_one_line_naming_the_node(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(
        "step:1 ...\nnode gcpo-n2 left the job: Ray has its node (10.0.0.2) as dead; the run stops here\n"
        "Traceback (most recent call last):\n"
    )
    kill = {"node": "gcpo-n2", "time": 1000.0}
    assert not failed(checks.check_node_loss("FAILED", 1077.6, kill, log, bound_s=300))
    late, _ = checks.check_node_loss("FAILED", 1400.0, kill, log, bound_s=300)
    assert not late.ok and "400.0 s after gcpo-n2 crashed" in late.detail
    assert not checks.check_node_loss("COMPLETED", 1010.0, kill, log, bound_s=300)[0].ok
    log.write_text("the job went on\n")
    assert not checks.check_node_loss("FAILED", 1010.0, kill, log, bound_s=300)[1].ok
    assert not checks.check_node_loss("RUNNING", 0.0, kill, log, bound_s=300)[0].ok  # never ended


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: gcpo-n2: task 0: Exited with exit code 1",
        "2026-11-26 04:31:28,083\tERR scripts.py:1315 -- Remaining processes will be killed.",
        "slurmstepd: error: *** STEP 3.2 CANCELLED ***",
        "node gcpo-n2 left the job: its Ray ended (exit 1) during the run",
    ],
)
def test_a_job_log_with_a_line_that_reads_as_a_failure_is_not_clean(tmp_path, line):
    log = tmp_path / "job.log"
    log.write_text(f"all nodes joined\n{line}\n")
    assert not checks.check_clean_log(log, markers=checks.UNCLEAN_JOB_MARKERS).ok
    assert checks.check_clean_log(log).ok  # a one-node run's log does not have them


def test_a_logged_gcpo_metric_missing_from_the_glossary_fails(tmp_path):
    glossary = tmp_path / "metrics.md"
    glossary.write_text(
        "| metric | what |\n|---|---|\n| `gcpo/groups` | prompts |\n"
        "| `gcpo/team_value/mean`, `gcpo/team_value/max` | V |\n"
    )
    assert checks.glossary_metrics(glossary) == {"gcpo/groups", "gcpo/team_value/mean", "gcpo/team_value/max"}
    logged = {1: {"gcpo/groups": 3.0, "gcpo/team_value/max": 1.0, "actor/pg_loss": 0.1}}
    assert checks.check_metric_glossary(logged, glossary).ok
    logged[2] = {"gcpo/new_thing": 1.0, "timing_s/gcpo_new": 0.5}
    result = checks.check_metric_glossary(logged, glossary)
    assert not result.ok and "['gcpo/new_thing', 'timing_s/gcpo_new']" in result.detail
    assert checks.GLOSSARY.is_file()  # the real one, docs/metrics.md


def _hydra_record(checkpoints, scale):
    record = checkpoints / "hydra" / "2026-11-26_06-00-00" / ".hydra"
    record.mkdir(parents=True)
    (record / "config.yaml").write_text(f"algorithm:\n  gcpo:\n    credit:\n      all_correct_scale: {scale}\n")


def test_under_the_group_scale_all_correct_groups_carry_a_push_of_the_mixed_ones_order(tmp_path):
    _hydra_record(tmp_path, "group")
    scale = checks.run_config_value(tmp_path, "algorithm.gcpo.credit.all_correct_scale")
    assert scale == "group"
    balanced = {
        1: {"gcpo/all_correct_adv_abs": 0.7, "gcpo/mixed_adv_abs": 0.8},
        2: {"gcpo/all_correct_adv_abs": 0.0, "gcpo/mixed_adv_abs": 0.8},
    }  # no all-correct group at step 2
    result = checks.check_all_correct_push(balanced, scale)
    assert result.ok and "at steps [1]" in result.detail
    faint = {1: {"gcpo/all_correct_adv_abs": 0.04, "gcpo/mixed_adv_abs": 0.8}}  # what the batch scale gives
    assert not checks.check_all_correct_push(faint, scale).ok
    assert checks.check_all_correct_push(faint, "batch").ok  # reported, not required
    assert not checks.check_all_correct_push({1: {"gcpo/mixed_adv_abs": 0.8}}, scale).ok  # nothing to compare
    assert checks.run_config_value(tmp_path / "none", "algorithm.gcpo.credit.all_correct_scale") is None
