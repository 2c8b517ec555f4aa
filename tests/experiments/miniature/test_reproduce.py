import json
import shutil

import numpy as np
import pytest
from scipy import stats

from experiments.miniature.report import paired_tests
from experiments.miniature.reproduce import (
    allowed_outside,
    compare,
    expected_share_within_sd,
    headline_cells,
    load_results,
    pool,
    pooling_refusal,
    reproduction_interval,
    table_cells,
)
from tests.experiments.miniature.runs import SPEC, collected_runs


def _row(text, row, key):
    return next(line for line in text.splitlines() if line.startswith(f"| {row} | {key} |"))


REFERENCE = collected_runs({"grpo": {1: 3.0, 2: 4.0, 3: 5.0}, "gcpo_batch": {1: 4.0, 2: 6.0, 3: 5.0}})


def test_the_reproduction_interval_is_the_t_prediction_interval_of_a_new_mean():
    # mean 4, sd 1 over 3 seeds, 3 new seeds: t(0.975, 2 df) = 4.3027 x 1 x sqrt(1/3 + 1/3) = 3.5131
    low, high = reproduction_interval(np.array([3.0, 4.0, 5.0]), 3)
    assert (low, high) == pytest.approx((4 - 3.5131, 4 + 3.5131), abs=1e-4)
    assert all(np.isnan(reproduction_interval(np.array([3.0]), 3)))
    assert expected_share_within_sd(5, 5) == pytest.approx(0.811, abs=1e-3)
    assert np.isnan(expected_share_within_sd(1, 5))


@pytest.mark.parametrize("n, m", [(3, 3), (5, 5), (7, 5)])
def test_both_error_bars_hold_their_stated_share_of_new_means_when_nothing_changed(n, m):
    rng = np.random.default_rng(n * 10 + m)
    reference, new = rng.normal(size=(20000, n)), rng.normal(size=(20000, m)).mean(1)
    in_interval = [low <= x <= high for ref, x in zip(reference, new) for low, high in [reproduction_interval(ref, m)]]
    in_sd = np.abs(new - reference.mean(1)) <= reference.std(1, ddof=1)
    assert np.mean(in_interval) == pytest.approx(0.95, abs=0.006)
    assert np.mean(in_sd) == pytest.approx(expected_share_within_sd(n, m), abs=0.008)


def test_a_run_like_the_reference_reproduces_it_and_a_shifted_arm_does_not():
    same, summary = compare(REFERENCE, REFERENCE)
    assert summary["cells"] == 6 and summary["within_sd"] == summary["within_interval"] == 6
    # rows: each arm, and each arm's difference from GRPO over the seeds both ran
    assert _row(same, "gcpo_batch − grpo", "distinct_correct") == (
        "| gcpo_batch − grpo | distinct_correct | +1.000 ± 1.000 (3) | +1.000 (3) | yes | [-2.513, +4.513] | yes |"
    )
    assert "| grpo | accuracy | +0.500 ± 0.000 (3) |" in same and "pass@1" not in same  # pass@1 is accuracy
    shifted, summary = compare(
        REFERENCE, collected_runs({"grpo": {1: 3.0, 2: 4.0, 3: 5.0}, "gcpo_batch": {1: 12.0, 2: 14.0, 3: 13.0}})
    )
    assert _row(shifted, "gcpo_batch", "distinct_correct").endswith("| no | [+1.487, +8.513] | **no** |")
    assert _row(shifted, "gcpo_batch − grpo", "distinct_correct").endswith("| **no** |")
    assert summary["within_interval"] == 4 and "Within the 95 % reproduction interval: 4 of 6" in shifted


def _three_arms(shift=None, seeds=(1, 2, 3, 4, 5)):
    """The documented table's arms and compared metrics, every value drawn around its arm's level; ``shift``
    ``{(arm, key): delta}`` moves one cell of every seed."""
    rng = np.random.default_rng(7)
    keys = ("accuracy", "pass@4", "pass@16", "distinct_correct", "coverage", "correct_entropy", "answer_entropy")
    level = {"grpo": 1.0, "gcpo_batch": 1.5, "gcpo_group": 2.0}
    runs = {}
    for arm in level:
        for seed in seeds:
            values = {k: level[arm] + rng.normal(0, 0.1) + (shift or {}).get((arm, k), 0.0) for k in keys}
            runs.setdefault(arm, {})[seed] = {"evals": {0: dict(values), 40: values}, "warm_seed": seed, "spec": SPEC}
    return runs


