"""The README and docs/ link each other by relative links that resolve, anchors included, and no page is orphaned."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # '#' lines in code are not headings
    return {_anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def _relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_the_anchor_rule_is_githubs():
    assert _anchor(" On a CPU: `bash scripts/smoke_cpu.sh` (offline)") == "on-a-cpu-bash-scriptssmoke_cpush-offline"
    assert _anchor("See it on real solutions: `gcpo demo`") == "see-it-on-real-solutions-gcpo-demo"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in _relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_the_readme_links_every_page_of_docs():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in _relative_links(ROOT / "README.md")}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link: {orphans}"


def test_the_readme_names_doc_pages_by_link_not_bare_path():
    text = re.sub(r"```.*?```", "", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    bare = re.findall(r"(?<![\[(])`?docs/[\w./-]+\.md`?(?!\]|\))", text)
    assert not bare, f"bare doc paths in the README (use a relative link): {bare}"
