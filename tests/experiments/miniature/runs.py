"""Shared by the miniature's tests: runs shaped as ``experiments.miniature`` collects them."""

SPEC = {"steps": 40, "lr": 0.001}


def collected_runs(values_by_arm, step=40, spec=SPEC):
    """``{arm: {seed: distinct_correct}}`` as ``collect`` returns it: accuracy 0.2 at step 0 and 0.5 at ``step``,
    started from warm start ``seed``, trained under ``spec``."""
    return {
        arm: {
            seed: {
                "evals": {
                    0: {"accuracy": 0.2, "distinct_correct": 2.0},
                    step: {"accuracy": 0.5, "distinct_correct": value},
                },
                "warm_seed": seed,
                "spec": spec,
            }
            for seed, value in seeds.items()
        }
        for arm, seeds in values_by_arm.items()
    }