def test_the_verdict_applies_the_documented_criterion():
    reference = _three_arms()
    text, summary = compare(reference, reference)
    assert summary["cells"] == 35 and summary["outside"] == []
    assert (
        "Reproduction: holds: 0 of 35 cells outside the 95 % interval, at most 3 allowed; headline cells "
        "outside: none (of 4: each shared arm − grpo in distinct_correct and answer_entropy)." in text
    )
    # a headline cell alone fails it: GCPO's diversity lead over GRPO gone
    _, summary = compare(reference, _three_arms(shift={("gcpo_group", "distinct_correct"): -5.0}))
    assert ("gcpo_group − grpo", "distinct_correct") in summary["outside"] and len(summary["outside"]) == 2
    assert summary["verdict"].startswith("Reproduction: fails: 2 of 35") and summary["verdict"].endswith(
        "headline cells outside: gcpo_group − grpo distinct_correct (of 4: each shared arm − grpo in distinct_correct "
        "and answer_entropy)."
    )
    # three other cells outside hold it (every arm's pass@4: the differences stay), four fail it (one arm's pass@4
    # and coverage, each with its difference from GRPO)
    _, held = compare(reference, _three_arms(shift={(arm, "pass@4"): 5.0 for arm in reference}))
    assert len(held["outside"]) == 3 and held["verdict"].startswith("Reproduction: holds: 3 of 35")
    _, failed = compare(reference, _three_arms(shift={("gcpo_batch", "pass@4"): 5.0, ("gcpo_batch", "coverage"): 5.0}))
    assert len(failed["outside"]) == 4 and failed["verdict"].startswith("Reproduction: fails: 4 of 35")
    # runs of some of the reference's arms are judged on the headline cells of those they share
    partial = {arm: reference[arm] for arm in ("grpo", "gcpo_batch")}
    _, summary = compare(reference, partial)
    assert summary["verdict"].endswith(
        "headline cells outside: none (of 2: each shared arm − grpo in distinct_correct and answer_entropy)."
    )
    shifted = _three_arms(shift={("gcpo_batch", "distinct_correct"): 5.0})
    _, summary = compare(reference, {arm: shifted[arm] for arm in ("grpo", "gcpo_batch")})
    assert summary["verdict"].startswith("Reproduction: fails")
    # the documented reference's four headline cells
    assert headline_cells(reference) == (
        ("gcpo_batch − grpo", "distinct_correct"),
        ("gcpo_batch − grpo", "answer_entropy"),
        ("gcpo_group − grpo", "distinct_correct"),
        ("gcpo_group − grpo", "answer_entropy"),
    )
    _, alone = compare(reference, {"grpo": reference["grpo"]})
    assert alone["verdict"] == (
        "Reproduction: not judged, the reference and the runs share no arm to compare with GRPO."
    )


def test_the_cells_allowed_outside_are_the_fewest_an_unchanged_run_exceeds_at_most_one_time_in_ten():
    # the 2026-11-25 criterion, 3 of 35, is this rule's; the ablation's 4 arms have 49 cells
    assert allowed_outside(35) == 3 and allowed_outside(49) == 4 and allowed_outside(0) == 0
    for cells in range(1, 80):
        k = allowed_outside(cells)
        assert stats.binom.sf(k, cells, 0.05) <= 0.10 < (stats.binom.sf(k - 1, cells, 0.05) if k else 1.0)
    for bad in ((-1,), (35, 1.0), (35, 0.95, 0.0)):
        with pytest.raises(ValueError, match="allowed_outside needs"):
            allowed_outside(*bad)


def _shifted(runs, shift):
    """``runs`` with ``shift`` ``{(arm, key): delta}`` added to those cells of every seed and evaluation."""
    return {
        arm: {
            seed: {
                **run,
                "evals": {t: {k: v + shift.get((arm, k), 0.0) for k, v in e.items()} for t, e in run["evals"].items()},
            }
            for seed, run in seeds.items()
        }
        for arm, seeds in runs.items()
    }


