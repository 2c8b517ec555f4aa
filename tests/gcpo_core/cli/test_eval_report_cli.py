import json

import matplotlib.image as mpimg
import pytest

from gcpo_core.cli import main


def _gens(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_two_runs_side_by_side_with_tables_and_plots(tmp_path, capsys):
    run_a = _gens(
        tmp_path / "a.jsonl",
        [
            {
                "benchmark": "toy",
                "id": str(i),
                "answer": "7",
                "responses": ["3 + 4 = 7\nAnswer: 7", "14 / 2 = 7\nAnswer: 7", "Answer: 8", "seven indeed\nAnswer: 7"],
            }
            for i in range(3)
        ],
    )
    run_b = _gens(
        tmp_path / "b.jsonl",
        [
            {
                "benchmark": "toy",
                "id": str(i),
                "answer": "7",
                "responses": ["3 + 4 = 7\nAnswer: 7"] * 2 + ["Answer: 9"] * 2,
            }
            for i in range(3)
        ],
    )
    out = tmp_path / "eval"
    assert (
        main(["eval", "--run", f"gcpo={run_a}", "--run", f"grpo={run_b}", "--out-dir", str(out), "--device", "cpu"])
        == 0
    )
    table = capsys.readouterr().out
    assert "| gcpo | toy | 3 | 4 | 75.0% |" in table and "| grpo | toy | 3 | 4 | 50.0% |" in table
    results = json.loads((out / "results.json").read_text())
    assert results["gcpo"]["toy"]["correct_vendi"] > results["grpo"]["toy"]["correct_vendi"]
    assert abs(results["grpo"]["toy"]["correct_self_bleu"] - 100.0) < 1e-9
    for name in ("pass_at_k_toy.png", "accuracy_vs_diversity.png"):
        assert float(mpimg.imread(out / name).std()) > 0.05
    assert (out / "results.csv").read_text().splitlines()[0].startswith("run,benchmark,")


def test_generation_without_vllm_is_a_clear_error(tmp_path, capsys, shared_data):
    code = main(
        [
            "eval",
            "--generate",
            str(tmp_path),  # a folder: what is in it is vLLM's to read
            "--benchmark",
            str(shared_data / "amc23.jsonl"),
            "--out-dir",
            str(tmp_path),
            "--no-embeddings",
        ]
    )
    assert code == 2 and "generation needs vLLM" in capsys.readouterr().err


def test_bad_inputs_name_the_problem(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err
    assert main(["eval"]) == 2
    assert "nothing to evaluate" in capsys.readouterr().err
    assert main(["eval", "--run", "noequals"]) == 2


GOOD = '{"benchmark": "toy", "id": 1, "answer": "7", "responses": ["Answer: 7", "Answer: 8"]}\n'


@pytest.mark.parametrize(
    "content, flags, message",
    [
        # the four tracebacks of issue 46
        ("[1, 2]\n", [], "gens.jsonl:1: expected a JSON object, got an array"),
        ('{"answer": "7", "responses": []}\n', [], "gens.jsonl:1: 'responses' is empty"),
        (GOOD, ["--ks", "0"], "--ks 0: must be an integer >= 1 (pass@k needs k >= 1"),
        (GOOD, ["--ks", "2", "-1"], "--ks -1: must be an integer >= 1 (pass@k needs k >= 1"),
        # flags accepted though meaningless
        (GOOD, ["--cluster-threshold", "nan"], "--cluster-threshold nan: must be a cosine, in [-1, 1]"),
        (GOOD, ["--cluster-threshold", "5"], "--cluster-threshold 5.0: must be a cosine, in [-1, 1]"),
        (
            GOOD,
            ["--ks", "1", "1000"],
            "--ks 1000: run 'gens' has 2 sample(s) per problem on toy (its fewest); pass@k needs 1 <= k <= 2",
        ),
        (GOOD, ["--ks", "1", "100000000000000000000"], "--ks 100000000000000000000: must be at most 2^63 - 1"),
        (GOOD, ["--top-p", "0"], "--top-p 0.0: must be a finite number in (0, 1]"),
        (GOOD, ["-k", "0"], "-k/--samples 0: must be an integer >= 1"),
        (GOOD, ["--temperature", "nan"], "--temperature nan: must be a finite number >= 0"),
        # messages that left out where
        (
            '{"answer": "7", "respo',
            [],
            "gens.jsonl:1: not valid JSON (Unterminated string starting at column 17: the line ends before its JSON",
        ),
        (GOOD.encode("utf-16"), [], "gens.jsonl:1: not UTF-8 text (byte 0xff at column 1); save the file as UTF-8"),
        (b"\x89PNG\r\n\x1a\n\x00", [], "gens.jsonl:1: not UTF-8 text (byte 0x89 at column 1)"),
        (GOOD, ["--run", "a="], "--run a=: no file after '=' (NAME=GENERATIONS.jsonl)"),
        (GOOD, ["--run", "=x.jsonl"], "--run =x.jsonl: no name before '='"),
        # fields of the wrong kind
        ('{"answer": [7], "responses": ["7"]}', [], "gens.jsonl:1: 'answer' (the gold answer) must be a string or a"),
        ('{"benchmark": 3, "answer": "7", "responses": ["7"]}', [], "gens.jsonl:1: 'benchmark' must be a string"),
        ('{"id": {"a": 1}, "answer": "7", "responses": ["7"]}', [], "'id' must be a string or an integer, got an"),
        ('{"answer": "7", "output": 7}', [], "gens.jsonl:1: 'output' (one sample, verl's dump format) must be a"),
        ('{"problem": ["x"], "answer": "7", "output": "7"}', [], "gens.jsonl:1: 'problem' must be a string"),
    ],
)
def test_a_bad_line_or_flag_is_one_line_naming_it_and_writes_nothing(tmp_path, capsys, content, flags, message):
    gens = tmp_path / "gens.jsonl"
    gens.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "eval"
    assert main(["eval", str(gens), "--no-embeddings", "--out-dir", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("gcpo eval: ") and err.count("\n") == 1, err
    assert not out.exists()


def test_a_bad_benchmark_file_names_it(tmp_path, capsys):
    gens = _gens(tmp_path / "gens.jsonl", [{"id": "1", "responses": ["Answer: 7"]}])
    bad_jsonl = tmp_path / "bench.jsonl"
    bad_jsonl.write_text('{"id": "1", "problem": "p", "answer": "7"}\n{"id": "2", "problem": "q"}\n')
    assert main(["eval", str(gens), "--benchmark", str(bad_jsonl), "--no-embeddings"]) == 2
    assert f"{bad_jsonl}:2: no gold answer" in capsys.readouterr().err
    bad_parquet = tmp_path / "val_x.parquet"
    bad_parquet.write_bytes(b"not parquet at all")
    assert main(["eval", str(gens), "--benchmark", str(bad_parquet), "--no-embeddings"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gcpo eval: {bad_parquet}: not a readable parquet file (") and err.count("\n") == 1
    assert main(["eval", str(gens), "--benchmark", str(tmp_path / "none.parquet")]) == 2
    assert f"--benchmark {tmp_path / 'none.parquet'}: no such file" in capsys.readouterr().err


def test_without_embeddings_and_without_two_correct_solutions_nothing_but_the_result_reaches_stderr(tmp_path, capsys):
    """The accuracy-vs-diversity plot has no point then: it says so instead of matplotlib warning of an empty
    legend."""
    gens = _gens(tmp_path / "gens.jsonl", [{"benchmark": "toy", "answer": "7", "responses": ["Answer: 7", "x"]}])
    out = tmp_path / "eval"
    assert main(["eval", str(gens), "--no-embeddings", "--out-dir", str(out)]) == 0
    assert capsys.readouterr().err == f"\nresults and plots in {out}/\n"
    assert float(mpimg.imread(out / "accuracy_vs_diversity.png").std()) > 0.05


def test_report_command_writes_the_page(tmp_path, capsys):
    from tests.gcpo_core.evaluation.test_credit_report import _record

    dump = _gens(tmp_path / "credit_step000005.jsonl", [_record(5, "p")])
    assert main(["report", str(dump), "-o", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "index.html").exists() and str(tmp_path / "r") in capsys.readouterr().out
    assert main(["report", str(tmp_path / "none")]) == 2


def test_a_k_beyond_the_samples_to_draw_is_refused_before_sampling(tmp_path, capsys):
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"id": "1", "problem": "3 + 4?", "answer": "7"}) + "\n")
    out = tmp_path / "eval"
    argv = ["eval", "--generate", str(tmp_path), "--benchmark", str(bench), "-k", "2", "--ks", "1", "4"]
    assert main([*argv, "--out-dir", str(out), "--no-embeddings"]) == 2
    assert capsys.readouterr().err == "gcpo eval: --ks 4: -k/--samples 2 samples per problem; pass@k needs k <= 2\n"
    assert not out.exists()
