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
        ('{"group": 7.5, "reward": 1, "embedding": [1, 0]}', "in.jsonl:3: 'group' must be a string or an integer"),
        ('{"group": true, "reward": 1, "embedding": [1, 0]}', "in.jsonl:3: 'group' must be a string or an integer"),
        ('{"reward": 1, "embedding": [1, 0]}', "in.jsonl:3: 'group' is missing"),
        ('{"group": "p1", "embedding": [1, 0]}', "in.jsonl:3: 'reward' is missing"),
        (
            '{"group": null, "reward": 1, "embedding": [1, 0]}',
            "in.jsonl:3: 'group' must be a string or an integer, got null",
        ),
        (
            '{"group": "p1", "reward": 1%s, "embedding": [1, 0]}' % ("0" * 400),
            "in.jsonl:3: 'reward' must be a finite number",
        ),
        ('{"group": "p1", "reward": 1, "embedding": [1e999, 0]}', "in.jsonl:3: 'embedding' must hold only finite"),
        (
            '{"group": "p1", "reward": 1, "embedding": [1, 0], "text": "x"}',
            "in.jsonl:3: has both 'text' and 'embedding'",
        ),
        (
            '{"group": "p1", "reward": 1, "embedding": [1, 0], "note": {"x": NaN}}',
            "in.jsonl:3: 'note' must hold only finite numbers (JSON has no NaN or infinity)",
        ),
        (
            '{"group": "p1", "reward": 1, "embedding": [1, 0], "note": ' + "[" * 100000 + "]" * 100000 + "}",
            "in.jsonl:3: JSON nested too deeply to read",
        ),
        (
            '{"group": "p1", "reward": 1, "embedding": [1, 0], "note": "\\ud800"}',
            "in.jsonl:3: 'note' holds a lone surrogate",
        ),
        ('{"group": "p1", "reward": 1, "embedding": [1, 0], "x": 1%s}' % ("0" * 5000), "in.jsonl:3: not valid JSON"),
        ('{"group": "p1", "reward": 1, "embedding": [1, 0]', "in.jsonl:3: not valid JSON"),
        ('{"group": "p1", "reward": 1, "embedding": [1, 0, 2]}', "in.jsonl:3: embedding has 3 dimensions"),
        ('{"group": "p1", "reward": 1, "embedding": [0, 0]}', "in.jsonl:3: 'embedding' is all zeros"),
        ('{"group": "p1", "reward": 1}', "in.jsonl:3: needs an 'embedding' (list of numbers) or a 'text'"),
        ('{"group": "p1", "reward": 1, "embedding": []}', "in.jsonl:3: 'embedding' must be a non-empty list"),
        ('{"group": "p1", "reward": 1, "text": "x"}', "in.jsonl:3: has 'text' but earlier lines have 'embedding'"),
        ('{"group": "p1", "reward": 1, "embedding": ["x", 1]}', "in.jsonl:3: 'embedding' must hold only finite"),
        ("[1, 2]", "in.jsonl:3: expected a JSON object"),
        ("{oops", "in.jsonl:3: not valid JSON"),
        # a finite reward the group normalisation cannot square: what is wrong with it, not "NaN or inf"
        ('{"group": "p1", "reward": 1e308, "embedding": [1, 0]}', "in.jsonl:3: 'reward' 1e+308 is too large"),
        ('{"group": "p1", "reward": -2e150, "embedding": [1, 0]}', "at most 1e+150"),
        # a line cut short: where it ends, not "column 1" of the line after the line break
        (
            '{"group": "p1", "reward": 1, "embed',
            "in.jsonl:3: not valid JSON (Unterminated string starting at column 30: the line ends before its JSON "
            "does; was it cut short?)",
        ),
        (
            '{"group": "p1", "reward": 1,',
            "not valid JSON (Expecting property name enclosed in double quotes at column 29: the line ends before",
        ),
        ('{"group": "p1" "reward": 1}', "in.jsonl:3: not valid JSON (Expecting ',' delimiter at column 16)"),
    ],
)
def test_a_bad_line_exits_non_zero_naming_it_and_writes_nothing(tmp_path, capsys, line, message):
    src = _write(tmp_path / "in.jsonl", ROLLOUTS[:2] + [line] + ROLLOUTS[2:])
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["in.jsonl"]


