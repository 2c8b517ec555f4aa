import string
import time

import numpy as np
import pytest
import torch

from gcpo_core.rewards.deadline_pool import _WALL_CAP
from recipe.gcpo.reward import compute_score
from tests.recipe.gcpo.conftest import compose_gcpo

PATHOLOGICAL = "Let me compute.\nSo the answer is $\\boxed{9^{9^{9^{9^{9}}}}}$."


def test_scores_correctness_with_math_verify_like_dapo():
    right = compute_score("math_dapo", "so x = 3/4.\nAnswer: 0.75", "\\frac{3}{4}")
    wrong = compute_score("math_dapo", "Answer: 0.7", "\\frac{3}{4}")
    assert right["score"] == 1.0 and right["acc"] == 1.0 and wrong["score"] == -1.0 and wrong["acc"] == 0.0
    assert compute_score("gsm8k", "A: 5", "6", wrong_score=0.0)["score"] == 0.0
    assert right["pred"] == "0.75"
    assert right["timeout"] == 0.0 and wrong["timeout"] == 0.0


def test_every_result_has_the_same_keys():
    """verl builds reward_extra_info arrays from the first response's keys: every result must carry them all."""
    results = [compute_score("x", text, "7", timeout_s=1.0) for text in ("Answer: 7", "Answer: 8", "", PATHOLOGICAL)]
    assert len({tuple(sorted(r)) for r in results}) == 1
    assert set(results[0]) == {"score", "acc", "pred", "timeout", "timeout_retried", "gcpo_signal"}


def test_a_pathological_answer_is_wrong_and_counted_as_a_timeout():
    start = time.monotonic()
    result = compute_score("math_dapo", PATHOLOGICAL, "3", timeout_s=1.0)
    # two tries, each at most _WALL_CAP deadlines of wall time however starved its worker, plus a worker's start-up
    assert time.monotonic() - start < 2 * _WALL_CAP * 1.0 + 30
    assert result["score"] == -1.0 and result["acc"] == 0.0 and result["timeout"] == 1.0
    assert result["timeout_retried"] == 1.0  # tried twice before it counted
    assert result["gcpo_signal"] == 0.0


def test_gcpo_signal_is_constant_in_a_group_exactly_when_gcpo_has_no_signal():
    def group(texts, answer="7"):
        return [compute_score("x", t, answer)["gcpo_signal"] for t in texts]

    all_wrong = group(["Answer: 1", "Answer: 2", "Answer: 3"])
    same_correct = group(["x + y = 7\nAnswer: 7"] * 3)
    different_correct = group(["3 + 4 = 7\nAnswer: 7", "14 / 2 = 7\nAnswer: 7", "Answer: 7"])
    mixed = group(["Answer: 7", "Answer: 8"])
    assert np.std(all_wrong) == 0 and np.std(same_correct) == 0  # DAPO's filter drops these
    assert np.std(different_correct) > 0 and np.std(mixed) > 0  # and keeps these (acc would drop the first)
    assert all(1.0 <= v < 1.000001 for v in different_correct)


def test_a_misspelt_reward_kwarg_is_an_error_not_a_no_op():
    with pytest.raises(TypeError, match="timeout_sec"):
        compute_score("x", "Answer: 7", "7", timeout_sec=1.0)
    assert compute_score("x", "Answer: 7", "7", reward_router_address=None)["score"] == 1.0  # verl's own extras


def test_empty_response_is_wrong():
    assert compute_score("x", "", "3")["score"] == -1.0


# ----------------------------------------------------------------------------------------------- through verl
def _char_tokenizer():
    """A character-level tokenizer, built offline: decoding gives back the exact text (LaTeX included)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(["[PAD]", "[UNK]", *string.printable])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]")


def _one_response(tokenizer, text: str, gold: str):
    from verl import DataProto

    prompt = torch.tensor([tokenizer.convert_tokens_to_ids("Q")])
    response = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    return DataProto.from_dict(
        tensors={
            "prompts": prompt[None],
            "responses": response[None],
            "attention_mask": torch.ones(1, len(prompt) + len(response), dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array(["math_dapo"], dtype=object),
            "reward_model": np.array([{"ground_truth": gold}], dtype=object),
            "extra_info": np.array([{}], dtype=object),
        },
    )


def test_verls_dapo_reward_manager_scores_in_its_executor_threads_within_the_bound():
    """The launchers' path: verl's DAPO reward manager calls compute_score in its event loop's executor threads.
    A pathological answer among them costs the bound, is wrong, and reaches reward_extra_info as a timeout."""
    from verl.trainer.ppo.reward import load_reward_manager

    config = compose_gcpo(
        [
            "actor_rollout_ref.model.path=/models/none",
            "data.train_files=/d/t.parquet",
            "data.val_files=/d/v.parquet",
            "reward.reward_manager.name=dapo",
            "+reward.custom_reward_function.reward_kwargs.timeout_s=1.0",
        ]
    )
    tokenizer = _char_tokenizer()
    manager = load_reward_manager(config, tokenizer)
    texts = [("Work.\nAnswer: 7", "7"), (PATHOLOGICAL, "3"), ("Work.\nAnswer: 8", "7"), ("So $\\boxed{25}$.", "25\\%")]

    async def score_all():
        import asyncio

        return await asyncio.gather(*(manager.run_single(_one_response(tokenizer, t, g)) for t, g in texts))

    start = time.monotonic()
    outputs = manager.loop.run_until_complete(score_all())
    assert time.monotonic() - start < 1.0 + 30
    assert [o["reward_score"] for o in outputs] == [1.0, -1.0, -1.0, 1.0]
    assert [o["reward_extra_info"]["timeout"] for o in outputs] == [0.0, 1.0, 0.0, 0.0]
    assert outputs[0]["reward_extra_info"]["pred"] == "7"


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_scores_inside_a_ray_actor_from_its_threads(local_ray):
    """As in verl's reward loop workers: a Ray actor that scores from a thread pool, pathological answer
    included; the scoring workers start from inside the actor's process."""
    ray = local_ray

    @ray.remote(num_cpus=0)
    class Scorer:
        def score(self, pairs):
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(4) as threads:
                return list(threads.map(lambda p: compute_score("x", p[0], p[1], timeout_s=1.0), pairs))

    actor = Scorer.remote()
    results = ray.get(actor.score.remote([("Answer: 7", "7"), (PATHOLOGICAL, "3"), ("Answer: 6", "7")]), timeout=120)
    assert [(r["score"], r["timeout"]) for r in results] == [(1.0, 0.0), (-1.0, 1.0), (-1.0, 0.0)]
    ray.kill(actor)
