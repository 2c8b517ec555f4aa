"""Group Contrastive Policy Optimization ("When Contrast Fails, Go Gold", arXiv 2510.07790) -- not GCPO.

When every rollout of a prompt is wrong, GRPO has nothing to contrast. This baseline replaces one of the group's
rollouts with the data set's reference solution, scored as correct, before the old log-probabilities are
computed: the policy's log-probabilities of the reference are then computed like any rollout's, and the group's
advantages steer the update toward it. It needs a reference solution per prompt (``extra_info.solution``,
written by ``scripts/prepare_data.py`` for sets that have one, e.g. MATH; DAPO-Math-17K has none).
"""

from __future__ import annotations

import copy
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.padding_utils import build_padding_position_ids
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from gcpo_core.credit.config import TRUE_FALSE, Rule, check_fields, number
from recipe.gcpo.baselines import read_rows
from recipe.gcpo.settings import Baseline, TrainerNeed, register
from verl_preflight import ConfigError

# per-token fields rebuilt for the injected response; any other per-token field cannot be made up
_REBUILT = {
    "prompts",
    "responses",
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "loss_mask",
    "rm_scores",
    "rollout_log_probs",
}


@dataclass(frozen=True)
class GroupContrastiveSettings:
    """``algorithm.group_contrastive``: ``enable``, the ``reward`` given to the reference (a correct answer's
    reward: finite and > 0), and the ``extra_info`` key of the reference solution."""

    enable: bool = False
    reward: float = 1.0
    solution_key: str = "solution"

    def __post_init__(self) -> None:
        check_fields(
            self,
            "group_contrastive",
            enable=TRUE_FALSE,
            reward=Rule(
                number(0, strict=True).holds,
                "a finite number > 0 (a correct answer's reward: the injection takes a reward > 0 as correct)",
            ),
            solution_key=Rule(lambda key: isinstance(key, str) and key != "", "a non-empty string"),
        )


def inject_references(
    batch: KVBatchMeta, tokenizer, settings: GroupContrastiveSettings, max_response_length: int
) -> tuple[KVBatchMeta, dict[str, float]]:
    """Give every all-wrong group (rewards <= 0) with a reference solution one correct rollout: the reference.

    Returns the batch (tags updated with the new lengths) and ``group_contrastive/*`` metrics.
    """
    data = read_rows(batch, "extra_info")
    rewards = data.scores
    extras = [getattr(e, "data", e) for e in data.fields["extra_info"]]
    rows_by_uid: dict = defaultdict(list)
    for row in np.flatnonzero(data.valid):
        rows_by_uid[data.uids[row]].append(int(row))

    tags = [dict(t) for t in batch.tags]
    all_wrong = injected = missing = 0
    for uid, rows in rows_by_uid.items():
        if any(rewards[r] > 0 for r in rows):
            continue
        all_wrong += 1
        extra = extras[rows[0]] if isinstance(extras[rows[0]], dict) else {}
        solution = extra.get(settings.solution_key)
        if not isinstance(solution, str) or not solution.strip():
            missing += 1
            continue
        row = rows[0]
        sample, tag = _reference_sample(batch, row, tokenizer, solution, settings.reward, max_response_length)
        tq.kv_batch_put(
            keys=[batch.keys[row]],
            partition_id=batch.partition_id,
            fields=list_of_dict_to_tensordict([sample]),
            tags=[tag],
        )
        tags[row] = tag
        injected += 1
    metrics = {
        "group_contrastive/all_wrong_groups": float(all_wrong),
        "group_contrastive/injected_groups": float(injected),
        "group_contrastive/missing_solutions": float(missing),
    }
    new_batch = KVBatchMeta(
        partition_id=batch.partition_id,
        keys=list(batch.keys),
        tags=tags,
        fields=batch.fields,
        extra_info=batch.extra_info,
    )
    return new_batch, metrics


