import json
import math
from collections import Counter

import numpy as np
import pytest

from experiments.miniature.report import (
    collect,
    eval_metrics,
    expected_distinct,
    final_table,
    paired_table,
    paired_tests,
    plot,
    prompt_metrics,
)
from experiments.miniature.task import answer_set
from tests.experiments.miniature.runs import collected_runs


def test_prompt_metrics_count_distinct_correct_answers_and_their_coverage():
    m = prompt_metrics("weekday", ["monday", "monday", "friday.", "june", "two words", "monday"])
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["distinct_correct"] == 2 and m["coverage"] == pytest.approx(2 / 7)
    # answers: monday x3, friday, june, malformed
    assert m["answer_entropy"] == pytest.approx(-(0.5 * math.log(0.5) + 3 * (1 / 6) * math.log(1 / 6)))
    assert m["pass@1"] == pytest.approx(4 / 6) and m["pass@4"] == 1.0 and "pass@8" not in m


def test_a_collapsed_policy_scores_as_accurate_but_not_diverse():
    collapsed = prompt_metrics("animal", ["tiger"] * 8)
    diverse = prompt_metrics("animal", ["tiger", "lion", "wolf", "fox", "bear", "cat", "dog", "cow"])
    assert collapsed["accuracy"] == diverse["accuracy"] == collapsed["pass@8"] == 1.0
    assert collapsed["distinct_correct"] == 1 < diverse["distinct_correct"] == 8
    assert collapsed["answer_entropy"] == collapsed["correct_entropy"] == 0.0 < diverse["answer_entropy"]
    assert diverse["correct_entropy"] == pytest.approx(math.log(8))
    half = prompt_metrics("animal", ["tiger", "lion", "apple", "apple"])  # wrong answers leave it as it is
    assert (
        half["correct_entropy"] == pytest.approx(math.log(2))
        and prompt_metrics("animal", ["x"])["correct_entropy"] == 0
    )


def _brute_force_distinct(samples, k):
    """The mean number of distinct answers over every k-subset of ``samples`` (by position)."""
    from itertools import combinations

    subsets = list(combinations(range(len(samples)), k))
    return sum(len({samples[i] for i in subset}) for subset in subsets) / len(subsets)


def test_distinct_among_16_is_the_plain_count_at_16_samples():
    answers = ["tiger"] * 9 + ["lion"] * 4 + ["wolf", "fox", "bear"]
    assert expected_distinct(Counter(answers), 16) == 5.0
    m = prompt_metrics("animal", answers)
    assert m["distinct_correct"] == 5.0 and m["coverage"] == pytest.approx(5 / len(answer_set("animal")))
    assert expected_distinct({}, 16) == 0.0 and expected_distinct(Counter(["tiger"] * 3), 3) == 1.0  # fewer: all


@pytest.mark.parametrize(
    "samples, k",
    [
        (("a",) * 4 + ("b",) * 2 + ("c",), 3),  # 35 subsets
        (("a",) * 10 + ("b",) * 5 + ("c",) * 2 + ("d",), 16),  # 18 samples, 153 subsets of 16
        (("a",) * 12 + ("b",) * 3 + ("c",) * 2 + ("d",) * 2 + ("e",), 16),  # 20 samples, 4845 subsets
    ],
)
def test_distinct_among_k_is_the_mean_over_every_subset_of_k(samples, k):
    assert expected_distinct(Counter(samples), len(samples), k) == pytest.approx(
        _brute_force_distinct(samples, k), rel=1e-12
    )


def test_distinct_correct_among_16_of_64_samples_matches_random_subsamples_and_is_not_the_plain_count():
    import random

    answers = ["tiger"] * 30 + ["lion"] * 12 + ["wolf"] * 6 + ["fox"] * 2 + ["bear"] + ["apple"] * 13
    m = prompt_metrics("animal", answers)
    assert m["accuracy"] == pytest.approx(51 / 64)
    correct = ("tiger", "lion", "wolf", "fox", "bear")
    rng = random.Random(0)
    draws = [sum(1 for a in set(rng.sample(answers, 16)) if a in correct) for _ in range(20_000)]
    # the subsamples' mean within 4 of its standard errors (sd < 1 answer: se < 0.007)
    assert m["distinct_correct"] == pytest.approx(sum(draws) / len(draws), abs=0.03)
    assert 3.0 < m["distinct_correct"] < 5.0  # not the 5 of all 64: the rare answers show up in few draws of 16
    assert m["coverage"] == pytest.approx(m["distinct_correct"] / len(answer_set("animal")))
    with pytest.raises(ValueError, match="do not fit"):
        expected_distinct({"a": 10}, 8)


