"""The frontier simulator: the task's start, exact metrics, determinism, the training signal, the analysis, the CLI."""

import json
import math

import numpy as np
import pytest
import torch

from experiments.frontier.__main__ import main
from experiments.frontier.arms import Arm
from experiments.frontier.frontier import matched_gap, mean_interval, paired, within_seed_slope
from experiments.frontier.simulate import SimSpec, exact_metrics, simulate, start_logits
from experiments.frontier.task import TaskSpec, build_task
from experiments.miniature.task import CATEGORIES

TASK = build_task()


def test_the_task_is_the_miniatures_answer_distribution():
    """Own words correct, skewed 1/(r+1), at the start's accuracy; the confuser's words wrong; unit embeddings, a
    repeated word identical, words of one category closer than words of two."""
    assert TASK.categories == list(CATEGORIES)
    p = torch.softmax(TASK.logits, -1)
    fruit = TASK.categories.index("fruit")
    own = len(CATEGORIES["fruit"])
    assert TASK.correct[fruit, :own].all() and not TASK.correct[fruit, own:].any()
    assert p[fruit, 0] / p[fruit, 2] == pytest.approx(3.0, rel=1e-9)
    assert (p * TASK.correct).sum(-1) == pytest.approx(
        torch.full((16,), TaskSpec().start_accuracy, dtype=torch.float64), rel=1e-9
    )
    norms = TASK.embeddings.norm(dim=-1)[TASK.valid]
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-12)
    e = TASK.embeddings[fruit, :own]
    within = (e @ e.T)[~torch.eye(own, dtype=torch.bool)].mean()
    animal = TASK.categories.index("animal")
    across = (e @ TASK.embeddings[animal, : len(CATEGORIES["animal"])].T).mean()
    assert within > across + 0.15
    color = TASK.categories.index("color")
    orange = [TASK.embeddings[c, TASK.words[c].index("orange")] for c in (fruit, color)]
    assert torch.equal(orange[0], orange[1])


def test_exact_metrics_agree_with_sampling():
    """Exact accuracy and distinct correct answers of 16 against 4,000 sampled sets of 16 per category."""
    logits = start_logits(TASK, SimSpec(seeds=1, start_jitter=0.5))
    exact = exact_metrics(logits, TASK, 16)
    generator = torch.Generator().manual_seed(0)
    p = torch.softmax(logits[0], -1)
    draws = torch.multinomial(p, 16 * 4000, replacement=True, generator=generator).view(16, 4000, 16)
    correct = torch.gather(TASK.correct, 1, draws.view(16, -1)).view(16, 4000, 16)
    accuracy = correct.double().mean()
    seen = torch.nn.functional.one_hot(draws, TASK.valid.shape[1]).any(dim=2)  # (16, 4000, A)
    distinct = (seen & TASK.correct.unsqueeze(1)).sum(-1).double().mean()
    assert float(exact["accuracy"][0]) == pytest.approx(float(accuracy), abs=0.005)
    assert float(exact["distinct_correct"][0]) == pytest.approx(float(distinct), abs=0.03)


def test_a_run_is_deterministic_given_its_seeds():
    spec = SimSpec(steps=3, eval_every=1, seeds=2, prompts_per_step=8, group_size=4)
    a, b = simulate(Arm("shapley", 1.0), spec, TASK), simulate(Arm("shapley", 1.0), spec, TASK)
    for step in a["evaluations"]:
        for metric in ("accuracy", "distinct_correct"):
            assert np.allclose(a["evaluations"][step][metric], b["evaluations"][step][metric], rtol=0, atol=1e-12)
    other = simulate(Arm("shapley", 1.0), SimSpec(**{**spec.__dict__, "first_seed": 5}), TASK)
    assert not np.allclose(other["evaluations"]["3"]["accuracy"], a["evaluations"]["3"]["accuracy"], atol=1e-6)


def test_grpo_learns_and_full_dose_credit_keeps_more_distinct_correct_answers():
    """The training signal: GRPO raises accuracy from the start and loses distinct answers once it collapses;
    the Shapley credit alone keeps more distinct correct answers than GRPO on every seed (a strong setting:
    lr 20, 20 steps)."""
    spec = SimSpec(steps=20, eval_every=10, seeds=4, lr=20.0)
    grpo = simulate(Arm("grpo"), spec, TASK)["evaluations"]
    shapley = simulate(Arm("shapley"), spec, TASK)["evaluations"]
    assert np.all(np.array(grpo["20"]["accuracy"]) > np.array(grpo["0"]["accuracy"]) + 0.3)
    assert np.all(np.array(grpo["20"]["distinct_correct"]) < np.array(grpo["10"]["distinct_correct"]))
    assert np.all(np.array(shapley["20"]["distinct_correct"]) > np.array(grpo["20"]["distinct_correct"]) + 0.3)


