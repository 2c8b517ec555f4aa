import json

import numpy as np
import pytest

from gcpo_core.encoding.pipeline import RolloutCredit
from gcpo_core.evaluation.dump import read_credit_dump, write_credit_dump


def _result(n):
    values = np.arange(n, dtype=float)
    result = RolloutCredit(
        quality=values, shapley=values / 10, shapley_stderr=np.zeros(n), score=values, advantage=-values
    )
    result.embeddings = np.eye(n, 4, dtype=np.float32)
    result.metrics = {"gcpo/team_value/mean": 1.5}
    return result


def test_round_trip_of_a_sample_of_groups_without_padding(tmp_path):
    uids = ["a", "a", "b", "b", "pad", "c"]
    valid = [True, True, True, True, False, True]
    path = write_credit_dump(
        tmp_path, 7, [f"t{i}" for i in range(6)], [1, 0, 1, 1, 0, 1], uids, valid, _result(6), max_groups=2, seed=3
    )
    records = list(read_credit_dump(path))
    assert len(records) == 2 and all(r["uid"] != "pad" for r in records)
    assert all(r["step"] == 7 and len(r["embeddings"]) == len(r["texts"]) for r in records)
    again = list(
        read_credit_dump(
            write_credit_dump(
                tmp_path / "x",
                7,
                [f"t{i}" for i in range(6)],
                [1, 0, 1, 1, 0, 1],
                uids,
                valid,
                _result(6),
                max_groups=2,
                seed=3,
            )
        )
    )
    assert [r["uid"] for r in again] == [r["uid"] for r in records]  # the sample is reproducible


def test_a_file_that_is_not_a_dump_is_refused(tmp_path):
    path = tmp_path / "credit_step000001.jsonl"
    path.write_text(json.dumps({"step": 1, "texts": []}) + "\n")
    with pytest.raises(ValueError, match="not a GCPO credit dump record"):
        list(read_credit_dump(tmp_path))
