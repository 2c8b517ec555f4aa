import json
import os
import subprocess
import sys
from pathlib import Path

from gcpo_core.cli import main


def test_demo_prints_gcpo_next_to_grpo_for_every_bundled_group_and_says_what_the_numbers_mean(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    for group in ("## sprints", "## salary", "## sheep"):
        assert group in out
    assert "GRPO adv" in out and "GCPO adv" in out
    assert "How to read it:" in out and "effective distinct solutions" in out and "team value" in out
    assert "All-correct groups that GRPO ignores but GCPO gives a signal: 1." in out
    # the route story is reported as measured, not asserted: sprints keeps it, salary does not (MiniLM reads wording)
    assert "the one solution that takes another route: model solution (6b verification), credit rank 1 of 4" in out
    assert "A solution that takes another route gets the most credit in `sprints`." in out
    assert "in `salary` the solution that takes another route ranks 3 of 4" in out
    assert "distinct approaches keep theirs" not in out


def test_demo_json_output_is_consistent(capsys):
    assert main(["demo", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 15
    for row in rows:
        if row["reward"] == 0:
            assert row["shapley"] == 0.0 and row["gcpo_advantage"] < 0
    sheep = [r for r in rows if r["group"] == "sheep"]
    assert all(r["grpo_advantage"] == 0 for r in sheep)  # all correct: GRPO has nothing to say
    # GCPO ranks them, normalised by their own credit spread as GRPO normalises rewards: pushes of GRPO's size
    assert max(abs(r["gcpo_advantage"]) for r in sheep) > 0.9
    order = sorted(sheep, key=lambda r: r["shapley"])
    assert [r["gcpo_advantage"] for r in order] == sorted(r["gcpo_advantage"] for r in sheep)


def test_demo_with_the_batch_scale_pushes_all_correct_groups_by_their_credit_spread(capsys):
    assert main(["demo", "--json", "--all-correct-scale", "batch"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # the size of their credit spread (0.431-0.450 nats) against the batch's right-vs-wrong spread, not +-1
    assert 0 < max(abs(r["gcpo_advantage"]) for r in rows if r["group"] == "sheep") < 0.2


def test_json_output_is_only_json_whatever_the_libraries_print_on_import():
    """transformers prints "[INFO] Running in WANDB offline mode" on stdout when it is imported with
    WANDB_MODE=offline (verl's clusters set it): a fresh process, where the encoder's import happens."""
    root = Path(__file__).resolve().parents[3]
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "gcpo_core.cli", "demo", "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len([json.loads(line) for line in proc.stdout.splitlines()]) == 15