def test_bad_config_values_are_reported(tmp_path, capsys):
    src = _write(tmp_path / "in.jsonl", ROLLOUTS)
    assert main(["credit", str(src), "--permutations", "3"]) == 2
    err = capsys.readouterr().err  # the engine's reason, after the flag that set the value
    assert err == "gcpo credit: --permutations 3: must be an integer in [4, 1000000]\n"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--method", "banana"], "gcpo credit: argument --method: invalid choice: 'banana'"),
        (["--permutations", "x"], "gcpo credit: argument --permutations: invalid int value: 'x'"),
        (["--bogus"], "gcpo credit: unrecognized arguments: --bogus (see gcpo credit --help)"),
        (
            ["--max-group-size", "5000"],
            "gcpo credit: --max-group-size 5000: must be an integer in [1, 4096]",
        ),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(tmp_path, capsys, flags, message):
    src = _write(tmp_path / "in.jsonl", ROLLOUTS)
    assert main(["credit", str(src), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def test_integer_group_ids_are_accepted_and_kept(tmp_path):
    rows = [{**r, "group": 7 if r["group"] == "p1" else 10**30} for r in ROLLOUTS]
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(_write(tmp_path / "in.jsonl", rows)), "-o", str(out)]) == 0
    credited = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["group"] for r in credited] == [r["group"] for r in rows]
    assert [credited[i]["shapley"] for i in (0, 2, 3, 4)] == pytest.approx(
        [0.5 * math.log(3), 0.5 * math.log(3), math.log(2), 0.0]
    )


def test_a_group_id_given_as_both_number_and_string_is_refused(tmp_path, capsys):
    rows = [dict(ROLLOUTS[0], group=7), dict(ROLLOUTS[2], group="7")]
    assert main(["credit", str(_write(tmp_path / "in.jsonl", rows))]) == 2
    assert 'in.jsonl:2: group "7" is a string here but the number 7 on line 1' in capsys.readouterr().err


def test_a_group_above_the_size_limit_names_the_group_and_the_flag(tmp_path, capsys):
    rows = [{"group": "big", "reward": 1, "embedding": [1.0, float(i)]} for i in range(5)]
    assert main(["credit", str(_write(tmp_path / "in.jsonl", rows)), "--max-group-size", "4"]) == 2
    err = capsys.readouterr().err
    assert 'in.jsonl:5: group "big" has more than --max-group-size 4 rollouts' in err
    assert "up to 4096" in err and err.count("\n") == 1


def test_summary_says_one_group_not_one_groups(tmp_path, capsys):
    rows = [r for r in ROLLOUTS if r["group"] == "p1"]
    assert main(["credit", str(_write(tmp_path / "in.jsonl", rows)), "-o", str(tmp_path / "o.jsonl")]) == 0
    assert "4 rollouts in 1 group;" in capsys.readouterr().err


def test_non_utf8_input_names_the_file_and_line(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    latin1_line = b'{"group": "p\xe9", "reward": 1, "embedding": [1, 0]}\n'
    src.write_bytes(json.dumps(ROLLOUTS[0]).encode() + b"\n" + latin1_line)
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "in.jsonl:2: not UTF-8 text (byte 0xe9 at column 13)" in err and err.count("\n") == 1
    assert not out.exists()


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in ROLLOUTS).encode())
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(src), "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 6


def test_empty_input_gives_empty_output_and_exit_0(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text("\n  \n")
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(src), "-o", str(out)]) == 0
    assert out.read_text() == "" and "no rollouts in" in capsys.readouterr().err


