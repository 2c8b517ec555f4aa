"""docs/cli.md's "Mistakes" block: every line it quotes is what the command prints, as the only line on stderr."""

import json
import re
from pathlib import Path

from gcpo_core.cli import main

ROOT = Path(__file__).resolve().parents[3]
# the command line behind each quoted line, run in a folder holding in.jsonl and settings.yaml
COMMANDS = {
    "gcpo credit: --dump-step -1": ["credit", "in.jsonl", "-o", "out.jsonl", "--dump", "dump", "--dump-step", "-1"],
    "gcpo credit: --mix-coef nan": ["credit", "in.jsonl", "--mix-coef", "nan"],
    "gcpo credit: --device bogus": ["credit", "in.jsonl", "--device", "bogus"],
    "gcpo credit: --encoder /nonexistent": ["credit", "in.jsonl", "--encoder", "/nonexistent"],
    "gcpo credit: settings.yaml": ["credit", "in.jsonl", "--config", "settings.yaml"],
    "gcpo demo: --max-group-size 2": ["demo", "--max-group-size", "2"],
    "gcpo report: --max-groups -1": ["report", "dump", "--max-groups", "-1"],
    "gcpo eval: argument --ks": ["eval", "in.jsonl", "--ks", "x"],
}


def test_every_quoted_mistake_is_what_the_command_prints(tmp_path, monkeypatch, capsys):
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = page.split("## Mistakes", 1)[1]
    (block,) = re.findall(r"```text\n(.*?)\n```", section, re.S)[:1]
    quoted = block.splitlines()
    assert sorted(next(k for k in COMMANDS if line.startswith(k)) for line in quoted) == sorted(COMMANDS)
    monkeypatch.chdir(tmp_path)
    Path("in.jsonl").write_text(json.dumps({"group": "a", "reward": 1, "embedding": [1.0, 0.0]}) + "\n")
    Path("settings.yaml").write_text("encoder:\n  max_chunks: 2.5\n")
    Path("dump").mkdir()
    for line in quoted:
        argv = next(argv for start, argv in COMMANDS.items() if line.startswith(start))
        assert main(argv) == 2, line
        assert capsys.readouterr().err == line + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump", "in.jsonl", "settings.yaml"]  # nothing written
    assert not any(Path("dump").iterdir())
