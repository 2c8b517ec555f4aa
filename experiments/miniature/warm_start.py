"""The miniature's starting policy: the smoke's tiny Qwen3 (tests/special_e2e/smoke/policy.py), taught the task's
format by a short supervised run, to a few tens of percent correct.

A random policy spreads its mass over a 30k-word vocabulary and never answers correctly, so RL has nothing to
reinforce. The warm start trains on the training prompts only, with targets drawn from a fixed mixture: with
probability ``correct_share`` a word of the prompt's category -- skewed, the ``r``-th word ``1/(r+1)`` as
likely as the first, as a pretrained model has favourite answers -- else a word of the next category in the
task's order (its confuser: a wrong answer of the right kind, which a tiny model learns as fast as a right one).
Trained to convergence, the policy samples about ``correct_share`` correct answers, several of them distinct,
and every arm starts from the same file. Deterministic given ``seed``; offline (the tokenizer ships with the
package).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from experiments.miniature.task import CATEGORIES, SPLITS, is_correct, prompts


@dataclass(frozen=True)
class WarmStartSpec:
    correct_share: float = 0.3
    steps: int = 300
    batch_size: int = 128
    lr: float = 3e-3
    seed: int = 0
    eval_samples: int = 16  # sampled answers per prompt for the recorded start accuracy

    def __post_init__(self):
        if not 0.0 < self.correct_share < 1.0:
            raise ValueError(f"correct_share must be in (0, 1), got {self.correct_share!r}")
        if self.steps < 1 or self.batch_size < 1 or self.eval_samples < 1:
            raise ValueError("steps, batch_size and eval_samples must be positive")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")


def confuser(category: str) -> str:
    """The category whose words are the warm start's wrong answers for ``category``: the next one in order."""
    names = list(CATEGORIES)
    return names[(names.index(category) + 1) % len(names)]


def target_distribution(category: str, correct_share: float) -> dict[str, float]:
    """The warm start's answer distribution for one category: its words, skewed, then its confuser's words."""
    own = CATEGORIES[category]
    weights = [1.0 / (rank + 1) for rank in range(len(own))]
    total = sum(weights)
    dist = {word: correct_share * w / total for word, w in zip(own, weights)}
    wrong = [w for w in CATEGORIES[confuser(category)] if w not in own]
    for word in wrong:
        dist[word] = (1.0 - correct_share) / len(wrong)
    return dist


def _encode(tokenizer, prompt_text: str) -> list[int]:
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt_text}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer.encode(chat, add_special_tokens=False)


@torch.no_grad()
def sampled_accuracy(model, tokenizer, split: str, samples: int, seed: int) -> dict[str, float]:
    """Answers sampled at temperature 1 from the policy, ``samples`` per prompt of ``split``: the share correct
    and the mean number of distinct correct answers per prompt."""
    generator = torch.Generator().manual_seed(seed)
    correct = distinct = total = 0
    eos = tokenizer.eos_token_id
    for text, category in prompts(split):
        ids = torch.tensor([_encode(tokenizer, text)] * samples)
        answers = []
        for _ in range(4):  # a word and an end token; longer answers are wrong anyway
            logits = model(ids).logits[:, -1, :].float()
            nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
            ids = torch.cat([ids, nxt], dim=1)
        for row in ids[:, -4:].tolist():
            cut = row.index(eos) if eos in row else len(row)
            answers.append(tokenizer.decode(row[:cut], skip_special_tokens=True))
        good = [a for a in answers if is_correct(a, category)]
        correct += len(good)
        distinct += len(set(good))
        total += samples
    n_prompts = len(prompts(split))
    return {"accuracy": correct / total, "distinct_correct": distinct / n_prompts}


def build_warm_start(out_dir: str | os.PathLike, spec: WarmStartSpec = WarmStartSpec()) -> dict:
    """Train and save the starting policy (float32, HF format) in ``out_dir``; returns what ``warm_start.json``
    there records (the spec, the final loss, the sampled accuracy on each split)."""
    from transformers import Qwen3ForCausalLM

    from tests.special_e2e.smoke.policy import TinyPolicySpec, build_policy

    out_dir = Path(out_dir)
    build_policy(out_dir, TinyPolicySpec(seed=spec.seed))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen3ForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
        rng = random.Random(spec.seed)
        train = prompts("train")
        encoded = {text: _encode(tokenizer, text) for text, _ in train}
        dists = {c: target_distribution(c, spec.correct_share) for c in CATEGORIES}
        word_ids = {w: tokenizer.encode(w, add_special_tokens=False) for d in dists.values() for w in d}
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
        model.train()
        loss_value = float("nan")
        for _ in range(spec.steps):
            batch, labels = [], []
            for text, category in rng.choices(train, k=spec.batch_size):
                words, weights = zip(*dists[category].items())
                answer = word_ids[rng.choices(words, weights=weights)[0]] + [tokenizer.eos_token_id]
                batch.append(encoded[text] + answer)
                labels.append([-100] * len(encoded[text]) + answer)
            width = max(map(len, batch))
            pad = tokenizer.pad_token_id
            ids = torch.tensor([row + [pad] * (width - len(row)) for row in batch])
            target = torch.tensor([row[1:] + [-100] * (width - len(row) + 1) for row in labels])
            mask = (torch.arange(width) < torch.tensor([len(r) for r in batch])[:, None]).long()
            hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            scored = target != -100  # the vocabulary projection only where an answer token is predicted
            loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[scored]), target[scored])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_value = float(loss.detach())
        model.eval()
        record = {"spec": asdict(spec), "final_loss": loss_value}
        for split in SPLITS:
            record[split] = sampled_accuracy(model, tokenizer, split, spec.eval_samples, spec.seed)
    model.config.dtype = torch.float32
    model.save_pretrained(out_dir)
    (out_dir / "warm_start.json").write_text(json.dumps(record, indent=2) + "\n")
    return record
