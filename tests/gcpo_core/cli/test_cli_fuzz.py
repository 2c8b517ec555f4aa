"""Every `gcpo` sub-command against generated mistakes (issue 53): each case is a command line with its expected
outcome, refused (exit status 2, exactly one stderr line "gcpo <command>: ..." naming the flag, the file or the
file's line, nothing written) or accepted (exit status 0). Never a traceback.

The flags come from the argparse parsers themselves, so a new flag is fuzzed as soon as it exists; a new numeric flag
fails test_every_flag_has_a_fuzz_class until its valid range is written in RANGES below (written from the docs, not
read from the CLI's own table, so that a wrong bound there is caught here). Per numeric flag: negative, zero,
non-finite, non-numeric, absurd and boundary values; per choice flag, every choice and unknown ones; per path flag, a
missing file, a folder, an empty file and (for the files a command reads) lines that are a number, a string, a list,
deeply nested, invalid JSON, missing fields, wrong types, NaN; per settings-file key, a bad value.

`gcpo credit` runs to the end in every case (its input is small and given as embeddings). For eval, report and demo a
case whose flags are all valid stops where the command's work starts (the handler is replaced by a recorder, so no
encoder loads, no plot is drawn): flags are checked before that, so a refusal reaching the handler fails the case;
what those commands read from their files is checked by running them for real, and a handful of valid cases run end
to end.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import gcpo_core.cli
from gcpo_core.cli import build_parser, main
from gcpo_core.cli.common import CREDIT_KEYS, ENCODER_KEYS

INT64_MAX = 2**63 - 1
# (kind, lowest valid, highest valid or None, lowest excluded), by destination ("command.dest" first)
RANGES: dict[str, tuple[str, float, Optional[float], bool]] = {
    "exact_max": ("int", 0, 22, False),
    "permutations": ("int", 4, 1_000_000, False),
    "seed": ("int", 0, INT64_MAX, False),
    "rbf_bandwidth": ("float", 0, None, True),
    "mix_coef": ("float", 0, None, False),
    "blend_weight": ("float", 0, 1, False),
    "epsilon": ("float", 0, None, True),
    "std_floor": ("float", 0, None, False),
    "max_group_size": ("int", 1, 4096, False),
    "demo.max_group_size": ("int", 6, 4096, False),  # the bundled demo's largest group has 6 solutions
    # below the input's largest group (2 rollouts): refused as the input is read, naming the flag
    "credit.max_group_size": ("int", 2, 4096, False),
    "max_chunks": ("int", 1, INT64_MAX, False),
    "max_seq_length": ("int", 8, INT64_MAX, False),
    "batch_tokens": ("int", 8, INT64_MAX, False),
    "dump_step": ("int", 0, INT64_MAX, False),
    "ks": ("int", 1, INT64_MAX, False),
    "cluster_threshold": ("float", -1, 1, False),
    "samples": ("int", 1, INT64_MAX, False),
    "temperature": ("float", 0, None, False),
    "top_p": ("float", 0, 1, True),
    "max_tokens": ("int", 1, INT64_MAX, False),
    "tp": ("int", 1, INT64_MAX, False),
    "max_groups": ("int", 1, INT64_MAX, False),
}
# the flags that take a path or a name, by what they must name
PATH_KINDS = {
    "credit.input": "input",
    "generations": "input",
    "benchmark": "input",
    "config": "settings",
    "output": "output",
    "credit.dump": "folder",
    "out_dir": "folder",
    "report.dump": "dump",
    "encoder": "model",
    "generate": "model",
}
FREE_TEXT = {"device": ["auto", "cpu", "cuda", "cuda:1", "bogus", "", "cuda:x", "CPU"], "name": ["x", ""]}
NOT_FUZZED = {"help", "run"}  # --run NAME=FILE: its own cases below
NUMERIC_VALUES = ["-1", "-2.5", "0", "-0", "nan", "inf", "-inf", "abc", "", "1e400", str(10**30), "1.5", "3"]

ROLLOUTS = [
    {"group": "a", "reward": 1, "embedding": [1.0, 0.0]},
    {"group": "a", "reward": 0, "embedding": [0.6, 0.8]},
    {"group": 2, "reward": 1, "embedding": [0.3, 0.9]},
]
GENERATIONS = [{"benchmark": "toy", "id": 0, "answer": "7", "responses": ["Answer: 7", "Answer: 8"]}]
DUMP = [
    {
        "step": 3,
        "uid": "p",
        "texts": ["Answer: 7", "Answer: 8"],
        "rewards": [1.0, 0.0],
        "shapley": [0.69, 0.0],
        "advantage": [0.7, -0.7],
        "embeddings": [[1.0, 0.0], [0.6, 0.8]],
        "metrics": {"gcpo/team_value/mean": 0.69},
    }
]
BENCHMARK = [{"id": 0, "problem": "3 + 4?", "answer": "7"}]
VALID = {"credit": ROLLOUTS, "eval": GENERATIONS, "report": DUMP, "benchmark": BENCHMARK}

# a line of each malformed kind: (the line, what a file with it must do: True = refused naming the line)
BAD_LINES = {
    "a number": "5",
    "a string": '"text"',
    "a list": "[1, 2]",
    "null": "null",
    "deeply nested": "[" * 100_000 + "]" * 100_000,
    "nested object": '{"a": ' * 5000 + "1" + "}" * 5000,
    "invalid JSON": '{"group": "a", "reward": 1,',
    "not UTF-8": b'{"group": "caf\xe9"}',
    "an empty object": "{}",
}


def _wrong_fields(record: dict) -> dict[str, dict]:
    """The record with each field missing, of the wrong type, NaN where it is a number."""
    cases = {}
    for key, value in record.items():
        cases[f"missing {key}"] = {k: v for k, v in record.items() if k != key}
        wrong = {"x": 1} if isinstance(value, (str, int, float, list)) else "x"
        cases[f"{key} of the wrong type"] = {**record, key: wrong}
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            cases[f"{key} NaN"] = {**record, key: float("nan")}
        if isinstance(value, list) and value and isinstance(value[0], (int, float)):
            cases[f"{key} holding NaN"] = {**record, key: [float("nan")] + value[1:]}
            cases[f"{key} holding a string"] = {**record, key: ["x"] + value[1:]}
    return cases


@dataclass
class Case:
    command: str
    argv: list[str]  # "{IN}", "{OUT}", "{TMP}" stand for the case's folder's files
    refused: bool
    names: list[str]  # what the refusal's line must name (any one of them)
    files: dict[str, bytes] = field(default_factory=dict)  # written into the case's folder first
    real: bool = False  # run the command's work even for a case that is accepted

    def __str__(self) -> str:
        return f"gcpo {self.command} {' '.join(self.argv)}"[:160]


def _jsonl(rows) -> bytes:
    return b"".join(
        (r if isinstance(r, bytes) else (r if isinstance(r, str) else json.dumps(r)).encode()) + b"\n" for r in rows
    )


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _base(command: str) -> tuple[list[str], dict[str, bytes]]:
    """A command line every case of ``command`` starts from, valid, and its files."""
    if command == "credit":
        return ["{TMP}/in.jsonl", "-o", "{TMP}/out.jsonl"], {"in.jsonl": _jsonl(ROLLOUTS)}
    if command == "eval":
        return ["{TMP}/gens.jsonl", "--no-embeddings", "--out-dir", "{TMP}/out"], {"gens.jsonl": _jsonl(GENERATIONS)}
    if command == "report":
        return ["{TMP}/credit_step000003.jsonl", "-o", "{TMP}/out"], {"credit_step000003.jsonl": _jsonl(DUMP)}
    return [], {}


def _key(command: str, dest: str, table: dict):
    return table.get(f"{command}.{dest}", table.get(dest))


def _number_ok(text: str, kind: str, low: float, high: Optional[float], above: bool) -> bool:
    try:
        value = int(text) if kind == "int" else float(text)
    except ValueError:
        return False
    if kind == "float" and not math.isfinite(value):
        return False
    top = high if high is not None else math.inf
    return (value > low if above else value >= low) and value <= top


def _with(command: str, action: argparse.Action, value: str) -> list[str]:
    base, _ = _base(command)
    if not action.option_strings:  # the positional input: replaced
        return [value, *base[1:]]
    flag = action.option_strings[-1]
    if flag in base:  # replaced
        i = base.index(flag)
        return [*base[:i], flag, value, *base[i + 2 :]]
    return [*base, flag, value]


def _names(action: argparse.Action, value: str) -> list[str]:
    return [*action.option_strings, value] if action.option_strings else [value or "''", action.metavar]


def number_cases(command: str, action: argparse.Action) -> list[Case]:
    kind, low, high, above = _key(command, action.dest, RANGES)
    edges = [low, low - 1] + ([high, high + 1] if high is not None else [])
    edges = [str(int(x)) if kind == "int" else repr(float(x)) for x in edges]
    if kind == "float":
        edges += [repr(low - 1e-9), repr(low + 1e-9), "1e308"]
    _, files = _base(command)
    return [
        Case(
            command,
            _with(command, action, text),
            not _number_ok(text, kind, low, high, above),
            _names(action, text),
            files,
        )
        for text in dict.fromkeys(NUMERIC_VALUES + edges)
    ]


def choice_cases(command: str, action: argparse.Action) -> list[Case]:
    _, files = _base(command)
    good = [Case(command, _with(command, action, str(c)), False, [], files) for c in action.choices]
    bad = ["bogus", "", str(list(action.choices)[0]).upper() + "X"]
    return good + [Case(command, _with(command, action, b), True, _names(action, b), files) for b in bad]


def path_cases(command: str, action: argparse.Action) -> list[Case]:
    kind = _key(command, action.dest, PATH_KINDS)
    base_files = _base(command)[1]
    cases = []

    def add(value: str, refused: bool, files: Optional[dict] = None, names=None, real=False):
        cases.append(
            Case(
                command,
                _with(command, action, value),
                refused,
                names or _names(action, value),
                {**base_files, **(files or {})},
                real,
            )
        )

    add("{TMP}/missing/none.x", kind not in ("folder",), names=["{TMP}/missing/none.x"])
    add("{TMP}", kind not in ("folder", "model", "dump"), names=["{TMP}"])  # a folder
    add("", True)
    if kind in ("input", "settings", "dump", "model", "folder", "output"):
        # an empty input is no rollouts for credit (exit 0, an empty output), no problems to evaluate for eval
        refused = kind in ("model", "folder", "dump") or (command, action.dest) == ("eval", "generations")
        add(
            "{TMP}/empty.jsonl",
            refused,
            {"empty.jsonl": b""},
            ["{TMP}/empty.jsonl"],
            real=kind in ("input", "dump"),  # what the command reads: run for real
        )
    if kind == "output":
        add("{TMP}/new.jsonl", False)
        add("{TMP}/nofolder/new.jsonl", True, names=["{TMP}/nofolder/new.jsonl"])
    if kind == "folder":
        add("{TMP}/new/folder", False)
    if kind == "model":
        add("{TMP}/model", False, {"model/config.json": b"{}"})
    if kind in ("input", "dump"):
        valid_rows = VALID[action.dest if action.dest == "benchmark" else command]
        spoilt = {**{name: [line] for name, line in BAD_LINES.items()}, **_wrong_fields(valid_rows[0])}
        for what, lines in spoilt.items():
            rows = [*valid_rows, *lines] if what in BAD_LINES else [valid_rows[0], lines]
            blamed = "{TMP}/bad.jsonl:" + str(len(rows))
            # a field the command may do without (an optional one, or one a fallback stands in for): run to the end
            tolerated = what not in BAD_LINES and _tolerated(command, action.dest, what)
            cases.append(
                Case(
                    command,
                    _with(command, action, "{TMP}/bad.jsonl"),
                    not tolerated,
                    [blamed],
                    {**base_files, "bad.jsonl": _jsonl(rows)},
                    True,
                )
            )
    return cases


def _tolerated(command: str, dest: str, what: str) -> bool:
    """Spoilt fields a command accepts, documented as optional: eval's benchmark and problem id (gold answers and
    ids may come from elsewhere), a dump's embeddings and metrics, a benchmark row's problem."""
    optional = {
        "eval": ("missing benchmark", "missing id"),
        "report": ("missing embeddings", "missing metrics"),
        "benchmark": ("missing problem", "missing id"),
    }
    return what.startswith(optional.get(dest if dest == "benchmark" else command, ()))


def settings_cases(command: str) -> list[Case]:
    """A settings file setting each numeric key of the command to a bad value: refused naming the file and key."""
    dests = {a.dest for a in _subparsers()[command]._actions}
    base, files = _base(command)
    cases = []
    for block, keys in (("credit", CREDIT_KEYS), ("encoder", ENCODER_KEYS)):
        for key, dest in keys.items():
            if dest not in dests or _key(command, dest, RANGES) is None:
                continue
            for bad in ("-5", ".nan", "abc", "[1]", "{a: 1}") + (
                ("1.5",) if _key(command, dest, RANGES)[0] == "int" else ()
            ):
                text = f"{block}:\n  {key}: {bad}\n".encode()
                cases.append(
                    Case(
                        command,
                        [*base, "--config", "{TMP}/s.yaml"],
                        True,
                        [f"s.yaml: {block}.{key}"],
                        {**files, "s.yaml": text},
                    )
                )
    for what, text in {"a list": b"- 1\n", "bad YAML": b"credit: [\n", "an unknown block": b"trainer: {}\n"}.items():
        cases.append(Case(command, [*base, "--config", "{TMP}/s.yaml"], True, ["s.yaml"], {**files, "s.yaml": text}))
    return cases


def other_cases() -> list[Case]:
    _, gens = _base("eval")
    base = ["--no-embeddings", "--out-dir", "{TMP}/out"]
    run_cases = [
        Case("eval", ["--run", "noequals", *base], True, ["--run"], gens),
        Case("eval", ["--run", "=x", *base], True, ["--run"], gens),
        Case("eval", ["--run", "a=", *base], True, ["--run"], gens),
        Case("eval", ["--run", "a={TMP}/none.jsonl", *base], True, ["--run a="], gens),
        Case("eval", ["--run", "a={TMP}", *base], True, ["--run a="], gens),
        Case("eval", ["--run", "a={TMP}/gens.jsonl", *base], False, [], gens),
        Case("eval", ["--bogus", *base], True, ["--bogus"], gens),
        Case("credit", ["{TMP}/in.jsonl", "--bogus"], True, ["--bogus"], _base("credit")[1]),
        Case("report", ["{TMP}/credit_step000003.jsonl", "--max-groups"], True, ["--max-groups"], _base("report")[1]),
    ]
    # the handful that run to the end, files written
    credit_base, credit_files = _base("credit")
    ends = [
        Case("credit", [*credit_base, "--dump", "{TMP}/dump", "--dump-step", "4"], False, [], credit_files),
        Case("eval", _base("eval")[0], False, [], _base("eval")[1], real=True),
        Case("eval", [*_base("eval")[0], "--ks", "1", "2"], False, [], _base("eval")[1], real=True),
        Case("report", _base("report")[0], False, [], _base("report")[1], real=True),
    ]
    return run_cases + ends


def all_cases() -> list[Case]:
    cases = []
    for command, parser in _subparsers().items():
        for action in parser._actions:
            fuzz = _fuzz_class(command, action)
            if fuzz is not None:
                cases += fuzz(command, action)
        if command != "report":
            cases += settings_cases(command)
    return cases + other_cases()


def _fuzz_class(command: str, action: argparse.Action):
    if action.dest in NOT_FUZZED or action.nargs == 0:
        return None
    if action.choices is not None:
        return choice_cases
    if action.type in (int, float):
        return number_cases
    if _key(command, action.dest, PATH_KINDS) is not None:
        return path_cases
    if action.dest in FREE_TEXT:
        return free_text_cases
    return "unclassified"


def free_text_cases(command: str, action: argparse.Action) -> list[Case]:
    _, files = _base(command)
    refused = {"device": {"bogus", "", "cuda:x", "CPU"}}.get(action.dest, set())
    return [
        Case(command, _with(command, action, v), v in refused, _names(action, v), files) for v in FREE_TEXT[action.dest]
    ]


CASES = all_cases()


def test_every_flag_has_a_fuzz_class():
    """A new flag must say what it accepts (RANGES, PATH_KINDS, FREE_TEXT) before it is fuzzed: none is left out."""
    unclassified = [
        f"gcpo {c} {'/'.join(a.option_strings) or a.dest}"
        for c, p in _subparsers().items()
        for a in p._actions
        if _fuzz_class(c, a) == "unclassified" or (a.type in (int, float) and _key(c, a.dest, RANGES) is None)
    ]
    assert not unclassified, f"add their valid values to the fuzz tables: {unclassified}"
    assert len(CASES) >= 500, len(CASES)


class _Reached(Exception):
    pass


def _run_case(case: Case, tmp: Path, monkeypatch) -> None:
    for name, data in case.files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(data)
    before = sorted(str(p) for p in tmp.rglob("*"))
    argv = [a.replace("{TMP}", str(tmp)) for a in case.argv]
    reached = []
    if case.command != "credit" and not case.refused and not case.real:
        module = getattr(gcpo_core.cli, case.command)
        monkeypatch.setattr(module, "run", lambda args: reached.append(args) or 0)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main([case.command, *argv])
    err = err.getvalue()
    monkeypatch.undo()
    assert "Traceback" not in err and "a bug in gcpo" not in err, err
    if case.refused:
        assert code == 2, f"accepted (exit {code}): {err}"
        assert err.startswith(f"gcpo {case.command}: ") and err.count("\n") == 1, err
        names = [n.replace("{TMP}", str(tmp)) for n in case.names]
        assert any(n in err for n in names), f"names none of {names}: {err}"
        assert sorted(str(p) for p in tmp.rglob("*")) == before, "wrote before refusing"
    else:
        assert code == 0, err
        assert reached or case.command == "credit" or case.real


def test_every_case_meets_its_expectation(tmp_path, monkeypatch):
    failures = []
    for n, case in enumerate(CASES):
        folder = tmp_path / str(n)
        folder.mkdir()
        try:
            _run_case(case, folder, monkeypatch)
        except AssertionError as failure:
            failures.append(f"{case}: {str(failure)[:300]}")
    if os.environ.get("GCPO_FUZZ_LOG"):  # every failure, for whoever debugs more than the 40 shown
        Path(os.environ["GCPO_FUZZ_LOG"]).write_text("\n".join(failures))
    assert not failures, f"{len(failures)} of {len(CASES)} cases failed:\n" + "\n".join(failures[:40])