def _reference_sample(batch, row, tokenizer, solution, reward, max_response_length):
    source = tq.kv_batch_get(keys=[batch.keys[row]], partition_id=batch.partition_id)[0]
    old_lengths = {int(source["responses"].shape[0]), int(source["input_ids"].shape[0])}
    for key in source.keys():
        value = source[key]
        if (
            key not in _REBUILT
            and isinstance(value, torch.Tensor)
            and value.dim() > 0
            and value.shape[0] in old_lengths
        ):
            # e.g. routed_experts (router replay) or teacher_logprobs (distillation): nothing to rebuild them from
            raise ValueError(f"cannot inject a reference solution into a rollout with the per-token field {key!r}")
    ids = tokenizer(solution, add_special_tokens=False)["input_ids"][: max_response_length - 1] + [
        tokenizer.eos_token_id
    ]
    responses = torch.tensor(ids, dtype=torch.int64)
    prompts = source["prompts"].to(torch.int64)
    input_ids = torch.cat([prompts, responses])
    attention_mask = torch.ones_like(input_ids)
    ones = torch.ones_like(responses)
    rm_scores = torch.zeros(len(ids), dtype=torch.float32)
    rm_scores[-1] = float(reward)
    sample = {
        key: (source[key].clone() if isinstance(source[key], torch.Tensor) else copy.deepcopy(source[key]))
        for key in source.keys()
    }
    sample.update(
        responses=responses,
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=build_padding_position_ids(source.get("position_ids"), attention_mask),
        response_mask=ones,
        loss_mask=ones.clone(),
        rm_scores=rm_scores,
        # the reference was not sampled: no rollout log-probs (rollout correction is refused with this baseline)
        rollout_log_probs=torch.zeros(len(ids), dtype=torch.float32),
    )
    tag = dict(batch.tags[row])
    tag.update(response_len=len(ids), seq_len=len(prompts) + len(ids), group_contrastive_reference=True)
    return sample, tag


def solution_coverage(path: str, solution_key: str = "solution", rows: int = 200) -> float:
    """Share of the first ``rows`` rows of a verl parquet file that carry a reference solution."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path).read_row_group(0).slice(0, rows).to_pylist()
    if not table:
        return 0.0
    has = [
        isinstance(r.get("extra_info"), dict) and bool(str(r["extra_info"].get(solution_key) or "").strip())
        for r in table
    ]
    return float(np.mean(has))


def check_group_contrastive(config: DictConfig, settings: GroupContrastiveSettings, recipe: Any) -> None:
    correction = config.algorithm.get("rollout_correction") or {}
    if any(correction.get(key) for key in ("rollout_is", "rollout_rs", "bypass_mode")):
        raise ConfigError(
            "algorithm.rollout_correction",
            "algorithm.group_contrastive injects reference solutions that were never sampled, so they have no rollout "
            "log-probs: set rollout_is=null, rollout_rs=null and bypass_mode=false (bypass mode would use them as the "
            "old log-probs)",
        )
    train_files = OmegaConf.select(config, "data.train_files")
    for path in [train_files] if isinstance(train_files, str) else list(train_files or []):
        path = os.path.expanduser(str(path))
        if path.endswith(".parquet") and os.path.isfile(path) and solution_coverage(path, settings.solution_key) == 0:
            raise ConfigError(
                "data.train_files",
                f"{path} has no reference solutions (extra_info.{settings.solution_key}) for "
                "algorithm.group_contrastive: DAPO-Math-17K has none; prepare a set that does, e.g. "
                "`scripts/prepare_data.py --datasets math`",
            )


def reference_injection(trainer, settings: GroupContrastiveSettings, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
    """The trainer's hook before verl balances the batch: the references go in before the old log-probabilities."""
    batch, injected = inject_references(
        batch, trainer.tokenizer, settings, int(trainer.config.data.max_response_length)
    )
    metrics.update(injected)
    return batch


BASELINE = register(
    Baseline(
        "group_contrastive",
        GroupContrastiveSettings,
        needs_trainer=lambda settings: TrainerNeed(
            "algorithm.group_contrastive.enable=true",
            "injects the reference solutions before the old log-probabilities",
        ),
        check=check_group_contrastive,
        before_balance=reference_injection,
    )
)
