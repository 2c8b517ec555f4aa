import pytest

from gcpo_core.credit.config import CreditConfig


def test_defaults_are_the_reconstruction():
    config = CreditConfig()
    assert (config.kernel, config.quality, config.method, config.advantage) == ("cosine", "clip", "auto", "shapley")
    assert config.all_correct_scale == "group"  # the paper's drop-in reading: GRPO's normalisation of the credit
    assert config.epsilon == 1e-6 and config.norm_by_std


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("kernel", "laplace", "kernel must be one of"),
        ("quality", "square", "quality must be one of"),
        ("method", "shap", "method must be one of"),
        ("advantage", "rank", "advantage must be one of"),
        ("permutations", 3, r"permutations must be an integer in \[4"),
        ("permutations", 0, r"permutations must be an integer in \[4"),
        ("all_correct_scale", "batchwise", "all_correct_scale must be one of"),
        ("exact_max_contributors", 40, r"exact_max_contributors must be an integer in \[0, 22\]"),
        ("exact_max_contributors", 4.5, "exact_max_contributors must be an integer"),
        ("antithetic", "yes", "antithetic must be true or false"),
        ("mix_coef", float("nan"), "mix_coef must be a finite number"),
        ("epsilon", -1.0, "epsilon must be a finite number > 0"),
        ("rbf_bandwidth", 0.0, "rbf_bandwidth must be a finite number > 0"),
        ("max_group_size", 0, "max_group_size must be an integer"),
        ("seed", -3, "seed must be an integer"),
    ],
)
def test_bad_values_fail_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        CreditConfig(**{field: value})


def test_odd_permutations_are_fine_and_split_into_plain_units():
    assert CreditConfig(permutations=9).permutations == 9
    assert CreditConfig(permutations=9, antithetic=False).permutations == 9


@pytest.mark.parametrize("epsilon", [0.0, 0, -1e-9, float("inf")])
def test_epsilon_must_be_positive_everywhere_it_is_set(epsilon):
    # epsilon = 0 divides a constant group's zero spread by zero: NaN advantages
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        CreditConfig(epsilon=epsilon)


def test_the_cli_refuses_the_epsilon_the_engine_refuses_naming_the_flag(tmp_path, capsys):
    import json

    from gcpo_core.cli import main

    rollouts = tmp_path / "in.jsonl"
    rollouts.write_text("".join(json.dumps({"group": "g", "reward": 1, "embedding": [1, 0]}) + "\n" for _ in range(2)))
    assert main(["credit", str(rollouts), "--epsilon", "0"]) == 2
    assert capsys.readouterr().err == "gcpo credit: --epsilon 0.0: must be a finite number > 0\n"