def test_the_table_says_distinct_answers_are_counted_among_16(tmp_path):
    from experiments.miniature.report import distinct_note

    prompt = {"animal": ["tiger"] * 40 + ["lion"] * 20 + ["x"] * 4}
    _write_run(tmp_path, "grpo", 1, {0: prompt, 3: prompt})
    runs = collect(tmp_path)
    assert runs["grpo"][1]["evals"][3]["samples"] == 64
    table = final_table(runs)
    assert table.splitlines()[-1].startswith(
        "distinct_correct and coverage: among 16 samples a prompt, estimated without bias from the 64 drawn"
    )
    # lion is missed in a draw of 16 only when all 16 come from the 44 others
    lion = 1 - math.comb(44, 16) / math.comb(64, 16)
    assert runs["grpo"][1]["evals"][3]["distinct_correct"] == pytest.approx(1 + lion)
    sixteen = {0: {"animal": ["tiger"] * 16}}
    _write_run(tmp_path / "b", "grpo", 1, sixteen)
    assert distinct_note(collect(tmp_path / "b")) == "distinct_correct and coverage: among 16 samples a prompt."
    assert distinct_note({"grpo": {1: {"evals": {0: {"accuracy": 0.5}}}}}) == ""  # older results do not say


def _write_run(root, arm, seed, outputs_by_step, step_s=3.0, warm_start_sha256=None):
    folder = root / "runs" / f"{arm}-seed{seed}"
    (folder / "heldout").mkdir(parents=True)
    for step, outputs in outputs_by_step.items():
        lines = [
            {"input": f"p-{c}", "output": o, "gts": c, "score": 0, "step": step}
            for c, outs in outputs.items()
            for o in outs
        ]
        (folder / "heldout" / f"{step}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    metrics = [
        {"step": s, "data": {"timing_s/step": 99.0 if s == 1 else step_s, "actor/entropy": 1.0 / s}} for s in (1, 2, 3)
    ]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in metrics) + "\n")
    done = {"arm": arm, "seed": seed, "wall_s": 100.0}
    if warm_start_sha256 is not None:
        done["warm_start_sha256"] = warm_start_sha256
    (folder / "done.json").write_text(json.dumps(done))


