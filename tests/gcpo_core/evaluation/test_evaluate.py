import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gcpo_core.evaluation.evaluate import (
    ProblemGenerations,
    benchmark_metrics,
    generate_with_vllm,
    load_benchmark,
    load_generations,
    pass_at_k,
    score_generations,
)


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_the_fraction_of_k_subsets_holding_a_correct_sample(case):
    n, c, k = case
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    brute = sum(any(s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 2, 5)


def _scored(correct_lists, texts=None):
    problems = []
    for i, correct in enumerate(correct_lists):
        responses = texts[i] if texts else [f"Answer: {7 if ok else j}" for j, ok in enumerate(correct)]
        problems.append(ProblemGenerations("b", str(i), f"p{i}", "7", responses))
    return score_generations(problems, progress=False)


def test_accuracy_pass_at_k_and_answer_diversity():
    scored = _scored([[True, False, False, False], [False] * 4, [True] * 4])
    metrics = benchmark_metrics(scored)
    assert metrics["avg@4"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert metrics["pass@1"] == pytest.approx(metrics["avg@4"])
    assert metrics["pass@4"] == pytest.approx(2 / 3)
    assert metrics["pass@2"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert metrics["distinct_answers"] == pytest.approx((4 + 4 + 1) / 3)  # answers 7,1,2,3 / 0,1,2,3 / 7
    assert metrics["pass@3"] == pytest.approx((0.75 + 0 + 1) / 3)  # every k up to the sample count
    assert metrics["distinct_correct_answers"] == pytest.approx(1.0)
    assert metrics["problems_with_2plus_correct"] == 1


def test_diversity_of_correct_solutions_with_and_without_embeddings():
    same = ["3 + 4 = 7\nAnswer: 7"] * 3
    varied = ["3 + 4 = 7\nAnswer: 7", "14 / 2 = 7\nAnswer: 7", "seven\nAnswer: 7"]
    scored = _scored([[True] * 3, [True] * 3], texts=[same, varied])
    surface = benchmark_metrics(scored)
    assert "correct_vendi" not in surface
    assert 0 < surface["correct_distinct_2"] < 1 and 0 < surface["correct_self_bleu"] < 100
    lookup = {t: v for t, v in zip(varied, np.eye(3))}
    with_embeddings = benchmark_metrics(scored, embed=lambda texts: np.stack([lookup[t] for t in texts]))
    assert with_embeddings["correct_vendi"] == pytest.approx((1 + 3) / 2)
    assert with_embeddings["correct_clusters"] == pytest.approx((1 + 3) / 2)


def test_real_gsm8k_model_outputs_give_the_recorded_accuracy(shared_data):
    rows = [json.loads(line) for line in (shared_data / "rollout_groups.jsonl").read_text().splitlines()]
    problems = [ProblemGenerations("gsm8k", r["id"], r["problem"], r["answer"], r["responses"]) for r in rows]
    metrics = benchmark_metrics(score_generations(problems, progress=False))
    recorded = np.mean([np.mean(r["correct_math_verify"]) for r in rows])
    assert metrics["avg@4"] == pytest.approx(recorded) == pytest.approx(0.369, abs=1e-3)
    assert metrics["pass@4"] > metrics["pass@2"] > metrics["pass@1"]


def test_generation_files_in_both_formats_and_gold_from_a_benchmark(tmp_path, shared_data):
    benchmark = load_benchmark(shared_data / "aime24.jsonl")
    assert len(benchmark) == 30 and benchmark[0]["benchmark"] == "aime24"
    first = benchmark[0]
    per_problem = tmp_path / "gens.jsonl"
    per_problem.write_text(
        json.dumps({"benchmark": "aime24", "id": first["id"], "responses": ["Answer: 1", "x"]}) + "\n"
    )
    [loaded] = load_generations(per_problem, benchmark)
    assert loaded.answer == first["answer"] and loaded.responses == ["Answer: 1", "x"]
    verl_dump = tmp_path / "0.jsonl"  # verl's validation_data_dir: one sample per line
    verl_dump.write_text(
        "".join(
            json.dumps({"input": first["problem"], "output": o, "gts": first["answer"], "score": 0.0}) + "\n"
            for o in ("a", "b", "c")
        )
    )
    [grouped] = load_generations(verl_dump)
    assert grouped.responses == ["a", "b", "c"] and grouped.answer == first["answer"]
    orphan = tmp_path / "orphan.jsonl"
    orphan.write_text(json.dumps({"problem": "unknown", "responses": ["x"]}) + "\n")
    with pytest.raises(ValueError, match="orphan.jsonl:1: no gold answer"):
        load_generations(orphan, benchmark)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"answer": "1", "responses": "not a list"}) + "\n")
    with pytest.raises(ValueError, match="'responses' must be a list of strings"):
        load_generations(broken)


