import json

import pytest

from experiments.miniature.task import CATEGORIES
from experiments.miniature.warm_start import WarmStartSpec, build_warm_start, confuser, target_distribution


@pytest.mark.parametrize("category", list(CATEGORIES))
def test_the_target_mixture_puts_the_correct_share_on_the_category_skewed_to_a_favourite(category):
    dist = target_distribution(category, 0.3)
    assert sum(dist.values()) == pytest.approx(1.0)
    own = CATEGORIES[category]
    assert sum(dist[w] for w in own) == pytest.approx(0.3)
    assert dist[own[0]] == pytest.approx(len(own) * dist[own[-1]])  # 1 / (rank + 1)
    assert set(dist) - set(own) <= set(CATEGORIES[confuser(category)]) and confuser(category) != category


def test_bad_specs_are_refused():
    for kwargs in ({"correct_share": 0.0}, {"correct_share": 1.0}, {"steps": 0}, {"lr": -1.0}):
        with pytest.raises(ValueError):
            WarmStartSpec(**kwargs)


def test_the_warm_start_learns_the_task_and_is_the_same_file_for_the_same_seed(tmp_path):
    """A short run already answers a fair share correctly (a random policy: about 12 in 30k); the weights are a
    function of the seed alone, and load as a Hugging Face model."""
    from transformers import AutoModelForCausalLM

    spec = WarmStartSpec(steps=120, batch_size=32, eval_samples=4)
    record = build_warm_start(tmp_path / "a", spec)
    assert record["train"]["accuracy"] > 0.05 and record["heldout"]["accuracy"] > 0.05
    assert json.loads((tmp_path / "a" / "warm_start.json").read_text())["spec"]["steps"] == 120
    build_warm_start(tmp_path / "b", spec)
    weights = [(tmp_path / d / "model.safetensors").read_bytes() for d in ("a", "b")]
    assert weights[0] == weights[1]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    assert model.config.model_type == "qwen3" and next(model.parameters()).dtype.is_floating_point