def test_an_engine_value_error_is_one_line(tmp_path, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise ValueError("rewards must be finite\nsecond line")

    monkeypatch.setattr("gcpo_core.credit.compute.compute_credit", refuse)
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(_write(tmp_path / "in.jsonl", ROLLOUTS)), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gcpo credit: ") and "rewards must be finite" in err and err.count("\n") == 1
    assert not out.exists()


def test_non_finite_credit_is_never_written(tmp_path, capsys, monkeypatch):
    import torch

    import gcpo_core.credit.compute

    real = gcpo_core.credit.compute.compute_credit

    def poisoned(*args, **kwargs):
        result = real(*args, **kwargs)
        result.advantage[3] = torch.nan
        return result

    monkeypatch.setattr(gcpo_core.credit.compute, "compute_credit", poisoned)
    out = tmp_path / "out.jsonl"
    assert main(["credit", str(_write(tmp_path / "in.jsonl", ROLLOUTS)), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "in.jsonl:4: 'advantage' came out non-finite (nan)" in err and err.count("\n") == 1
    assert not out.exists()


def test_epsilon_zero_on_a_constant_group_writes_no_nan(tmp_path, capsys):
    rows = [{"group": "g", "reward": 1, "embedding": [1.0, 0.0]}] * 2
    out = tmp_path / "out.jsonl"
    code = main(["credit", str(_write(tmp_path / "in.jsonl", rows)), "-o", str(out), "--epsilon", "0"])
    if code == 0:  # an engine that defines this case
        assert all(math.isfinite(json.loads(line)["advantage"]) for line in out.read_text().splitlines())
    else:
        assert code == 2 and capsys.readouterr().err.count("\n") == 1 and not out.exists()


def test_a_bug_prints_a_traceback_and_says_it_is_a_bug(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("oops")

    monkeypatch.setattr("gcpo_core.credit.compute.compute_credit", broken)
    assert main(["credit", str(_write(tmp_path / "in.jsonl", ROLLOUTS))]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'oops'" in err
    assert err.rstrip().splitlines()[-1].startswith("gcpo credit: a bug in gcpo")


def test_console_script_reads_stdin_and_writes_stdout():
    text = "".join(json.dumps(r) + "\n" for r in ROLLOUTS)
    proc = subprocess.run(
        [sys.executable, "-m", "gcpo_core.cli", "credit", "-"], input=text, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 6
    assert "6 rollouts in 2 groups" in proc.stderr


@pytest.mark.parametrize("verbose", [False, True])
def test_text_input_is_embedded_with_the_configured_encoder(tmp_path, capsys, verbose):
    rows = [
        {"group": "q", "reward": 1, "text": "Add 2 and 3 to get 5.\nAnswer: 5"},
        {"group": "q", "reward": 1, "text": "Add 2 and 3 to get 5.\nAnswer: 5"},
        {"group": "q", "reward": 0, "text": "2 times 3 is 6.\nAnswer: 6"},
    ]
    out = tmp_path / "out.jsonl"
    flags = ["--device", "cpu"] + (["-v"] if verbose else [])
    assert main(["credit", str(_write(tmp_path / "in.jsonl", rows)), "-o", str(out), *flags]) == 0
    credited = [json.loads(line) for line in out.read_text().splitlines()]
    assert credited[0]["shapley"] == pytest.approx(0.5 * math.log(3))  # two copies share log 3
    assert credited[2]["shapley"] == 0.0
    # transformers' weight-loading progress bar only with -v
    assert ("Loading weights" in capsys.readouterr().err) == verbose


def test_credit_writes_a_dump_that_report_turns_into_a_report(tmp_path, capsys):
    """`gcpo report` without a training run: `gcpo credit --dump DIR` writes what the trainer's dumps hold."""
    from gcpo_core.evaluation.dump import read_credit_dump

    src = _write(tmp_path / "in.jsonl", ROLLOUTS)
    out, dump = tmp_path / "out.jsonl", tmp_path / "dump"
    assert main(["credit", str(src), "-o", str(out), "--dump", str(dump), "--dump-step", "7"]) == 0
    credited = [json.loads(line) for line in out.read_text().splitlines()]
    records = {r["uid"]: r for r in read_credit_dump(dump)}
    assert sorted(records) == ["p1", "p2"] and all(r["step"] == 7 for r in records.values())
    p1 = records["p1"]
    assert p1["shapley"] == pytest.approx([credited[i]["shapley"] for i in (0, 2, 3, 4)])
    assert p1["advantage"] == pytest.approx([credited[i]["advantage"] for i in (0, 2, 3, 4)])
    assert p1["rewards"] == [1.0, 1.0, 1.0, 0.0] and len(p1["embeddings"]) == 4
    assert p1["texts"][0] == f"(line 1 of {src}: given as an embedding)"
    assert f"dump for `gcpo report {dump}`" in capsys.readouterr().err
    assert main(["report", str(dump), "-o", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "index.html").read_text()
    assert "prompt <code>p1</code>" in page and "prompt <code>p2</code>" in page


def test_a_dump_keeps_the_directions_of_extreme_embeddings_without_a_warning(tmp_path, capsys):
    """Rows of 1e300 and 1e-300 are directions like any other: the dump holds them as unit rows (a float32 cast of
    the raw row overflowed, with numpy's warning on stderr, or rounded to 0)."""
    rows = [
        {"group": "g", "reward": 1, "embedding": [1e300, 0.0]},
        {"group": "g", "reward": 1, "embedding": [1e-300, 1e-300]},
        {"group": "g", "reward": 0, "embedding": [0.0, 3.0]},
    ]
    src, dump = _write(tmp_path / "in.jsonl", rows), tmp_path / "dump"
    assert main(["credit", str(src), "-o", str(tmp_path / "out.jsonl"), "--dump", str(dump)]) == 0
    err = capsys.readouterr().err
    assert "Warning" not in err and err.count("\n") == 2, err  # the dump line and the summary
    from gcpo_core.evaluation.dump import read_credit_dump

    [record] = read_credit_dump(dump)
    unit = [1.0, 0.0, 0.5**0.5, 0.5**0.5, 0.0, 1.0]
    assert [x for row in record["embeddings"] for x in row] == pytest.approx(unit, abs=1e-6)


def test_a_dump_of_texts_carries_them(tmp_path, minilm):
    rows = [
        {"group": "g", "reward": 1, "text": "Add 2 and 3 to get 5."},
        {"group": "g", "reward": 1, "text": "5."},
        {"group": "g", "reward": -1, "text": "It is 6."},
    ]
    assert (
        main(
            [
                "credit",
                str(_write(tmp_path / "in.jsonl", rows)),
                "-o",
                str(tmp_path / "o.jsonl"),
                "--dump",
                str(tmp_path / "dump"),
            ]
        )
        == 0
    )
    (record,) = (json.loads((tmp_path / "dump" / "credit_step000000.jsonl").read_text().splitlines()[0]),)
    assert record["texts"] == [r["text"] for r in rows] and len(record["embeddings"][0]) == 384


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--batch-tokens", "8"],
            "gcpo credit: --batch-tokens 8: batch_tokens (8) must hold one full piece (256 tokens)",
        ),
        (
            ["--max-seq-length", "100000", "--batch-tokens", "200000"],
            "gcpo credit: --max-seq-length 100000: sentence-transformers/all-MiniLM-L6-v2 reads at most 512 word pieces",
        ),
        (
            ["--encoder", "no-such-org/no-such-model"],
            "gcpo credit: --encoder no-such-org/no-such-model: cannot load it",
        ),
        (["--encoder", "{tmp}"], "gcpo credit: --encoder {tmp}: cannot load it as a sentence encoder"),
    ],
)
def test_encoder_settings_only_the_model_can_check_are_one_line_before_anything_is_written(
    tmp_path, capsys, flags, message
):
    """Rules that need the loaded model (a batch holds one piece; a piece fits the model's positions; the model
    exists) are checked as it loads, before any text is embedded: a piece longer than the model's positions was a
    traceback from inside the transformer."""
    rows = [{"group": "q", "reward": 1, "text": "word " * 1200}, {"group": "q", "reward": 0, "text": "It is 6."}]
    out = tmp_path / "out.jsonl"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in flags]
    assert main(["credit", str(_write(tmp_path / "in.jsonl", rows)), "-o", str(out), "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message.replace("{tmp}", str(tmp_path))) and err.count("\n") == 1, err
    assert not out.exists()