@pytest.mark.parametrize(
    "content, message",
    [
        (
            '{"answer": "7", "responses": ["7"]}\n'.encode("utf-16"),
            r"gens.jsonl:1: not UTF-8 text \(byte 0xff at column 1\)",
        ),
        (b'{"answer": "7", "responses": ["7"]}\n[1, 2]\n', "gens.jsonl:2: expected an object .*, got an array"),
        (b'{"answer": "7", "responses": []}\n', "gens.jsonl:1: 'responses' is empty"),
        (b'{"answer": true, "responses": ["7"]}\n', "gens.jsonl:1: 'answer' .* must be a string or a finite number"),
        (b'{"answer": "7", "responses": ["7"], "benchmark": ["a"]}\n', "gens.jsonl:1: 'benchmark' must be a string"),
        (b'{"answer": "7", "res', "gens.jsonl:1: not valid JSON"),
    ],
)
def test_a_bad_generation_file_is_a_value_error_naming_file_and_line(tmp_path, content, message):
    gens = tmp_path / "gens.jsonl"
    gens.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        load_generations(gens)


def test_gold_answers_given_as_json_numbers_are_read_as_text(tmp_path):
    bench = tmp_path / "bench.jsonl"
    bench.write_text('{"id": 3, "problem": "p", "answer": 204}\n{"problem": "q", "answer": 0.5}\n')
    assert [(b["id"], b["answer"]) for b in load_benchmark(bench)] == [("3", "204"), ("1", "0.5")]


def test_generation_uses_the_prepared_prompt_or_the_instruction():
    seen = {}

    class FakeLLM:
        def chat(self, conversations, params):
            seen["conversations"], seen["params"] = conversations, params
            return [
                SimpleNamespace(outputs=[SimpleNamespace(text=f"Answer: {i}") for i in range(params["n"])])
                for _ in conversations
            ]

    problems = [
        {"benchmark": "b", "id": "0", "problem": "1+1?", "answer": "2", "prompt": None},
        {
            "benchmark": "b",
            "id": "1",
            "problem": "2+2?",
            "answer": "4",
            "prompt": [{"role": "user", "content": "as prepared"}],
        },
    ]
    out = generate_with_vllm("m", problems, samples=3, llm_factory=lambda model, tp, seed: FakeLLM())
    assert [len(p.responses) for p in out] == [3, 3]
    assert "1+1?" in seen["conversations"][0][0]["content"] and "Answer:" in seen["conversations"][0][0]["content"]
    assert seen["conversations"][1] == [{"role": "user", "content": "as prepared"}]
    assert seen["params"]["temperature"] == 0.6 and seen["params"]["top_p"] == 0.95


def test_verl_dumps_are_split_by_benchmark_when_benchmark_files_are_given(tmp_path, shared_data):
    aime = load_benchmark(shared_data / "aime24.jsonl")
    math500 = load_benchmark(shared_data / "math500.jsonl")
    dump = tmp_path / "100.jsonl"  # verl's dumps carry the decoded chat prompt and no benchmark name
    lines = []
    for problem in (aime[0], math500[0]):
        prompt = f"<|im_start|>user\nSolve step by step.\n\n{problem['problem']}\n\nAnswer: ...<|im_end|>"
        lines += [json.dumps({"input": prompt, "output": o, "gts": problem["answer"]}) for o in ("a", "b")]
    dump.write_text("\n".join(lines) + "\n")
    loaded = load_generations(dump, aime + math500)
    assert sorted(p.benchmark for p in loaded) == ["aime24", "math500"]
    assert all(len(p.responses) == 2 for p in loaded)


def test_null_ids_do_not_merge_different_problems(tmp_path):
    gens = tmp_path / "gens.jsonl"
    gens.write_text(
        json.dumps({"id": None, "problem": "1+1", "answer": "2", "responses": ["2"]})
        + "\n"
        + json.dumps({"id": None, "problem": "2+3", "answer": "5", "responses": ["5"]})
        + "\n"
    )
    loaded = load_generations(gens)
    assert [(p.answer, p.responses) for p in loaded] == [("2", ["2"]), ("5", ["5"])]