def test_the_table_is_mean_and_sd_over_seeds_at_the_last_shared_evaluation(tmp_path):
    start = {"animal": ["tiger", "apple"], "fruit": ["apple", "tiger"]}
    _write_run(tmp_path, "grpo", 1, {0: start, 3: {"animal": ["tiger", "tiger"], "fruit": ["apple", "apple"]}})
    _write_run(tmp_path, "grpo", 2, {0: start, 3: {"animal": ["tiger", "lion"], "fruit": ["apple", "apple"]}})
    _write_run(
        tmp_path, "gcpo_group", 1, {0: start, 3: {"animal": ["tiger", "lion"], "fruit": ["apple", "pear"]}}, step_s=5.0
    )
    runs = collect(tmp_path)
    assert runs["grpo"][1]["step_s"] == 3.0  # the first step (start-up) is left out
    assert eval_metrics(tmp_path / "runs/grpo-seed2/heldout/3.jsonl")["distinct_correct"] == 1.5
    table = final_table(runs)
    assert "| grpo (step 3) | 2 | 1.000 ± 0.000 |" in table
    assert "distinct_correct" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.startswith("| grpo"))
    assert "1.250 ± 0.354" in row  # distinct correct: 1.0 and 1.5 over the two seeds
    assert table.splitlines()[2].startswith("| start (step 0) | 3 | 0.500 ± 0.000")
    paired = paired_table(runs).splitlines()
    assert paired[0].startswith("| arm − grpo (step 3) | seeds |") and len(paired) == 3
    # gcpo_group seed 1 against grpo seed 1: distinct correct 2.0 - 1.0 (the seeds the two arms share)
    assert paired[2].startswith("| gcpo_group | 1 |") and "+1.000 ± 0.000 (1/1 higher)" in paired[2]
    with pytest.raises(ValueError, match="no ppo runs"):
        paired_table(runs, baseline="ppo")
    paths = plot(runs, tmp_path / "figures")
    assert all(p.stat().st_size > 1000 and p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    assert [p.name for p in paths] == [
        "heldout_over_steps.png",
        "heldout_pass_at_k.png",
        "heldout_frontier.png",
        "training_curves.png",
    ]


def test_uneven_dumps_and_missing_runs_are_errors(tmp_path):
    _write_run(tmp_path, "grpo", 1, {0: {"animal": ["tiger", "lion"], "fruit": ["apple"]}})
    with pytest.raises(ValueError, match="different numbers of samples"):
        eval_metrics(tmp_path / "runs/grpo-seed1/heldout/0.jsonl")
    with pytest.raises(ValueError, match="no finished runs"):
        final_table({})


def _row(table, arm, key):
    return next(line for line in table.splitlines() if line.startswith(f"| {arm} | {key} |"))


def test_paired_tests_give_the_t_interval_and_both_p_values_of_the_seed_pairs():
    # differences 1, 2, 3: mean 2, sd 1; t(0.975, 2 df) = 4.303 -> 2 +- 4.303/sqrt(3) = [-0.484, 4.484];
    # t = 2 sqrt(3) = 3.464 on 2 df -> p = 0.074; Wilcoxon exact, 3 positive ranks of 3 -> p = 2/8
    grpo = {1: 3.0, 2: 3.0, 3: 3.0, 4: 9.0}  # seed 4 has no partner and is left out
    runs = collected_runs({"grpo": grpo, "gcpo_batch": {1: 4.0, 2: 5.0, 3: 6.0}})
    table = paired_tests(runs)
    assert table.splitlines()[0].startswith("| arm − grpo (step 40) | metric | seeds | mean | 95 % CI |")
    assert _row(table, "gcpo_batch", "distinct_correct") == (
        "| gcpo_batch | distinct_correct | 3 | +2.000 | [-0.484, +4.484] | 0.074 | 0.250 | 3/3 |"
    )
    # equal accuracy on every seed: no test is defined, and none is made up
    assert _row(table, "gcpo_batch", "accuracy") == "| gcpo_batch | accuracy | 3 | +0.000 | n/a | n/a | n/a | 0/3 |"
    # the order of seeds and arms changes nothing; a 90 % interval is narrower
    shuffled = collected_runs({"gcpo_batch": {3: 6.0, 1: 4.0, 2: 5.0}, "grpo": dict(reversed(grpo.items()))})
    assert _row(paired_tests(shuffled), "gcpo_batch", "distinct_correct") == _row(
        table, "gcpo_batch", "distinct_correct"
    )
    assert "[+0.314, +3.686]" in _row(paired_tests(runs, confidence=0.9), "gcpo_batch", "distinct_correct")


def test_paired_tests_are_defined_or_refused_on_degenerate_input():
    one_pair = paired_tests(collected_runs({"grpo": {1: 3.0}, "gcpo_group": {1: 4.0}}))
    assert _row(one_pair, "gcpo_group", "distinct_correct").endswith("| 1 | +1.000 | n/a | n/a | n/a | 1/1 |")
    constant = paired_tests(collected_runs({"grpo": {1: 3.0, 2: 4.0}, "gcpo_group": {1: 4.0, 2: 5.0}}))
    assert "| +1.000 | [+1.000, +1.000] | 0.000 |" in _row(constant, "gcpo_group", "distinct_correct")
    apart = paired_tests(collected_runs({"grpo": {1: 3.0}, "gcpo_group": {2: 4.0}}))  # no seed in common
    assert _row(apart, "gcpo_group", "distinct_correct").endswith("| 0 | n/a | n/a | n/a | n/a | 0/0 |")
    with pytest.raises(ValueError, match="no grpo runs"):
        paired_tests(collected_runs({"gcpo_group": {1: 4.0}}))
    with pytest.raises(ValueError, match="confidence"):
        paired_tests(collected_runs({"grpo": {1: 3.0}, "gcpo_group": {1: 4.0}}), confidence=95)


def test_the_ablation_tests_pair_each_question_seed_by_seed():
    from experiments.miniature.report import ablation_tests

    runs = collected_runs(
        {
            "grpo": {1: 1.0, 2: 1.0},
            "gcpo_group": {1: 4.0, 2: 5.0},
            "gcpo_loo": {1: 3.0, 2: 3.0},
            "dqo": {1: 2.0, 2: 6.0},
        }
    )
    table = ablation_tests(runs)
    assert table.splitlines()[0].startswith("| pair (step 40) | metric | seeds | mean | 95 % CI |")
    # Shapley - LOO: differences 1 and 2; Shapley - the bonus: 2 and -1; LOO - the bonus: 1 and -3
    assert _row(table, "gcpo_group − gcpo_loo", "distinct_correct").startswith(
        "| gcpo_group − gcpo_loo | distinct_correct | 2 | +1.500 |"
    )
    assert _row(table, "gcpo_group − dqo", "distinct_correct").endswith("| 1/2 |")
    assert "| gcpo_loo − dqo | distinct_correct | 2 | -1.000 |" in table
    assert not any(line.startswith("| grpo") for line in table.splitlines())  # GRPO has its own table
    # a pair runs when both of its arms did; none: no table
    partial = ablation_tests(collected_runs({"grpo": {1: 1.0}, "gcpo_group": {1: 4.0}, "dqo": {1: 2.0}}))
    assert [line.split(" | ")[0] for line in partial.splitlines()[2:]] == ["| gcpo_group − dqo"] * 2
    assert ablation_tests(collected_runs({"grpo": {1: 1.0}, "gcpo_group": {1: 4.0}})) == ""


def test_the_report_command_writes_the_tables_and_the_tests_of_the_finishedcollected_runs(tmp_path, capsys):
    from experiments.miniature.__main__ import main

    start = {"animal": ["tiger", "apple"], "fruit": ["apple", "tiger"]}
    for seed, (grpo, gcpo) in enumerate(
        [(["tiger", "tiger"], ["tiger", "lion"]), (["lion", "lion"], ["lion", "wolf"])], start=1
    ):
        _write_run(tmp_path, "grpo", seed, {0: start, 3: {"animal": grpo, "fruit": ["apple", "apple"]}})
        _write_run(tmp_path, "gcpo_batch", seed, {0: start, 3: {"animal": gcpo, "fruit": ["apple", "pear"]}})
    assert main(["report", "--out", str(tmp_path), "--figures", str(tmp_path / "figures")]) == 0
    table = (tmp_path / "table.md").read_text()
    assert table == capsys.readouterr().out.split("of training runs in all\n", 1)[1]
    assert "| gcpo_batch (step 3) | 2 |" in table and "| arm − grpo (step 3) | seeds |" in table
    # one more distinct correct answer on both prompts of both seeds: +1 per prompt, every pair higher
    assert "| gcpo_batch | distinct_correct | 2 | +1.000 | [+1.000, +1.000] |" in table
    assert json.loads((tmp_path / "results.json").read_text())["gcpo_batch"]["2"]["evals"]["3"]["accuracy"] == 1.0
    assert len(list((tmp_path / "figures").glob("*.png"))) == 4


def test_the_report_command_adds_the_ablations_tests_when_their_arms_ran(tmp_path, capsys):
    from experiments.miniature.__main__ import main

    start = {"animal": ["tiger", "apple"]}
    for seed in (1, 2):
        for arm, answers in (("grpo", ["tiger", "tiger"]), ("gcpo_group", ["tiger", "lion"]), ("dqo", ["lion", "x"])):
            _write_run(tmp_path, arm, seed, {0: start, 3: {"animal": answers}})
    assert main(["report", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    assert "| pair (step 3) | metric |" in table
    assert "| gcpo_group − dqo | distinct_correct | 2 | +1.000 |" in table


def test_an_experiment_run_in_parts_is_reported_whole_and_a_pair_run_twice_is_refused(tmp_path, capsys):
    from experiments.miniature.__main__ import main

    start = {"animal": ["tiger", "apple"]}
    first, second = tmp_path / "part1", tmp_path / "part2"
    for part, seed in ((first, 1), (second, 2)):
        _write_run(part, "grpo", seed, {0: start, 3: {"animal": ["tiger", "tiger"]}})
        _write_run(part, "gcpo_group", seed, {0: start, 3: {"animal": ["tiger", "lion"]}})
    assert main(["report", "--out", str(first)]) == 0
    assert main(["report", "--out", str(second), "--include", str(first / "results.json")]) == 0
    table = (second / "table.md").read_text()
    assert table.startswith("Warm starts: seed 1 from start None, seed 2 from start None.")  # no done.json names one
    assert "| gcpo_group | distinct_correct | 2 | +1.000 |" in table
    merged = json.loads((second / "results.json").read_text())
    assert {arm: sorted(seeds) for arm, seeds in merged.items()} == {"gcpo_group": ["1", "2"], "grpo": ["1", "2"]}
    capsys.readouterr()
    # the same (arm, seed) in both parts: one warm start per seed can no longer be vouched for
    assert main(["report", "--out", str(first), "--include", str(second / "results.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("miniature: cannot report: ") and "both hold gcpo_group seed 1, grpo seed 1" in err


def test_a_seeds_arms_from_two_parts_join_only_on_the_same_warm_start_weights(tmp_path, capsys):
    """A part on another machine rebuilds seed 1's warm start with other weights: its arms may not be paired with
    the first part's (the hashes are named); on the same weights they join."""
    from experiments.miniature.__main__ import main

    start = {"animal": ["tiger", "apple"]}
    first, second, third = tmp_path / "part1", tmp_path / "part2", tmp_path / "part3"
    _write_run(first, "grpo", 1, {0: start, 3: {"animal": ["tiger", "tiger"]}}, warm_start_sha256="a" * 64)
    _write_run(second, "gcpo_group", 1, {0: start, 3: {"animal": ["tiger", "lion"]}}, warm_start_sha256="b" * 64)
    _write_run(third, "gcpo_group", 1, {0: start, 3: {"animal": ["tiger", "lion"]}}, warm_start_sha256="a" * 64)
    assert main(["report", "--out", str(first)]) == 0
    capsys.readouterr()
    assert main(["report", "--out", str(second), "--include", str(first / "results.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"miniature: cannot report: {first / 'results.json'} and the runs: seed 1 trained from other warm-start "
        f"weights (sha256 {'a' * 12}, {'b' * 12})"
    )
    assert main(["report", "--out", str(third), "--include", str(first / "results.json")]) == 0
    merged = json.loads((third / "results.json").read_text())
    assert {arm: sorted(seeds) for arm, seeds in merged.items()} == {"gcpo_group": ["1"], "grpo": ["1"]}


# The credit-shape run's pre-registered steps (issue 56): TOST, D_adj, Holm and the verdicts.


def test_tost_agrees_with_a_hand_computed_case_and_with_its_90_percent_interval():
    from experiments.miniature.report import tost

    # differences 1, 2, 3: mean 2, se 1/sqrt(3); against +4: t = -2 sqrt(3) on 2 df, one-sided p = 0.074 / 2
    inside = tost([1.0, 2.0, 3.0], margin=4.0)
    assert inside["p"] == pytest.approx(0.0371, abs=1e-4) and inside["equivalent"]
    assert (inside["low"], inside["high"]) == pytest.approx((0.3141, 3.6859), abs=1e-4)  # the 90 % interval
    outside = tost([1.0, 2.0, 3.0], margin=3.5)  # 3.686 > 3.5
    assert not outside["equivalent"] and outside["p"] > 0.05
    rng = np.random.default_rng(0)
    for _ in range(200):  # two one-sided tests at 5 % are the 90 % interval inside the margin
        d = rng.normal(rng.uniform(-0.06, 0.06), 0.05, size=16)
        t = tost(d, margin=0.05)
        assert t["equivalent"] == (-0.05 < t["low"] and t["high"] < 0.05)
    with pytest.raises(ValueError, match="margin"):
        tost([1.0, 2.0], margin=0)


def test_tost_finds_identical_arms_equivalent_and_a_clear_difference_not():
    from experiments.miniature.report import paired_t, tost

    rng = np.random.default_rng(1)
    same = rng.normal(0.0, 0.02, size=16)  # identical arms but for sampling noise
    assert tost(same, 0.05)["equivalent"] and paired_t(same)["p"] > 0.01
    apart = rng.normal(0.12, 0.02, size=16)  # 0.12 of accuracy apart
    assert not tost(apart, 0.05)["equivalent"] and paired_t(apart)["p"] < 1e-6
    assert paired_t(apart)["low"] > 0.1 > paired_t(same)["high"]
    assert tost([0.01] * 16, 0.05)["equivalent"] and not tost([0.2] * 16, 0.05)["equivalent"]  # no spread
    assert paired_t([0.0, 0.0])["p"] == 1.0 and math.isnan(paired_t([1.0])["p"]) and not tost([1.0], 5)["equivalent"]


def test_holm_orders_the_p_values_and_steps_down_as_computed_by_hand():
    from experiments.miniature.report import holm

    # m = 3: 0.01 -> 3 x 0.01 = 0.03 (rejected); 0.03 -> 2 x 0.03 = 0.06 (not: the procedure stops there);
    # 0.04 -> max(0.06, 1 x 0.04) = 0.06, not rejected though 0.04 < 0.05 alone
    out = holm({"H1": 0.04, "H2": 0.01, "H3": 0.03})
    assert list(out) == ["H1", "H2", "H3"]  # the caller's order
    assert {k: v["p_holm"] for k, v in out.items()} == pytest.approx({"H1": 0.06, "H2": 0.03, "H3": 0.06})
    assert [out[k]["rejected"] for k in ("H1", "H2", "H3")] == [False, True, False]
    every = holm({"H1": 0.01, "H2": 0.02, "H3": 0.04})  # 0.03, 0.04, 0.04: all rejected
    assert all(v["rejected"] for v in every.values())
    assert every["H3"]["p_holm"] == pytest.approx(0.04) and every["H2"]["p_holm"] == pytest.approx(0.04)
    capped = holm({"H1": 0.6, "H2": float("nan"), "H3": 0.001})  # NaN counts as 1; adjusted p at most 1
    assert capped["H2"]["p_holm"] == 1.0 and capped["H1"]["p_holm"] == 1.0 and capped["H3"]["rejected"]


def test_the_shape_verdict_follows_the_pre_registered_rules():
    from experiments.miniature.report import shape_verdict

    matched = {"equivalent": True, "low": -0.03, "high": 0.02, "margin": 0.05}
    traded = {"equivalent": False, "low": -0.09, "high": 0.01, "margin": 0.05}
    up = {"mean": 0.6, "low": 0.3, "high": 0.9}
    down = {"mean": -0.6, "low": -0.9, "high": -0.3}
    flat = {"mean": 0.05, "low": -0.2, "high": 0.3}
    narrow = {"equivalent": True, "low": -0.1, "high": 0.2, "margin": 0.5}
    wide = {"equivalent": False, "low": -0.7, "high": 0.8, "margin": 0.5}
    assert "lies above leave-one-out's" in shape_verdict(matched, True, up, wide)
    assert "lies below leave-one-out's" in shape_verdict(matched, True, down, wide)
    assert "The same frontier within half an answer" in shape_verdict(matched, False, flat, narrow)
    assert "Not distinguishable at this resolution" in shape_verdict(matched, False, flat, wide)
    assert "[-0.700, +0.800]" in shape_verdict(matched, False, flat, wide)  # with the interval
    for rejected, adjusted in ((True, up), (False, flat)):  # a failed dose match gives no shape verdict at all
        text = shape_verdict(traded, rejected, adjusted, narrow)
        assert "The dose match failed" in text and "frontier" not in text


def _shape_runs(effects, seeds=range(101, 117), step=40, seed=0):
    """Runs of the four arms at ``step``: each seed's gcpo_group at a random start, every other arm its
    ``effects[arm] = (accuracy shift, distinct shift)`` plus a little noise."""
    rng = np.random.default_rng(seed)
    runs = {arm: {} for arm in ("grpo", "gcpo_group", "gcpo_loo", "gcpo_loo_mix4")}
    for s in seeds:
        acc, distinct = rng.uniform(0.4, 0.6), rng.uniform(3.0, 4.5)
        for arm in runs:
            da, dd = effects.get(arm, (0.0, 0.0))
            noise = (0.0, 0.0) if arm == "gcpo_group" else (rng.normal(0, 0.01), rng.normal(0, 0.05))
            e = {"accuracy": acc + da + noise[0], "distinct_correct": distinct + dd + noise[1]}
            runs[arm][s] = {"evals": {0: {"accuracy": 0.2, "distinct_correct": 2.0}, step: e}, "warm_seed": s}
    return runs


def test_the_credit_shape_analysis_on_synthetic_runs_with_known_answers():
    from experiments.miniature.report import credit_shape_analysis, credit_shape_tests

    # H1's pair identical, leave-one-out alone +0.8 answers at -0.03 accuracy, GRPO 0.7 answers below
    runs = _shape_runs({"gcpo_loo": (-0.03, 0.8), "grpo": (0.0, -0.7)})
    a = credit_shape_analysis(runs)
    assert a["complete"] and a["seeds"] == list(range(101, 117))
    h1, h2, h3 = (a["tests"][h] for h in ("H1", "H2", "H3"))
    assert h1["accuracy_tost"]["equivalent"] and not h1["holm"]["rejected"] and a["adjusted_tost"]["equivalent"]
    assert h2["holm"]["rejected"] and h2["t"]["mean"] == pytest.approx(0.8, abs=0.05)
    assert h3["holm"]["rejected"] and h3["t"]["mean"] == pytest.approx(0.7, abs=0.05)  # gcpo_group − grpo
    assert h2["accuracy"]["mean"] == pytest.approx(-0.03, abs=0.01)  # stated beside H2, not adjusted away
    assert "The same frontier within half an answer" in a["verdict"]
    text = credit_shape_tests(runs)
    assert "64 of 64 runs in" in text and "| H1 | gcpo_group − gcpo_loo_mix4 | D_adj (5.5) | 16 |" in text
    assert (
        "Verdict, H2 (strength at one dose, gcpo_loo − gcpo_group, raw distinct correct among 16): **rejected**" in text
    )

    # D_adj = ΔD − 5.5 ΔAcc: mix4 0.1 accuracy and 0.55 answers below gcpo_group is no shape difference at all
    traded = credit_shape_analysis(_shape_runs({"gcpo_loo_mix4": (-0.1, -0.55)}))
    assert traded["tests"]["H1"]["t"]["mean"] == pytest.approx(0.0, abs=0.05)
    assert "The dose match failed" in traded["verdict"]  # 0.1 of accuracy apart: not matched
    above = credit_shape_analysis(_shape_runs({"gcpo_loo_mix4": (0.0, -0.6)}))
    assert above["tests"]["H1"]["holm"]["rejected"] and "lies above leave-one-out's" in above["verdict"]


def test_the_verdict_waits_for_all_sixteen_seeds_of_all_four_arms():
    from experiments.miniature.report import credit_shape_analysis, credit_shape_tests

    runs = _shape_runs({"grpo": (0.0, -0.7)})
    del runs["gcpo_loo"][116]
    assert not credit_shape_analysis(runs)["complete"] and "verdict" not in credit_shape_analysis(runs)
    text = credit_shape_tests(runs)
    assert "63 of 64 runs in (grpo 16/16, gcpo_group 16/16, gcpo_loo 15/16, gcpo_loo_mix4 16/16)" in text
    assert "No verdict yet" in text and "Verdict," not in text and "| H3 | gcpo_group − grpo |" in text
    early = _shape_runs({}, seeds=(101,))
    assert "No verdict: fewer than two seeds" in credit_shape_tests(early)
    assert credit_shape_tests(_shape_runs({}, step=4)).endswith("these runs end at step 4.")  # a trial's budget
    assert credit_shape_tests({"grpo": runs["grpo"], "gcpo_group": runs["gcpo_group"]}) == ""  # not this run


def test_the_report_command_adds_the_credit_shape_tests_when_its_dose_matched_arm_ran(tmp_path):
    from experiments.miniature.__main__ import main

    start = {"animal": ["tiger", "apple"]}
    for seed in (101, 102):
        for arm in ("grpo", "gcpo_group", "gcpo_loo", "gcpo_loo_mix4"):
            _write_run(tmp_path, arm, seed, {0: start, 3: {"animal": ["tiger", "lion" if seed == 101 else "wolf"]}})
    assert main(["report", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    assert "The credit-shape run (issue 56, pre-registered), step 3, seeds 101-116: 8 of 64 runs in" in table
    assert "| H2 | gcpo_loo − gcpo_group | distinct_correct (among 16) | 2 |" in table
    assert "the pre-registered step is 40, these runs end at step 3." in table
    assert "Secondary, outside the family" in table and "| gcpo_group − gcpo_loo_mix4 | answer_entropy | 2 |" in table


def _write_rollouts(folder, step, groups):
    """verl's dump of one training step (``trainer.rollout_data_dir``): a line per rollout, keys sorted by uid."""
    lines = [
        {"input": f"name a {g}.", "output": "x", "gts": g, "score": score, "step": step, "uid": f"{g}-uuid_0_{i}"}
        for g, scores in groups.items()
        for i, score in enumerate(scores)
    ]
    (folder / "rollouts").mkdir(parents=True, exist_ok=True)
    (folder / "rollouts" / f"{step}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_the_all_correct_share_comes_from_the_rollout_dumps_of_every_arm_else_from_gcpos_metrics(tmp_path):
    from experiments.miniature.report import all_correct_share, all_correct_table, dumped_all_correct_share

    run = tmp_path / "run"
    _write_rollouts(run, 1, {"a": [1.0, 1.0], "b": [1.0, -1.0], "c": [-1.0, -1.0], "d": [1.0, 1.0]})
    _write_rollouts(run, 2, {"a": [1.0, 1.0], "b": [1.0, 1.0], "c": [1.0, 1.0], "d": [-1.0, 1.0]})
    assert dumped_all_correct_share(run) == {1: 0.5, 2: 0.75}
    metrics = {1: {"gcpo/all_correct_groups": 1.0, "gcpo/groups": 4.0}}
    assert all_correct_share(run, metrics) == {1: 0.5, 2: 0.75}  # the dumps win: they exist for GRPO too
    assert all_correct_share(tmp_path / "no-dumps", metrics) == {1: 0.25}
    assert all_correct_share(tmp_path / "no-dumps", {1: {"actor/entropy": 1.0}}) == {}
    runs = {
        "grpo": {1: {"training": {"all_correct_share": {"1": 0.5, "10": 0.6, "20": 0.8}}}},
        "gcpo_loo": {1: {"training": {"all_correct_share": {"1": 0.25, "10": 0.5}}}},
        "old": {1: {"training": {}}},
    }
    table = all_correct_table(runs)
    assert "| arm | runs | step 1 | step 10 | step 20 | steps 1-20 |" in table
    assert "| grpo | 1 | 0.50 | 0.60 | 0.80 | 0.63 |" in table and "| gcpo_loo | 1 | 0.25 | 0.50 | - | - |" in table
    assert "old" not in table and all_correct_table({"old": runs["old"]}) == ""


def _dial_runs(effects, share=0.6, seed=0, loo=(0.0, 0.0), dial_seeds=range(201, 209), loo_seeds=range(201, 217)):
    """Issue 72's runs: the dial's four arms on ``dial_seeds`` to step 80 (evaluated at 40 and 80), gcpo_group on the
    other ``loo_seeds`` to step 40, gcpo_loo on ``loo_seeds`` to step 40. Each seed's gcpo_group is at a random start;
    every dial arm is shifted by ``effects[arm] = (accuracy, distinct)`` at step 80, gcpo_loo by ``loo`` at step 40,
    plus a little noise; the dial's arms' all-correct share is ``share`` at every step."""
    rng = np.random.default_rng(seed)
    plan = [(arm, s, (40, 80)) for s in dial_seeds for arm in ("grpo", "gcpo_group", "gcpo_blend25", "gcpo_blend75")]
    plan += [("gcpo_group", s, (40,)) for s in loo_seeds if s not in dial_seeds]
    plan += [("gcpo_loo", s, (40,)) for s in loo_seeds]
    base = {
        s: {40: (rng.uniform(0.4, 0.6), rng.uniform(3.0, 4.5)), 80: (rng.uniform(0.6, 0.8), rng.uniform(3.0, 4.5))}
        for s in loo_seeds
    }
    runs = {}
    for arm, s, steps in plan:
        evals = {0: {"accuracy": 0.2, "distinct_correct": 2.0}}
        for step in steps:
            shift = (
                loo if (arm == "gcpo_loo" and step == 40) else effects.get(arm, (0.0, 0.0)) if step == 80 else (0, 0)
            )
            n = (0.0, 0.0) if arm == "gcpo_group" else (rng.normal(0, 0.01), rng.normal(0, 0.05))
            evals[step] = {
                "accuracy": base[s][step][0] + shift[0] + n[0],
                "distinct_correct": base[s][step][1] + shift[1] + n[1],
            }
        training = {"all_correct_share": {t: share for t in range(1, max(steps) + 1)}}
        runs.setdefault(arm, {})[s] = {
            "evals": evals,
            "warm_seed": s,
            "warm_start_sha256": f"sha{s}",
            "training": training,
        }
    return runs


def test_the_dial_analysis_on_synthetic_runs_with_known_answers():
    from experiments.miniature.report import dial_analysis, dial_tests

    # the dial as the simulator predicts it: blend25 0.2 of Shapley alone's 1.0 over GRPO, blend75 0.7; LOO +0.3
    effects = {"grpo": (0.02, -1.0), "gcpo_blend25": (0.015, -0.8), "gcpo_blend75": (0.005, -0.3)}
    a = dial_analysis(_dial_runs(effects, loo=(0.0, 0.3)))
    assert a["complete"] and a["in"] == a["expected"] == 56 and a["A1"]["seeds"] == list(range(201, 217))
    assert a["A1"]["t"]["mean"] == pytest.approx(0.3, abs=0.05) and "lies above Shapley alone" in a["verdict_a"]
    b1, b2, b3 = (a["B"][h] for h in ("B1", "B2", "B3"))
    assert b1["seeds"] == list(range(201, 209)) and b1["step"] == 80
    # 8 seeds with noise of sd 0.05 an arm: each mean within 0.1 (4 standard errors)
    assert b1["t"]["mean"] == pytest.approx(0.8, abs=0.1) and b1["holm"]["rejected"]
    assert b2["t"]["mean"] == pytest.approx(0.7, abs=0.1) and b3["t"]["mean"] == pytest.approx(0.5, abs=0.1)
    assert all("**confirmed**" in v for v in a["verdicts_b"])
    assert a["fractions"]["gcpo_blend25"] == pytest.approx(0.2, abs=0.1)
    assert a["fractions"]["gcpo_blend75"] == pytest.approx(0.7, abs=0.1)
    assert a["trend"]["mean"] > 0.8 and a["dominated"].startswith("yes: 0.60")
    text = dial_tests(_dial_runs(effects, loo=(0.0, 0.3)))
    assert (
        "56 of 56 runs in at their steps" in text and "| A1 | gcpo_loo − gcpo_group | 40 | D_adj (5.5) | 16 |" in text
    )
    assert "| B2 | gcpo_blend75 − grpo | 80 | distinct_correct (among 16) | 8 |" in text
    assert "Share of all-correct groups in training" in text and "Verdict, A1:" in text

    # no LOO effect, no dial effect, and all-correct groups rare: nothing confirmed, and said so
    flat = dial_analysis(_dial_runs({}, share=0.3))
    assert "Not distinguishable at this resolution" in flat["verdict_a"]
    assert not any(t["holm"]["rejected"] for t in flat["B"].values())
    assert all("**not rejected**" in v for v in flat["verdicts_b"]) and flat["dominated"].startswith("no: 0.30")
    # D_adj needs matched accuracy: leave-one-out 0.1 less accurate is a trade, not a verdict
    traded = dial_analysis(_dial_runs({}, loo=(-0.1, 0.0)))
    assert "Accuracy not matched" in traded["verdict_a"]
    # the other way round: more dose, less diversity, is a rejection the other way, not a confirmation
    reversed_ = dial_analysis(_dial_runs({"gcpo_blend75": (0.0, -0.9), "gcpo_blend25": (0.0, 0.2)}))
    assert "**rejected, the other way**" in reversed_["verdicts_b"][2]


def test_the_dial_verdict_waits_for_every_run_and_refuses_a_seed_of_two_warm_starts():
    from experiments.miniature.report import dial_analysis, dial_tests

    runs = _dial_runs({"grpo": (0.0, -1.0)})
    del runs["gcpo_loo"][216]
    assert not dial_analysis(runs)["complete"] and "verdict_a" not in dial_analysis(runs)
    text = dial_tests(runs)
    assert "55 of 56 runs in at their steps" in text and "gcpo_loo to step 40 15/16" in text
    assert "gcpo_group to step 80 8/8" in text and "gcpo_group to step 40 8/8" in text
    assert "No verdict yet" in text and "Verdict," not in text
    short = _dial_runs({})
    for seed in short["grpo"]:
        del short["grpo"][seed]["evals"][80]  # a run stopped at step 40 is not in at the dial's step
    assert dial_analysis(short)["have"][0] == ("grpo", [], 8) and "No verdict yet" in dial_tests(short)
    mixed = _dial_runs({})
    mixed["gcpo_loo"][203]["warm_start_sha256"] = "another"
    with pytest.raises(ValueError, match="seed 203's arms trained from different warm starts"):
        dial_analysis(mixed)
    assert dial_tests({"grpo": runs["grpo"], "gcpo_group": runs["gcpo_group"]}) == ""  # not this run


def test_the_report_command_adds_the_dial_tests_and_the_all_correct_share_when_a_blend_ran(tmp_path):
    from experiments.miniature.__main__ import main

    start = {"animal": ["tiger", "apple"]}
    for seed in (201, 202):
        for arm in ("grpo", "gcpo_group", "gcpo_blend25", "gcpo_blend75", "gcpo_loo"):
            _write_run(tmp_path, arm, seed, {0: start, 3: {"animal": ["tiger", "lion" if seed == 201 else "wolf"]}})
            folder = tmp_path / "runs" / f"{arm}-seed{seed}"
            for step in (1, 2, 3):
                _write_rollouts(folder, step, {"a": [1.0, 1.0], "b": [1.0, -1.0] if step < 3 else [1.0, 1.0]})
    assert main(["report", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    assert "The dial's confirmation (issue 72, pre-registered): 0 of 56 runs in" in table
    # steps 1 and 2: one of two groups all correct, step 3 both; the last 20 steps' mean (0.5 + 0.5 + 1) / 3
    assert "| arm | runs | step 1 | steps 1-3 |" in table and "| grpo | 2 | 0.50 | 0.67 |" in table
    assert "No verdict yet" in table
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["grpo"]["201"]["training"]["all_correct_share"] == {"1": 0.5, "2": 0.5, "3": 1.0}
