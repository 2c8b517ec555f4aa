"""The training signal under the default normalisation (all_correct_scale=group) is not the encoder's rounding: on
real responses, rounding their embeddings to the encoder's GPU precision (float16) moves no advantage by more
than 0.02 and flips no sign of an advantage larger than 0.05 (dev/bench_signal.py measures the same with real
float16 forward passes, docs/benchmarks.md)."""

import json

import numpy as np
import torch

from gcpo_core.credit.compute import compute_credit
from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.encoder import default_dtype

LARGEST_MOVE = 0.02
SIGN_KEPT_ABOVE = 0.05


def _rollouts(shared_data):
    """The shared data's 200 GSM8K problems: 4 model responses each with the data set's correctness labels, and
    the reference solution as a fifth correct rollout (more all-correct groups of genuinely different routes)."""
    texts, rewards, groups = [], [], []
    for line in (shared_data / "rollout_groups.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for text, correct in [*zip(row["responses"], row["correct"]), (row["solution"], True)]:
            texts.append(text)
            rewards.append(1.0 if correct else -1.0)
            groups.append(row["id"])
    return texts, torch.tensor(rewards, dtype=torch.float64), groups


def test_rounding_to_the_gpu_precision_moves_no_advantage_of_the_default_by_more_than_0_02(shared_data, minilm):
    texts, rewards, groups = _rollouts(shared_data)
    encoded = minilm.encode(texts)
    contributes = (~encoded.empty).tolist()
    config = CreditConfig()
    assert config.all_correct_scale == "group"  # the guarantee is the default's
    gpu_dtype = default_dtype(torch.device("cuda"))
    assert gpu_dtype is torch.float16
    reference = compute_credit(rewards, encoded.embeddings.double(), groups, config, contributes=contributes)
    rounded = encoded.embeddings.to(gpu_dtype).to(torch.float64)
    assert float((rounded - encoded.embeddings.double()).abs().max()) > 0  # the rounding did change them
    other = compute_credit(rewards, rounded, groups, config, contributes=contributes)
    ref_adv, adv = reference.advantage.numpy(), other.advantage.numpy()
    moved = np.abs(adv - ref_adv)
    assert moved.max() <= LARGEST_MOVE, moved.max()
    flipped = (ref_adv * adv < 0) & (np.abs(ref_adv) > SIGN_KEPT_ABOVE)
    assert not flipped.any(), [(texts[i][:60], ref_adv[i], adv[i]) for i in np.flatnonzero(flipped)]
    # and the default does give all-correct groups a push of GRPO's order: the guarantee is not checked on zeros
    diagnostics = reference.groups
    assert int(diagnostics.all_correct.sum()) >= 20
    all_correct_rows = np.concatenate(
        [
            reference.layout.index[g][reference.layout.mask[g]].numpy()
            for g in range(len(reference.layout.keys))
            if bool(diagnostics.all_correct[g])
        ]
    )
    assert np.abs(ref_adv[all_correct_rows]).mean() > 0.5
