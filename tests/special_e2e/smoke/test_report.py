"""The report's tables: GCPO's critical-path overhead per step."""

import pytest

from tests.special_e2e.smoke.report import overhead, overhead_table, share_of_grpo


def _step(total, added, prefetch=None, log_prob=None):
    m = {"timing_s/step": total, "timing_s/gcpo_total": added}
    if prefetch is not None:
        m["timing_s/gcpo_embed_prefetch"] = prefetch
    if log_prob is not None:
        m["timing_s/old_log_prob"] = log_prob
    return m


def test_the_overhead_is_the_credits_time_against_the_step_without_it_over_the_steady_steps():
    metrics = {1: _step(30.0, 2.0, 1.5, 1.0), 2: _step(20.2, 0.2, 0.5, 1.0), 3: _step(20.4, 0.4, 0.6, 1.0)}
    result = overhead(metrics, warmup=[1])
    assert result["steps"][2]["share"] == pytest.approx(0.2 / 20.0)
    assert result["steps"][1]["prefetch_hidden"] is False and result["steps"][2]["prefetch_hidden"] is True
    assert result["mean"]["steps"] == [2, 3]
    assert result["mean"]["added_s"] == pytest.approx(0.3) and result["mean"]["share"] == pytest.approx(0.3 / 20.0)
    # every step a warm-up: the mean is over all of them rather than none
    assert overhead(metrics, warmup=[1, 2, 3])["mean"]["steps"] == [1, 2, 3]


def test_a_grpo_run_has_no_overhead_rows_and_the_table_marks_warm_up_and_hidden_prefetch():
    assert overhead({1: {"timing_s/step": 3.0}}) == {"steps": {}, "mean": None}
    table = overhead_table({1: _step(30.0, 2.0, 1.5, 1.0), 2: _step(20.2, 0.2)}, warmup=[1]).splitlines()
    assert table[2] == "| step 1 (warm-up) | 30 | 2 | 7.14 % | 1.5 | 1 | NO |"
    assert table[3] == "| step 2 | 20.2 | 0.2 | 1.00 % | — | — | — |"
    assert table[4].startswith("| mean of steps 2 | 20.2 | 0.2 | 1.00 % |")


def test_gcpos_critical_path_is_divided_by_grpos_measured_steady_step():
    gcpo = {1: _step(30.0, 2.0), 2: _step(20.2, 0.2), 3: _step(20.4, 0.4)}
    grpo = {1: 28.0, 2: 19.0, 3: 21.0}
    share = share_of_grpo(gcpo, grpo, warmup=[1])
    assert share["gcpo_steps"] == [2, 3] and share["grpo_steps"] == [2, 3]
    assert share["added_s"] == pytest.approx(0.3) and share["grpo_step_s"] == pytest.approx(20.0)
    assert share["share"] == pytest.approx(0.3 / 20.0)
    # nothing to divide: no steady GRPO step, or a GCPO run without the credit's timer
    assert share_of_grpo(gcpo, {1: 28.0}, warmup=[1]) is None
    assert share_of_grpo({2: {"timing_s/step": 20.0}}, grpo, warmup=[1]) is None
