import json
import math
import subprocess
import sys

import pytest

from gcpo_core.cli import main

ROLLOUTS = [
    {"group": "p1", "reward": 1, "embedding": [1.0, 0.0], "id": "a"},
    {"group": "p2", "reward": -1, "embedding": [0.3, 0.9]},
    {"group": "p1", "reward": 1, "embedding": [1.0, 0.0]},
    {"group": "p1", "reward": 1, "embedding": [0.0, 1.0]},
    {"group": "p1", "reward": 0, "embedding": [0.7, 0.7]},
    {"group": "p2", "reward": 1, "embedding": [0.2, 0.8]},
]


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_credit_adds_fields_in_input_order(tmp_path):
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(_write(tmp_path / "in.jsonl", ROLLOUTS)), "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r.get("id") for r in rows][:1] == ["a"] and len(rows) == 6
    for original, row in zip(ROLLOUTS, rows):
        assert {k: row[k] for k in original} == original
    assert [rows[i]["shapley"] for i in (0, 2, 3, 4)] == pytest.approx(
        [0.5 * math.log(3), 0.5 * math.log(3), math.log(2), 0.0]
    )
    assert rows[1]["quality"] == 0.0 and rows[5]["quality"] == 1.0
    assert rows[1]["advantage"] < 0 < rows[5]["advantage"]


def test_flags_select_the_estimator(tmp_path):
    src = _write(tmp_path / "in.jsonl", ROLLOUTS)
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(src), "-o", str(out), "--method", "loo"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["shapley"] == pytest.approx(math.log(1.5))


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"group": "p1", "reward": NaN, "embedding": [1, 0]}', "in.jsonl:3: 'reward' must be a finite number"),
        ('{"group": 7, "reward": 1, "embedding": [1, 0]}', "in.jsonl:3: 'group' must be a string"),
        ('{"group": "p1", "reward": 1, "embedding": [1, 0, 2]}', "in.jsonl:3: embedding has 3 dimensions"),
        ('{"group": "p1", "reward": 1, "embedding": [0, 0]}', "in.jsonl:3: 'embedding' is all zeros"),
        ('{"group": "p1", "reward": 1}', "in.jsonl:3: needs an 'embedding' (list of numbers) or a 'text'"),
        ('{"group": "p1", "reward": 1, "embedding": []}', "in.jsonl:3: 'embedding' must be a non-empty list"),
        ('{"group": "p1", "reward": 1, "text": "x"}', "in.jsonl:3: has 'text' but earlier lines have 'embedding'"),
        ('{"group": "p1", "reward": 1, "embedding": ["x", 1]}', "in.jsonl:3: 'embedding' must hold only finite"),
        ("[1, 2]", "in.jsonl:3: expected a JSON object"),
        ("{oops", "in.jsonl:3: not valid JSON"),
    ],
)
def test_a_bad_line_exits_non_zero_naming_it_and_writes_nothing(tmp_path, capsys, line, message):
    src = _write(tmp_path / "in.jsonl", ROLLOUTS[:2] + [line] + ROLLOUTS[2:])
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(src), "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["in.jsonl"]


def test_bad_config_values_are_reported(tmp_path, capsys):
    src = _write(tmp_path / "in.jsonl", ROLLOUTS)
    assert main(["credit", str(src), "--permutations", "3"]) == 2
    assert "permutations must be an integer in [4" in capsys.readouterr().err


def test_console_script_reads_stdin_and_writes_stdout():
    text = "".join(json.dumps(r) + "\n" for r in ROLLOUTS)
    proc = subprocess.run(
        [sys.executable, "-m", "gcpo_core.cli", "credit", "-"], input=text, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 6
    assert "6 rollouts in 2 groups" in proc.stderr


def test_text_input_is_embedded_with_the_configured_encoder(tmp_path):
    rows = [
        {"group": "q", "reward": 1, "text": "Add 2 and 3 to get 5.\nAnswer: 5"},
        {"group": "q", "reward": 1, "text": "Add 2 and 3 to get 5.\nAnswer: 5"},
        {"group": "q", "reward": 0, "text": "2 times 3 is 6.\nAnswer: 6"},
    ]
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(_write(tmp_path / "in.jsonl", rows)), "-o", str(out), "--device", "cpu"]) == 0
    credited = [json.loads(line) for line in out.read_text().splitlines()]
    assert credited[0]["shapley"] == pytest.approx(0.5 * math.log(3))  # two copies share log 3
    assert credited[2]["shapley"] == 0.0
