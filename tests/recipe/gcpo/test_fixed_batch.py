"""A fixed batch's credit and advantages are the numbers recorded before a re-cut of the code (issue 39).

The batch (uneven groups; all-correct, mixed and all-wrong groups; an exact copy; a shaped reward) is credited by
the engine under every Shapley method and normalisation switch, and its advantages are taken through verl's own
``compute_advantage`` with the registered ``gcpo`` estimator and the ``algorithm`` config a run would pass. Every
float64 is compared with ``fixed_batch.json``, recorded by

    python -m tests.recipe.gcpo.test_fixed_batch --record

before the change (only then: a recording after it proves nothing). Bit for bit on the torch version and thread
count it was recorded with; elsewhere (another CPU's reduction order) to 1e-9.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

RECORD = Path(__file__).with_name("fixed_batch.json")
# (name, algorithm.gcpo.credit overrides, norm_adv_by_std_in_grpo)
SETTINGS = [
    ("default", {}, True),
    ("exact", {"method": "exact"}, True),
    ("mc", {"method": "mc", "permutations": 16, "seed": 3}, True),
    ("loo", {"method": "loo"}, True),
    ("batch-scale", {"all_correct_scale": "batch"}, True),
    ("mix", {"advantage": "mix", "mix_coef": 0.5}, True),
    ("dr-grpo", {}, False),
    ("rbf-sqrt-floor", {"kernel": "rbf", "quality": "sqrt", "std_floor": 0.05}, True),
]


def fixed_batch() -> tuple[np.ndarray, torch.Tensor, list[str]]:
    """(rewards (N,), embeddings (N, 16) float32 unit rows, prompt ids) of 7 prompts, rows interleaved."""
    rng = np.random.default_rng(20261126)
    sizes = [8, 8, 6, 8, 5, 8, 12]
    rewards, rows, uids = [], [], []
    for g, size in enumerate(sizes):
        centre = rng.normal(size=16)
        emb = centre + rng.normal(scale=0.6, size=(size, 16))
        if g == 0:
            reward = np.ones(size)  # all correct, one exact copy
            emb[3] = emb[1]
        elif g == 1:
            reward = -np.ones(size)  # all wrong
        elif g == 4:
            reward = np.array([1.0, 0.6, -1.0, 1.0, 0.2])  # shaped rewards (an overlong penalty)
        elif g == 6:
            reward = np.ones(size)  # all correct, past the exact limit of `auto` with mc on
        else:
            reward = np.where(rng.random(size) < 0.5, 1.0, -1.0)
            reward[0] = 1.0
        rewards += list(reward)
        rows += list(emb)
        uids += [f"p{g}"] * size
    order = np.random.default_rng(7).permutation(len(uids))
    embeddings = torch.tensor(np.asarray(rows)[order], dtype=torch.float32)
    embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
    return np.asarray(rewards)[order], embeddings, [uids[i] for i in order]


def _algorithm(overrides: dict, norm_by_std: bool):
    return OmegaConf.create(
        {"adv_estimator": "gcpo", "norm_adv_by_std_in_grpo": norm_by_std, "gcpo": {"credit": dict(overrides)}}
    )


def compute_all() -> dict[str, dict[str, list[float]]]:
    """Every setting's engine credit (phi, its stderr, score, advantage) and verl's advantage of the batch."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from gcpo_core.credit.compute import compute_credit
    from recipe.gcpo.config import GCPOSettings
    from recipe.gcpo.estimator import StepCredit, provide_credit

    rewards, embeddings, uids = fixed_batch()
    n = len(uids)
    out = {}
    for name, overrides, norm_by_std in SETTINGS:
        algorithm = _algorithm(overrides, norm_by_std)
        credit_config = GCPOSettings.from_algorithm_config(algorithm, "gcpo").credit
        result = compute_credit(rewards, embeddings, uids, credit_config)
        mask = torch.zeros(n, 4)
        mask[:, :3] = 1
        token_rewards = torch.zeros(n, 4, dtype=torch.float32)
        token_rewards[:, 2] = torch.tensor(rewards, dtype=torch.float32)
        data = DataProto.from_dict(
            tensors={"token_level_rewards": token_rewards, "response_mask": mask},
            non_tensors={"uid": np.array(uids, dtype=object)},
        )
        step = StepCredit(
            np.array(uids, dtype=object),
            token_rewards.sum(-1).double().numpy(),
            result.score.numpy(),
            np.ones(n, dtype=bool),
            credit_config,
            result.shapley_stderr.numpy(),
        )
        with provide_credit(step):
            verl_adv = compute_advantage(
                data, adv_estimator="gcpo", norm_adv_by_std_in_grpo=norm_by_std, config=algorithm
            ).batch["advantages"][:, 0]
        out[name] = {
            "shapley": result.shapley.tolist(),
            "shapley_stderr": result.shapley_stderr.tolist(),
            "score": result.score.tolist(),
            "advantage": result.advantage.tolist(),
            "verl_advantage": verl_adv.double().tolist(),
        }
    return out


def _environment() -> dict:
    return {"torch": torch.__version__, "threads": torch.get_num_threads()}


def test_the_fixed_batch_gives_the_recorded_credit_and_advantages():
    if not RECORD.is_file():
        pytest.fail(f"{RECORD.name} is missing: record it (see this module's docstring) before changing the code")
    recorded = json.loads(RECORD.read_text())
    got = compute_all()
    assert set(got) == set(recorded["values"]), "the settings differ from the recording's"
    bitwise = recorded["environment"] == _environment()
    for name, fields in recorded["values"].items():
        for field, values in fields.items():
            expected = np.array([float.fromhex(v) for v in values])
            actual = np.asarray(got[name][field], dtype=np.float64)
            if bitwise:
                assert np.array_equal(actual, expected), (name, field, np.abs(actual - expected).max())
            else:
                np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-9, err_msg=f"{name} {field}")
    # the record is not vacuous: every setting's credit moves the advantages of the all-correct groups
    rewards, _, uids = fixed_batch()
    all_correct = np.isin(np.array(uids), ["p0", "p6"])
    for name, fields in got.items():
        assert np.abs(np.asarray(fields["advantage"])[all_correct]).max() > 0.05, name


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python -m tests.recipe.gcpo.test_fixed_batch --record")
    values = {
        name: {field: [float(v).hex() for v in vs] for field, vs in fields.items()}
        for name, fields in compute_all().items()
    }
    RECORD.write_text(json.dumps({"environment": _environment(), "values": values}, indent=1) + "\n")
    print(f"recorded {RECORD}")
