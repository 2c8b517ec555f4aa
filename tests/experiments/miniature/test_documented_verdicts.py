"""The verdicts docs/miniature.md states follow from the results it ships: the report's own analysis, run again on a
pre-registered run's ``docs/miniature/<run>/results.json``, gives the table rows (and, for the dial, the verdict
lines) that the page quotes under that run's verdict."""

import re
from pathlib import Path

from experiments.miniature.report import credit_shape_tests, dial_analysis, dial_tests
from experiments.miniature.reproduce import load_results

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "miniature.md"


def _verdict_section(run_heading: str) -> str:
    """The text of the first "### The verdict" section after the "## " heading that starts with ``run_heading``."""
    text = PAGE.read_text(encoding="utf-8")
    run = re.search(rf"^## {re.escape(run_heading)}.*?(?=^## |\Z)", text, flags=re.M | re.S)
    assert run, f"docs/miniature.md has no section '## {run_heading}'"
    verdict = re.search(r"^### The verdict.*?(?=^#{2,3} |\Z)", run.group(0), flags=re.M | re.S)
    assert verdict, f"'## {run_heading}' has no '### The verdict' section"
    return verdict.group(0)


def _quoted(report: str, starts: tuple[str, ...]) -> list[str]:
    lines = [line for line in report.splitlines() if line.startswith(starts)]
    assert lines, f"the report printed no line starting with {starts}"
    return lines


def test_the_credit_shape_runs_table_is_the_reports_on_its_shipped_results():
    runs = load_results(ROOT / "docs" / "miniature" / "credit_shape" / "results.json")
    section = _verdict_section("The credit-shape run (issue 56)")
    for line in _quoted(credit_shape_tests(runs), ("| H1 |", "| H2 |", "| H3 |")):
        assert line in section, f"docs/miniature.md does not quote the report's row: {line}"


def test_the_dial_confirmations_table_and_verdicts_are_the_reports_on_its_shipped_results():
    runs = load_results(ROOT / "docs" / "miniature" / "dial" / "results.json")
    analysis = dial_analysis(runs)
    assert analysis["complete"] and analysis["in"] == analysis["expected"] == 56
    section = _verdict_section("The dial's confirmation (issue 72)")
    for line in _quoted(dial_tests(runs), ("| A1 |", "| B1 |", "| B2 |", "| B3 |", "Verdict, ", "All-correct groups")):
        assert line in section, f"docs/miniature.md does not quote the report's line: {line}"