def _run(shape, dose, acc, dist):
    return {"shape": shape, "dose": dose, "evaluations": {"1": {"accuracy": list(acc), "distinct_correct": list(dist)}}}


def test_matched_gap_reads_the_vertical_distance_between_two_curves_at_equal_accuracy():
    """From GRPO (accuracy 0.6) shape a's doses lie 0.5 above the line b's doses lie on: the gap at accuracy x is
    0.5 below 0.5 and falls linearly to 0 at GRPO's 0.6, on every seed (seeds differ by a level)."""
    levels = np.array([0.0, 0.2, -0.1])

    def run(shape, dose, acc, lift=0.0):
        return _run(shape, dose, np.full(3, acc), 2.0 + 3.0 * acc + lift + levels)

    runs = {"grpo": run("grpo", None, 0.6)}
    runs |= {"a-1": run("a", 1.0, 0.5, 0.5), "a-pure": run("a", None, 0.35, 0.5)}
    runs |= {"b-1": run("b", 1.0, 0.45), "b-pure": run("b", None, 0.3)}
    gap = matched_gap(runs, "a", "b", 1)
    assert gap["accuracy_range"] == pytest.approx([0.35, 0.6])
    grid = np.linspace(0.35, 0.6, 21)
    expected = np.where(grid <= 0.5, 0.5, 0.5 * (0.6 - grid) / 0.1)
    assert gap["gap"]["mean"] == pytest.approx(expected.mean(), rel=1e-9)
    assert gap["gap"]["sd"] == pytest.approx(0.0, abs=1e-12)
    assert gap["seeds_higher"] == 3
    assert matched_gap(runs, "b", "a", 1)["gap"]["mean"] == pytest.approx(-expected.mean(), rel=1e-9)


def test_the_within_seed_slope_and_the_adjusted_gap():
    """distinct = 5.5 accuracy + a seed's own level: slope 5.5; an arm that trades accuracy at that rate has an
    adjusted gap of 0."""
    offsets = np.array([0.0, 1.0, -0.5, 0.3])
    runs = {}
    for name, acc in (("grpo", 0.6), ("x", 0.5), ("y", 0.4)):
        a = acc + 0.01 * np.arange(4)
        runs[name] = _run("grpo" if name == "grpo" else "s", 1.0, a, 5.5 * a + offsets)
    assert within_seed_slope(runs, 1) == pytest.approx(5.5, rel=1e-9)
    gap = paired(runs, "x", "grpo", 1, 5.5)
    assert gap["adjusted_distinct_correct"]["mean"] == pytest.approx(0.0, abs=1e-12)
    assert gap["distinct_correct"]["mean"] == pytest.approx(-0.55, rel=1e-9)


def test_mean_interval_is_a_student_t_interval():
    s = mean_interval([1.0, 2.0, 3.0, 4.0])
    assert s["mean"] == pytest.approx(2.5)
    assert s["se"] == pytest.approx(math.sqrt(5 / 3) / 2)
    assert s["ci95"][1] - s["mean"] == pytest.approx(3.182446 * s["se"], rel=1e-6)  # t(0.975, 3)


def test_arm_names_round_trip_and_bad_arms_fail():
    for name in ("grpo", "shapley-0.25", "loo-pure", "dqo-2"):
        assert Arm.parse(name).name == name
    assert Arm.parse("dqo-2").config().quality == "none" and Arm.parse("dqo-2").config().mix_coef == 2.0
    assert Arm.parse("loo-pure").config().method == "loo" and Arm.parse("loo-pure").config().advantage == "shapley"
    for bad in ("shapley", "dqo-pure", "bonus-1", "loo-0"):
        with pytest.raises(ValueError):
            Arm.parse(bad)


