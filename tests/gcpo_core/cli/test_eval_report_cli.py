import json

import matplotlib.image as mpimg

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
            "/models/x",
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


def test_report_command_writes_the_page(tmp_path, capsys):
    from tests.gcpo_core.evaluation.test_credit_report import _record

    dump = _gens(tmp_path / "credit_step000005.jsonl", [_record(5, "p")])
    assert main(["report", str(dump), "-o", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "index.html").exists() and str(tmp_path / "r") in capsys.readouterr().out
    assert main(["report", str(tmp_path / "none")]) == 2
