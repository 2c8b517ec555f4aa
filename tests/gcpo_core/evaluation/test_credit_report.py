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