def test_a_four_arm_reference_allows_four_of_its_49_cells_outside():
    reference = _three_arms()
    reference["gcpo_loo"] = _shifted({"gcpo_loo": reference["gcpo_group"]}, {})["gcpo_loo"]
    _, same = compare(reference, reference)
    assert same["cells"] == 49 and "at most 4 allowed" in same["verdict"] and "(of 6:" in same["verdict"]
    # one arm's pass@4 and coverage: the arm's two cells and its two differences from GRPO
    shift = {("gcpo_loo", "pass@4"): 5.0, ("gcpo_loo", "coverage"): 5.0}
    _, summary = compare(reference, _shifted(reference, shift))
    assert len(summary["outside"]) == 4 and summary["verdict"].startswith("Reproduction: holds: 4 of 49")
    _, summary = compare(reference, _shifted(reference, {**shift, ("gcpo_loo", "accuracy"): 5.0}))
    assert len(summary["outside"]) == 6 and summary["verdict"].startswith("Reproduction: fails: 6 of 49")


def test_two_experiments_are_pooled_only_where_each_shared_seed_trained_from_the_same_recorded_weights():
    def runs(hashes):
        shaped = collected_runs({"grpo": {s: 3.0 for s in hashes}, "gcpo_group": {s: 4.0 for s in hashes}})
        for seeds in shaped.values():
            for seed, run in seeds.items():
                run["warm_start_sha256"] = hashes[seed]
        return shaped

    same = runs({1: "a" * 64, 2: "b" * 64})
    assert pooling_refusal(same, runs({1: "a" * 64, 2: "b" * 64, 3: "c" * 64})) is None  # seed 3 on one side only
    assert pooling_refusal(same, runs({2: "c" * 64})) == (
        "seed 2 trained from other warm-start weights (sha256 bbbbbbbbbbbb, cccccccccccc)"
    )
    assert pooling_refusal(same, runs({1: None})) == (
        "seed 1's warm-start weights are not recorded on every run (warm_start_sha256)"
    )
    mixed = runs({1: "a" * 64})
    mixed["gcpo_group"][1]["warm_start_sha256"] = "d" * 64  # one side's arms from two starts of one seed
    assert "seed 1 trained from other warm-start weights" in pooling_refusal(same, mixed)
    assert pooling_refusal(same) is None


def test_pooling_averages_each_arm_and_seed_over_the_experiments_that_ran_it():
    first = collected_runs({"grpo": {1: 3.0, 2: 4.0}, "gcpo_batch": {1: 5.0, 2: 6.0}})
    second = collected_runs({"grpo": {1: 5.0, 3: 4.0}, "gcpo_batch": {1: 6.0, 3: 7.0}})
    pooled = pool(first, second, step=40)
    assert {s: r["runs"] for s, r in pooled["grpo"].items()} == {1: 2, 2: 1, 3: 1}
    assert (
        pooled["grpo"][1]["evals"][40]["distinct_correct"] == 4.0
        and pooled["gcpo_batch"][1]["evals"][40]["distinct_correct"] == 5.5
    )
    assert pool(second, first, step=40) == pooled
    # seed 1 (pooled): +1.5, seed 2: +2, seed 3: +3
    assert "| gcpo_batch | distinct_correct | 3 | +2.167 |" in paired_tests(pooled, step=40)


def test_the_order_of_arms_and_seeds_changes_nothing():
    reordered = {arm: dict(reversed(list(seeds.items()))) for arm, seeds in reversed(list(REFERENCE.items()))}
    assert compare(reordered, REFERENCE)[0] == compare(REFERENCE, reordered)[0] == compare(REFERENCE, REFERENCE)[0]


def test_runs_of_another_budget_or_start_are_not_compared():
    with pytest.raises(ValueError, match="budgets differ"):
        compare(REFERENCE, collected_runs({"grpo": {1: 3.0}}, spec={"steps": 2, "lr": 0.001}))
    other_start = collected_runs({"grpo": {1: 3.0}})
    other_start["grpo"][1]["warm_seed"] = 0
    with pytest.raises(ValueError, match="seed 1 trained from warm start"):
        compare(REFERENCE, other_start)
    with pytest.raises(ValueError, match="share no evaluation step"):
        compare(REFERENCE, collected_runs({"grpo": {1: 3.0}}, step=30))
    with pytest.raises(ValueError, match="nothing to compare"):
        compare(REFERENCE, {})
    with pytest.raises(ValueError, match="confidence"):
        compare(REFERENCE, REFERENCE, confidence=95)


