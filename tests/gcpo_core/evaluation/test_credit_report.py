import matplotlib.image as mpimg
import numpy as np
import pytest

from gcpo_core.evaluation.credit_report import build_report, grpo_advantages


def _record(step, uid):
    return {
        "step": step,
        "uid": uid,
        "texts": ["3 + 4 = 7 <b>bold</b>", "3 + 4 = 7", "14 / 2 = 7", "wrong: 8"],
        "rewards": [1.0, 1.0, 1.0, -1.0],
        "shapley": [0.4, 0.4, 0.69, 0.0],
        "advantage": [0.1, 0.1, 0.9, -1.1],
        "embeddings": [[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]],
        "metrics": {"gcpo/team_value/mean": 1.2 + step / 100, "gcpo/rescued_groups": 3.0},
    }


def test_the_report_renders_pictures_texts_and_steps(tmp_path):
    index = build_report([_record(10, "p1"), _record(20, "p2")], tmp_path)
    page = index.read_text()
    assert page.count("data:image/png;base64,") == 3  # two groups and the steps figure
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page  # texts are escaped
    for name in ("group_000.png", "group_001.png", "steps.png"):
        image = mpimg.imread(tmp_path / name)
        assert image.shape[0] > 200 and image.shape[1] > 400 and float(image.std()) > 0.05  # not blank


def test_grpo_reference_advantages():
    np.testing.assert_allclose(grpo_advantages([1, 0, 0, 0]), [1.5, -0.5, -0.5, -0.5], atol=1e-5)


def test_an_empty_dump_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no groups"):
        build_report([], tmp_path)


def test_table_rows_are_one_per_rollout_with_grpos_advantage_beside_gcpos():
    from gcpo_core.evaluation.credit_report import TABLE_COLUMNS, table_rows

    first, second = _record(10, "p1"), {**_record(20, "p2"), "prompt": "What is 3 + 4? " * 40}
    rows = table_rows([first, second], chars=30)
    assert len(rows) == 8 and all(len(row) == len(TABLE_COLUMNS) for row in rows)
    by_column = [dict(zip(TABLE_COLUMNS, row)) for row in rows]
    assert [r["prompt"] for r in by_column[:4]] == ["p1"] * 4  # no prompt in the record: its uid
    assert by_column[4]["prompt"] == ("What is 3 + 4? " * 40)[:30]
    assert [r["rollout"] for r in by_column[4:]] == [0, 1, 2, 3]
    assert by_column[0]["response"] == "3 + 4 = 7 <b>bold</b>"  # W&B's table shows text as text
    np.testing.assert_allclose([r["grpo_advantage"] for r in by_column[:4]], grpo_advantages(first["rewards"]))
    assert [r["credit"] for r in by_column[:4]] == first["shapley"]
    assert [r["gcpo_advantage"] for r in by_column[:4]] == first["advantage"]


def test_group_figures_of_groups_of_different_sizes_share_a_size_when_asked(tmp_path):
    from gcpo_core.evaluation.credit_report import group_figure

    small = {**_record(1, "p3"), "texts": ["a", "b"], "rewards": [1.0, -1.0], "shapley": [0.7, 0.0]}
    small.update(advantage=[0.7, -0.7], embeddings=[[1, 0], [0, 1]])
    free = [mpimg.imread(group_figure(r, tmp_path / f"free{n}.png")) for n, r in enumerate((_record(1, "p"), small))]
    fixed = [
        mpimg.imread(group_figure(r, tmp_path / f"fixed{n}.png", rows=4))
        for n, r in enumerate((_record(1, "p"), small))
    ]
    assert free[0].shape != free[1].shape
    assert fixed[0].shape == fixed[1].shape and float(fixed[1].std()) > 0.05