def test_the_tiny_cli_writes_the_results_and_the_figure(tmp_path):
    assert main(["--tiny", "--out", str(tmp_path), "--jobs", "1", "--lr", "20"]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "frontier.png").stat().st_size > 10_000
    table = (tmp_path / "table.md").read_text()
    assert "### G = 4, step 4" in table and "| shapley-pure - grpo |" in table
    assert [(p["group_size"], p["step"]) for p in result["panels"]] == [(4, 2), (4, 4)]
    last = result["panels"][-1]
    assert {g["pair"] for g in last["matched_accuracy"]} <= {"shapley - loo", "shapley - dqo", "loo - dqo"}
    arms = {row["arm"] for row in last["arms"]}
    assert arms == {"grpo", "shapley-1", "shapley-pure", "loo-1", "loo-pure", "dqo-2"}
    grpo = next(row for row in last["arms"] if row["arm"] == "grpo")
    assert (
        grpo["accuracy"]["n"] == 3
        and grpo["accuracy"]["mean"] > result["runs"]["4"]["grpo"]["evaluations"]["0"]["accuracy"][0]
    )


def test_from_results_redoes_the_analysis_without_simulating(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["--tiny", "--out", str(first), "--jobs", "1", "--lr", "20", "--no-figure"]) == 0
    assert main(["--from-results", str(first / "results.json"), "--out", str(second), "--no-figure"]) == 0
    a, b = (json.loads((d / "results.json").read_text()) for d in (first, second))
    assert a["panels"] == b["panels"] and a["runs"] == b["runs"] and a["spec"] == b["spec"]
    assert (first / "table.md").read_text() == (second / "table.md").read_text()


def test_the_all_correct_share_is_each_categorys_accuracy_to_the_group_size():
    """Exact: a prompt's G answers are all correct with probability accuracy_c^G; checked against 4,000 sampled
    groups of 8 per category."""
    # a trained-like policy: correct answers raised, so that many groups are all correct
    logits = start_logits(TASK, SimSpec(seeds=1, start_jitter=0.5)) + 3.0 * TASK.correct
    exact = exact_metrics(logits, TASK, 16, group_size=8)
    assert "all_correct_share" not in exact_metrics(logits, TASK, 16)
    p = torch.softmax(logits[0].masked_fill(~TASK.valid, float("-inf")), -1)
    draws = torch.multinomial(p, 8 * 4000, replacement=True, generator=torch.Generator().manual_seed(1))
    correct = torch.gather(TASK.correct, 1, draws).view(16, 4000, 8)
    sampled = correct.all(-1).double().mean()
    assert float(exact["all_correct_share"][0]) == pytest.approx(float(sampled), abs=0.01)
    assert 0.05 < float(exact["all_correct_share"][0]) < 0.95


def test_the_blend_arm_is_grpo_to_shapley_alone_and_its_full_weight_is_shapley_alone_bit_for_bit():
    for name in ("blend-0.25", "blend-1"):
        assert Arm.parse(name).name == name
    assert Arm.parse("blend-0.25").config().advantage == "blend"
    assert Arm.parse("blend-0.25").config().blend_weight == 0.25
    for bad in ("blend-pure", "blend-1.5", "blend-0"):
        with pytest.raises(ValueError):
            Arm.parse(bad)
    spec = SimSpec(steps=4, eval_every=2, seeds=2, prompts_per_step=8, group_size=4, lr=20.0)
    full, shapley = simulate(Arm("blend", 1.0), spec, TASK), simulate(Arm("shapley"), spec, TASK)
    assert full["evaluations"] == shapley["evaluations"]
    small = simulate(Arm("blend", 0.1), spec, TASK)["evaluations"]["4"]["distinct_correct"]
    assert not np.allclose(small, shapley["evaluations"]["4"]["distinct_correct"], atol=1e-6)


def test_the_miniatures_encoder_embeds_the_answer_words():
    """--embedding minilm: all-MiniLM-L6-v2's 384-d unit embeddings (bundled in the virtualenv), a word that answers
    two categories embedded once, words of one category closer than words of two (0.51 against 0.26 on average)."""
    with pytest.raises(ValueError, match="embedding must be one of"):
        TaskSpec(embedding="bert")
    task = build_task(TaskSpec(embedding="minilm"))
    assert task.embeddings.shape[-1] == 384
    norms = task.embeddings.norm(dim=-1)[task.valid]
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-12)
    fruit, color = task.categories.index("fruit"), task.categories.index("color")
    orange = [task.embeddings[c, task.words[c].index("orange")] for c in (fruit, color)]
    assert torch.equal(orange[0], orange[1])
    within, across = [], []
    for c in range(len(task.categories)):
        own = task.embeddings[c][task.correct[c]]
        within.append(float((own @ own.T)[~torch.eye(len(own), dtype=torch.bool)].mean()))
        across.append(float((own @ task.embeddings[(c + 1) % 16][task.correct[(c + 1) % 16]].T).mean()))
    assert np.mean(within) > np.mean(across) + 0.15
