import json

from gcpo_core.cli import main


def test_demo_prints_gcpo_next_to_grpo_for_every_bundled_group(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for group in ("## sprints", "## salary", "## sheep"):
        assert group in out
    assert "GRPO adv" in out and "GCPO adv" in out
    assert "All-correct groups that GRPO ignores but GCPO gives a signal: 1." in out


def test_demo_json_output_is_consistent(capsys):
    assert main(["demo", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 15
    for row in rows:
        if row["reward"] == 0:
            assert row["shapley"] == 0.0 and row["gcpo_advantage"] < 0
    sheep = [r for r in rows if r["group"] == "sheep"]
    assert all(r["grpo_advantage"] == 0 for r in sheep)  # all correct: GRPO has nothing to say
    assert max(abs(r["gcpo_advantage"]) for r in sheep) > 0  # GCPO still ranks them