def test_cells_without_two_reference_seeds_or_on_one_side_only_are_named_not_judged():
    text, summary = compare(
        collected_runs({"grpo": {1: 3.0}, "gcpo_group": {1: 4.0, 2: 5.0}}),
        collected_runs({"grpo": {1: 3.0, 2: 4.0}, "gcpo_batch": {1: 4.0}}),
    )
    assert _row(text, "grpo", "distinct_correct") == "| grpo | distinct_correct | 1 seeds | 2 seeds | n/a | n/a | n/a |"
    assert summary["cells"] == 0 and "No cell has two reference seeds" in text
    assert "Only one side has: gcpo_batch accuracy" in text and "gcpo_group − grpo distinct_correct" in text
    # differences pair seeds: seed 2 of gcpo_batch has no GRPO partner
    cells = table_cells(collected_runs({"grpo": {1: 3.0}, "gcpo_batch": {1: 4.0, 2: 9.0}}), 40, ["distinct_correct"])
    assert cells[("gcpo_batch − grpo", "distinct_correct")].tolist() == [1.0]


def test_results_json_reads_back_as_collect_returned_it(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(
        json.dumps(
            REFERENCE
            | {"grpo": {s: r | {"training": {"actor/entropy": {2: 0.5}}} for s, r in REFERENCE["grpo"].items()}}
        )
    )
    back = load_results(path)
    assert back["gcpo_batch"] == {s: r | {"training": {}} for s, r in REFERENCE["gcpo_batch"].items()}  # int keys
    assert back["grpo"][2]["training"]["actor/entropy"] == {2: 0.5} and back["grpo"][2]["evals"][40]
    path.write_text(json.dumps({"grpo": {"1": {"no": "evals"}}}))
    with pytest.raises(ValueError, match="no evaluations"):
        load_results(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_results(tmp_path / "absent.json")


def test_the_compare_command_writes_its_verdict_and_refuses_bad_input(tmp_path, capsys):
    from experiments.miniature.__main__ import main
    from tests.experiments.miniature.test_report import _write_run

    start = {"animal": ["tiger", "apple"], "fruit": ["apple", "tiger"]}
    for seed, answers in enumerate([["tiger", "tiger"], ["tiger", "lion"], ["lion", "wolf"]], start=1):
        outputs = {0: start, 3: {"animal": answers, "fruit": ["apple", "apple"]}}
        _write_run(tmp_path, "grpo", seed, outputs, warm_start_sha256=f"{seed:064x}")
    assert main(["report", "--out", str(tmp_path), "--figures", str(tmp_path / "figures")]) == 0
    capsys.readouterr()
    assert main(["compare", "--out", str(tmp_path), "--reference", str(tmp_path / "results.json")]) == 0
    written = (tmp_path / "reproduction.md").read_text()
    assert written == capsys.readouterr().out
    assert "| grpo | distinct_correct | +1.333 ± 0.289 (3) | +1.333 (3) | yes |" in written  # 1, 1.5, 1.5
    assert "Reproduction: not judged, the reference and the runs share no arm" in written  # GRPO alone
    assert "Both experiments together" in written and "| arm − grpo (step 3) | metric |" in written
    # runs from other warm-start weights than the reference's seed (another CPU model) are compared, not pooled
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "runs", other / "runs")
    done = other / "runs" / "grpo-seed2" / "done.json"
    done.write_text(json.dumps(json.loads(done.read_text()) | {"warm_start_sha256": "f" * 64}))
    assert main(["compare", "--out", str(other), "--reference", str(tmp_path / "results.json")]) == 0
    written = (other / "reproduction.md").read_text()
    assert "Both experiments together" not in written and "| grpo | distinct_correct |" in written
    assert (
        "Not pooled with the reference: seed 2 trained from other warm-start weights (sha256 000000000000, "
        "ffffffffffff); two experiments are paired only from the same warm starts." in written
    )
    assert main(["compare", "--out", str(tmp_path), "--reference", str(tmp_path / "absent.json")]) == 2
    assert "cannot compare: cannot read the reference results" in capsys.readouterr().err
