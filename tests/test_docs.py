"""The README and docs/ link each other by relative links that resolve, anchors included, and no page is orphaned."""

import math
import re
import sys
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


# --- numbers the docs quote from a command's output, re-read from that output (issue 46) ---------------------------
# Each check finds its sentence by a pattern: a reworded sentence fails here too, so that its numbers are re-read.


def _doc(name: str) -> str:
    """A page's text with its line breaks as spaces (a quoted sentence may wrap anywhere) and the typographic minus
    as ASCII."""
    return " ".join((ROOT / name).read_text(encoding="utf-8").split()).replace("−", "-")


def _quoted(page: str, pattern: str) -> tuple[str, ...]:
    match = re.search(pattern, _doc(page))
    assert match, f"{page}: no sentence matches {pattern!r}: reworded? re-read its numbers and update this test"
    return match.groups()


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+|[-+]?\d+", text)]


@pytest.fixture(scope="module")
def demo_rows():
    """`gcpo demo --json`'s rows, by group, with the default settings and with the reasoning span."""
    import contextlib
    import io
    import json

    from gcpo_core.cli import main

    rows = {}
    for span in ("full", "reasoning"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            assert main(["demo", "--json", "--text-span", span]) == 0
        for row in map(
            json.loads, out.getvalue().splitlines()
        ):  # every line JSON (tests/gcpo_core/cli/test_demo_cli.py)
            rows.setdefault(span, {}).setdefault(row["group"], []).append(row)
    return rows


def test_the_demos_sheep_pushes_in_cli_md_are_the_demos(demo_rows):
    (quoted,) = _quoted("docs/cli.md", r"`sheep` group .*? of GRPO's size \(([-+0-9., ]+) in the order printed")
    printed = [round(r["gcpo_advantage"], 2) for r in demo_rows["full"]["sheep"]]
    assert _numbers(quoted) == printed
    assert all(r["grpo_advantage"] == 0 for r in demo_rows["full"]["sheep"])


def test_the_demos_salary_numbers_in_cli_md_and_method_md_are_the_demos(demo_rows, minilm):
    salary = {r["kind"]: r for r in demo_rows["full"]["salary"]}
    route = next(r for r in salary.values() if r.get("route") == "another route")
    correct = sorted((r for r in salary.values() if r["reward"] > 0), key=lambda r: -r["shapley"])
    rank = correct.index(route) + 1
    texts = [r["text"] for r in correct]
    embeddings = minilm.encode(texts).embeddings.double()
    cosine = (embeddings @ embeddings.T).tolist()
    route_i, reference_i = texts.index(route["text"]), texts.index(salary["reference solution"]["text"])
    nearest = max(c for j, c in enumerate(cosine[route_i]) if j != route_i)

    cos, ranked = _quoted("docs/cli.md", r"in `salary` .*? \(cosine (\d\.\d\d)\) and ranks (\d)\w\w of 4")
    assert (float(cos), int(ranked), len(correct)) == (round(nearest, 2), rank, 4)
    cos, low, high, reference, paraphrase, other = _quoted(
        "docs/method.md",
        r"`salary` group .*?cosine (\d\.\d\d)\), .*?cosine (\d\.\d\d)–(\d\.\d\d) to the others\); .*?"
        r"\((\d\.\d{3}) and (\d\.\d{3}) vs (\d\.\d{3}) nats\)",
    )
    to_others = [c for j, c in enumerate(cosine[reference_i]) if j != reference_i]
    assert float(cos) == round(nearest, 2)
    assert (float(low), float(high)) == (round(min(to_others), 2), round(max(to_others), 2))
    paraphrased = next(k for k in salary if k.startswith("paraphrase"))
    shapley = [salary[k]["shapley"] for k in ("reference solution", paraphrased)] + [route["shapley"]]
    assert _numbers(f"{reference} {paraphrase} {other}") == [round(v, 3) for v in shapley]
    (reasoning,) = _quoted("docs/method.md", r"`reasoning` span gives the same order \(([0-9./ ]+)\)")
    by_kind = {r["kind"]: r["shapley"] for r in demo_rows["reasoning"]["salary"]}
    assert _numbers(reasoning) == [round(by_kind[k], 3) for k in ("reference solution", paraphrased, route["kind"])]


@pytest.mark.parametrize("page", ["README.md", "docs/cli.md"])
def test_the_credit_example_gives_the_credit_its_page_quotes(page, tmp_path, capsys):
    """The page's own `cat > rollouts.jsonl <<'EOF'` block, run through `gcpo credit`."""
    import json

    from gcpo_core.cli import main

    block = re.search(r"cat > rollouts\.jsonl <<'EOF'\n(.*?)\nEOF\n", (ROOT / page).read_text(encoding="utf-8"), re.S)
    assert block, f"{page}: no rollouts.jsonl example"
    (tmp_path / "rollouts.jsonl").write_text(block.group(1) + "\n")
    assert main(["credit", str(tmp_path / "rollouts.jsonl"), "-o", str(tmp_path / "out.jsonl")]) == 0
    phi = [json.loads(line)["shapley"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    duplicate, distinct = _quoted(
        page,
        r"duplicate correct solutions get φ = (\d\.\d{3}) each, the distinct one log 2 = (\d\.\d{3}), the wrong one 0",
    )
    assert [round(v, 3) for v in phi] == [float(duplicate), float(duplicate), float(distinct), 0.0]
    assert round(math.log(2), 3) == float(distinct) and sum(phi) == pytest.approx(math.log(6))


def test_the_start_up_lines_in_training_md_are_the_main_launchers():
    """docs/training.md's "what will run" block: the main launcher's lines from a machine without a GPU (run from
    /root, the checkout at /opt/gcpo-verl, as in the Docker image)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict
    from verl.utils.device import auto_set_device

    from recipe.gcpo.checks import CONFIG_DIR, RECIPE_REWARD
    from recipe.gcpo.run_summary import memory_lines, protocol_line, startup_lines
    from tests.recipe.gcpo.conftest import gcpo_settings
    from tests.scripts.launch import launcher_overrides
    from verl_preflight import migrate_legacy_reward

    overrides = launcher_overrides("run_qwen3_4b_gcpo.sh", env={"HOME": "/root"})
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):  # Hydra's composition of it
        config = compose("gcpo_trainer", overrides, return_hydra_config=True)
    choices = OmegaConf.to_container(config.hydra.runtime.choices)
    with open_dict(config):
        del config["hydra"]  # the task's config, as the checks read it
    auto_set_device(config)  # what the checks do before anything reads the config
    migrate_legacy_reward(config, RECIPE_REWARD)
    settings = gcpo_settings(config)
    lines = startup_lines(config, settings) + [protocol_line(choices)] + memory_lines(settings, config)
    printed = [f"gcpo: {line}".replace(str(ROOT), "/opt/gcpo-verl") for line in lines]
    block = re.search(r"\n```\n(gcpo: estimator: .*?)\n```\n", (ROOT / "docs/training.md").read_text(), re.S)
    assert block, "docs/training.md: no start-up block"
    assert block.group(1).splitlines() == printed


def test_the_verifier_comparisons_case_counts_in_method_md(shared_data, monkeypatch):
    """docs/method.md's counts of dev/compare_verifiers.py's cases, from the cases themselves (building them takes
    no grading; the graded counts need the script's minute-long run: re-read them from its output)."""
    import importlib.util
    from collections import Counter

    spec = importlib.util.spec_from_file_location("compare_verifiers", ROOT / "dev" / "compare_verifiers.py")
    compare = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, compare)  # its dataclasses look their module up there
    spec.loader.exec_module(compare)
    golds = compare.distinct_golds(shared_data)
    cases = list(compare.rendering_cases(golds)) + list(compare.real_cases(shared_data))
    kinds = Counter(case.kind for case in cases)
    quoted = _quoted(
        "docs/method.md",
        r"`python dev/compare_verifiers.py` grades every distinct gold answer of `\.\./shared/data` \(([\d,]+)\) "
        r"crossed with systematic renderings, plus every real response there \(([\d,]+) rollouts, ([\d,]+) reference "
        r"solutions\), ([\d,]+) cases",
    )
    solutions = sum(n for kind, n in kinds.items() if kind.startswith("solutions/"))
    assert [int(q.replace(",", "")) for q in quoted] == [
        len(golds),
        kinds["rollouts/gsm8k-gpt3"],
        solutions,
        len(cases),
    ]
    (words_between,) = _quoted("docs/method.md", r"`several-parts/labelled-parts`, ([\d,]+) cases\)")
    assert (
        int(words_between.replace(",", ""))
        == kinds["several-parts/words-between"] + kinds["several-parts/labelled-parts"]
    )


def test_the_start_up_steps_in_training_md_are_the_entry_points_in_its_order():
    """docs/training.md's numbered start-up list: a step for each stage of the front door (verl_preflight's ``run``),
    the recipe's check and its accepted run, in the order the code runs them (check_config's machine checks come
    after its config checks: the steps "Check the config" and "Check this machine" are its call)."""
    import ast

    section = (ROOT / "docs/training.md").read_text().split("## The entry point", 1)[1].split("\n### ", 1)[0]
    steps = re.findall(r"^\d+\. \*\*(.+?)\*\*", section, re.M)
    call_of = {
        "Parse the command line": "parse_command_line",
        "Compose": "compose_config",
        "Check the config": "check_config",
        "Check this machine": "check_config",
        "Say what will run": "print_startup",
        "Train": "train",
    }
    assert sorted(steps) == sorted(call_of), steps

    def calls(path: Path, name: str) -> list[str]:
        tree = ast.parse(path.read_text())
        function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
        found = sorted(
            (node.lineno, node.col_offset, getattr(node.func, "id", getattr(node.func, "attr", "")))
            for node in ast.walk(function)
            if isinstance(node, ast.Call)
        )
        return [called for _, _, called in found]

    entry = ROOT / "recipe/gcpo/main_gcpo.py"
    order = calls(ROOT / "verl_preflight/front_door.py", "run")
    order = [c for called in order for c in (calls(entry, "check") if called == "check" else [called])]
    order += calls(entry, "accepted")
    ran = [called for called in dict.fromkeys(order) if called in call_of.values()]
    assert ran == list(dict.fromkeys(call_of[step] for step in steps)), ran
