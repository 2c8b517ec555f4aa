import json
import math

import pytest

from recipe.gcpo.miniature.report import collect, eval_metrics, final_table, paired_table, plot, prompt_metrics


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
    assert half["correct_entropy"] == pytest.approx(math.log(2)) and prompt_metrics("animal", ["x"])["correct_entropy"] == 0


def _write_run(root, arm, seed, outputs_by_step, step_s=3.0):
    folder = root / "runs" / f"{arm}-seed{seed}"
    (folder / "heldout").mkdir(parents=True)
    for step, outputs in outputs_by_step.items():
        lines = [{"input": f"p-{c}", "output": o, "gts": c, "score": 0, "step": step}
                 for c, outs in outputs.items() for o in outs]
        (folder / "heldout" / f"{step}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    metrics = [{"step": s, "data": {"timing_s/step": 99.0 if s == 1 else step_s, "actor/entropy": 1.0 / s}}
               for s in (1, 2, 3)]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in metrics) + "\n")
    (folder / "done.json").write_text(json.dumps({"arm": arm, "seed": seed, "wall_s": 100.0}))


def test_the_table_is_mean_and_sd_over_seeds_at_the_last_shared_evaluation(tmp_path):
    start = {"animal": ["tiger", "apple"], "fruit": ["apple", "tiger"]}
    _write_run(tmp_path, "grpo", 1, {0: start, 3: {"animal": ["tiger", "tiger"], "fruit": ["apple", "apple"]}})
    _write_run(tmp_path, "grpo", 2, {0: start, 3: {"animal": ["tiger", "lion"], "fruit": ["apple", "apple"]}})
    _write_run(tmp_path, "gcpo_group", 1, {0: start, 3: {"animal": ["tiger", "lion"], "fruit": ["apple", "pear"]}},
               step_s=5.0)
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


def test_uneven_dumps_and_missing_runs_are_errors(tmp_path):
    _write_run(tmp_path, "grpo", 1, {0: {"animal": ["tiger", "lion"], "fruit": ["apple"]}})
    with pytest.raises(ValueError, match="different numbers of samples"):
        eval_metrics(tmp_path / "runs/grpo-seed1/heldout/0.jsonl")
    with pytest.raises(ValueError, match="no finished runs"):
        final_table({})
