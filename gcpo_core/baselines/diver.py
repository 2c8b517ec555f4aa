"""DIVER (Hu et al., *Diversity-Incentivized Exploration for Versatile Reasoning*, arXiv 2509.26209, ICLR 2026):
global, sequence-level diversity within a prompt's group as an intrinsic reward, potential-based, gated on
correctness, clipped and used early in training.

Sources. The formulas come from the authors' code, NJU-RL/DIVER at commit 5870b47 (2026-03-05):
``verl/div_src/diversity_metric.py`` (``calculate_belu_matrix``, ``extract_formulas``,
``calculate_unique_diversity``), ``verl/div_src/ray_trainer.py`` (the ``rs_type`` branches of ``fit``) and
``verl/div_src/calculate_adv.py`` (``compute_grpo_rs_outcome_advantage``); the potential-based form, the
conditional (correct-only) shaping, the clip to ``[0, sigma]`` and the decay of lambda are the paper's §4 as
summarised in public notes on it (the paper's body was not readable here). For a group o_1..o_G, rewards r_i::

    textual diversity    TD_i = 1 - 1/(G-1) sum_{j != i} (BLEU(o_j | o_i) + BLEU(o_i | o_j)) / 2
    equation diversity   ED_i = |F_i minus the union of F_j, j != i| / |F_i|     (0 when F_i is empty)
    intrinsic reward     d_i  = clip(TD_i, 0, max_textual)                        (metric=textual, DIVER-TD)
                              | clip(ED_i, 0, max_equation)                       (metric=equation, DIVER-ED)
                              | both, summed                                      (metric=mix, DIVER-MIX)
    potential shaping    R_i  = gamma^{T_i} d_i     (sum_t gamma d(s_{t+1}) - d(s_t) telescopes; d(prompt) = 0)
    shaped reward        r'_i = r_i + lambda_t * R_i * 1[r_i > 0]                 then GRPO's group normalisation

BLEU is sentence BLEU over whitespace tokens with one reference and the code's n-gram weights
(0.02, 0.1, 0.15, 0.25, 0.38), without smoothing, as nltk's ``sentence_bleu`` computes it (hand-written here
because sacrebleu has no per-order weights; ``dev/bench_diver.py`` checks the two agree and times them).

Choices the sources leave open are switches of :class:`DiverConfig` (defaults and the reading behind each are in
its docstring).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Optional, Sequence

import numpy as np

from gcpo_core.credit.config import TRUE_FALSE, Rule, check_fields, integer, number, one_of, optional
from gcpo_core.credit.grouping import layout_groups

DIVER_BLEU_WEIGHTS = (0.02, 0.1, 0.15, 0.25, 0.38)
METRICS = ("textual", "equation", "mix")
GATES = ("correct", "all_correct")
SCHEDULES = ("cosine", "constant")

# Inline and display math: $$...$$, \[...\], \(...\), $...$ (an escaped \$ is text, not a delimiter).
_MATH = re.compile(
    r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|\\\[(.+?)\\\]|\\\((.+?)\\\)|(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$(?!\$)",
    re.DOTALL,
)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class DiverConfig:
    """DIVER's intrinsic reward (``algorithm.diver.*``).

    Attributes:
        metric: ``equation`` (DIVER-ED, the default: the released run is named ``equ1.0`` and its scale is the one
            the code fixes), ``textual`` (DIVER-TD) or ``mix`` (DIVER-MIX, the paper's best average).
        coef: lambda, the bonus a fully diverse correct response gets on top of its reward. DIVER's rewards are 0/1;
            the recipe's are DAPO's +-1 (twice the gap), so lambda = 1 in DIVER is ``coef = 2`` here.
        max_equation: the clip sigma of ED (the code: 0.68 under ``equ``, 0.42 under ``belu_equ_mix``).
        max_textual: the clip sigma of TD (the code: none under ``belu``, 0.91 = 1 - 0.09 under ``belu_equ_mix``).
        gate: ``correct`` (the paper's conditional shaping: only correct responses get a bonus) or
            ``all_correct`` (the code's ``belu`` branch: only groups whose responses are all correct).
        scale_by_group_accuracy: multiply the bonus by the group's accuracy (the code's ``equ`` branch does).
        horizon_chars: compare only the first N characters of each response (the code: 1000); None: the whole
            response (the paper's horizon ablation found the full response best).
        bleu_weights: BLEU's n-gram weights (the code's 5-gram weights).
        gamma: the potential's discount; the bonus is ``gamma^T d`` with T the response's length in tokens
            (1.0, GRPO's undiscounted return: the bonus is d itself).
        schedule: ``cosine`` (lambda decays from its value to 0 over ``active_steps``: the paper's "gradually
            decays") or ``constant`` (full lambda for ``active_steps`` steps, then off). This follows the paper's
            text, not the official code: a formula-by-formula review of the code (issue 27) found that its
            equation-diversity weight changes sign over training and that its released training script gives no
            bonus at all, so neither schedule here is "the code's".
        active_steps: training steps with a bonus (the code: 100); None: every step, at full lambda.
    """

    metric: str = "equation"
    coef: float = 2.0
    max_equation: float = 0.68
    max_textual: float = 1.0
    gate: str = "correct"
    scale_by_group_accuracy: bool = False
    horizon_chars: Optional[int] = None
    bleu_weights: tuple = field(default=DIVER_BLEU_WEIGHTS)
    gamma: float = 1.0
    schedule: str = "cosine"
    active_steps: Optional[int] = 100

    def __post_init__(self) -> None:
        check_fields(
            self,
            "diver config",
            metric=one_of(METRICS),
            gate=one_of(GATES),
            schedule=one_of(SCHEDULES),
            coef=number(0),
            max_equation=number(0),
            max_textual=number(0),
            gamma=number(0, 1, strict=True),
            horizon_chars=optional(integer(1), " or null"),
            active_steps=optional(integer(1), " or null"),
            scale_by_group_accuracy=TRUE_FALSE,
            bleu_weights=Rule(_bleu_weights_hold, "finite non-negative numbers, not all 0"),
        )
        object.__setattr__(self, "bleu_weights", tuple(float(w) for w in self.bleu_weights))


def _bleu_weights_hold(weights) -> bool:
    if isinstance(weights, (str, bytes)):
        return False
    try:
        weights = tuple(weights)
    except TypeError:  # not a sequence at all
        return False
    numbers = all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights)
    # refused, not read: _bleu would skip a nan weight as if 0 (nan > 0 is false), and an inf one makes BLEU 0 or nan
    return bool(weights) and numbers and all(math.isfinite(w) and w >= 0 for w in weights) and sum(weights) > 0


# ----------------------------------------------------------------------------------------------- the metrics


def _ngram_overlaps(texts: Sequence[str], order: int) -> tuple[np.ndarray, np.ndarray]:
    """Clipped n-gram matches of every pair of whitespace-tokenised texts, and the texts' lengths.

    Each n-gram gets an integer id (the id of its (n-1)-gram prefix combined with its last token, made dense
    by ``np.unique``), each text a row of n-gram counts, and a pair's matches are the sum of the element-wise
    minimum of its two rows: one vectorised pass per order instead of a Counter intersection per pair.

    Returns:
        overlap: `(np.ndarray)` int64 (order, G, G); ``overlap[n-1, i, j]`` = sum over n-grams g of
            min(count_i(g), count_j(g)), symmetric in i and j.
        lengths: `(np.ndarray)` int64 (G,) tokens per text.
    """
    vocabulary: dict[str, int] = {}
    token_ids = [
        np.fromiter((vocabulary.setdefault(w, len(vocabulary)) for w in t.split()), dtype=np.int64) for t in texts
    ]
    lengths = np.array([len(ids) for ids in token_ids], dtype=np.int64)
    size = len(texts)
    overlap = np.zeros((order, size, size), dtype=np.int64)
    if lengths.sum() == 0:
        return overlap, lengths
    tokens = np.concatenate(token_ids)
    owner = np.repeat(np.arange(size), lengths)
    text_end = np.repeat(np.cumsum(lengths), lengths)  # one past the last position of each position's text
    position = np.arange(len(tokens))
    gram = tokens.copy()  # id of the n-gram starting at each position, where it fits in its text
    fits = np.ones(len(tokens), dtype=bool)
    base = max(len(vocabulary), 1)
    for n in range(1, order + 1):
        if n > 1:
            last = position + n - 1
            fits &= last < text_end
            keys = gram[fits] * base + tokens[last[fits]]
            gram = np.full(len(tokens), -1, dtype=np.int64)
            gram[fits] = np.unique(keys, return_inverse=True)[1]
        if not fits.any():
            break
        width = int(gram[fits].max()) + 1
        counts = np.bincount(owner[fits] * width + gram[fits], minlength=size * width).reshape(size, width)
        for i in range(size):
            overlap[n - 1, i] = np.minimum(counts[i], counts).sum(axis=1)
    return overlap, lengths


def _bleu(overlap: Sequence[int], hyp_len: int, ref_len: int, weights: Sequence[float]) -> float:
    """Sentence BLEU of a hypothesis against one reference from the clipped n-gram matches ``overlap[n-1]``.

    nltk without smoothing: a hypothesis with no unigram match scores 0; an order with no match enters as
    log(float min), which leaves at most exp(0.1 * -708) ~ 1e-31 with DIVER's weights: we return 0 there too.
    """
    if hyp_len == 0 or any(w > 0 and m == 0 for w, m in zip(weights, overlap)):
        return 0.0
    log_precision = sum(
        w * math.log(m / max(1, hyp_len - n)) for n, (w, m) in enumerate(zip(weights, overlap)) if w > 0
    )
    brevity = 1.0 if hyp_len > ref_len else math.exp(1.0 - ref_len / hyp_len)
    return brevity * math.exp(log_precision)


def textual_similarity(texts: Sequence[str], weights: Sequence[float] = DIVER_BLEU_WEIGHTS) -> np.ndarray:
    """Mean bidirectional sentence BLEU of each text to the others of its group, ``(1/(G-1)) sum_{j != i}
    (BLEU(o_j | o_i) + BLEU(o_i | o_j)) / 2`` over whitespace tokens (DIVER's ``calculate_belu_matrix``).

    The clipped n-gram matches of a pair are the same in both directions, so each pair is counted once.

    Args:
        texts: `(Sequence[str])` the G responses of one prompt.
    Returns:
        `(np.ndarray)` float64 (G,); zeros for a group of one.
    """
    size = len(texts)
    if size < 2:
        return np.zeros(size)
    overlap, lengths = _ngram_overlaps(texts, len(weights))
    similarity = np.zeros((size, size))
    for i in range(size):
        for j in range(i + 1, size):
            pair = overlap[:, i, j]
            li, lj = int(lengths[i]), int(lengths[j])
            similarity[i, j] = similarity[j, i] = 0.5 * (_bleu(pair, lj, li, weights) + _bleu(pair, li, lj, weights))
    return similarity.sum(axis=1) / (size - 1)


def extract_equations(text: str) -> frozenset[str]:
    """The distinct LaTeX math segments of a response (``$$..$$``, ``\\[..\\]``, ``\\(..\\)``, ``$..$``), with
    whitespace removed so that ``x + 1`` and ``x+1`` are one equation; empty segments are dropped.

    (DIVER's ``extract_formulas`` uses three regular expressions that stop at the first ``]`` / ``)`` / ``$``:
    ``\\( f(x) \\)`` and ``$$x$$`` yield nothing or an empty string there. We take the method, not that quirk.)
    """
    found = set()
    for match in _MATH.finditer(text):
        body = next(group for group in match.groups() if group is not None)
        body = _SPACE.sub("", body)
        if body:
            found.add(body)
    return frozenset(found)


def equation_diversity(texts: Sequence[str]) -> np.ndarray:
    """ED_i = |F_i minus the union of the other responses' F_j| / |F_i|, 0 for a response without equations
    (DIVER's ``calculate_unique_diversity``).

    Args:
        texts: `(Sequence[str])` the G responses of one prompt.
    Returns:
        `(np.ndarray)` float64 (G,) in [0, 1].
    """
    sets = [extract_equations(text) for text in texts]
    seen = Counter(eq for s in sets for eq in s)  # in how many responses each equation occurs
    return np.array([sum(seen[eq] == 1 for eq in s) / len(s) if s else 0.0 for s in sets], dtype=np.float64)


# ----------------------------------------------------------------------------------------------- the shaping


def diver_weight(step: int, config: DiverConfig) -> float:
    """lambda_t / lambda at training step ``step`` (verl's ``global_steps``, 1 for the first update)."""
    if config.active_steps is None:
        return 1.0
    if step >= config.active_steps:
        return 0.0
    if config.schedule == "constant":
        return 1.0
    return math.cos(0.5 * math.pi * max(step, 0) / config.active_steps)


def group_intrinsic_reward(texts: Sequence[str], config: DiverConfig) -> dict[str, np.ndarray]:
    """d_i for one group, and the raw TD / ED it came from (``textual``, ``equation``: NaN when not computed)."""
    if config.horizon_chars is not None:
        texts = [text[: config.horizon_chars] for text in texts]
    size = len(texts)
    textual = np.full(size, np.nan)
    equation = np.full(size, np.nan)
    bonus = np.zeros(size)
    if config.metric in ("textual", "mix"):
        textual = 1.0 - textual_similarity(texts, config.bleu_weights)
        bonus += np.clip(textual, 0.0, config.max_textual)
    if config.metric in ("equation", "mix"):
        equation = equation_diversity(texts)
        bonus += np.clip(equation, 0.0, config.max_equation)
    return {"intrinsic": bonus, "textual": textual, "equation": equation}


@dataclass(frozen=True)
class DiverBonus:
    """The batch's shaping term, row-aligned with the inputs.

    Attributes:
        bonus: `(np.ndarray)` float64 (N,): lambda_t * gamma^T * d * gate, added to the reward (0 at rows that
            get none: wrong, ungated, padding, or past ``active_steps``).
        metrics: ``diver/*`` batch diagnostics.
    """

    bonus: np.ndarray
    metrics: dict[str, float]


def diver_bonus(
    texts: Sequence[str],
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    step: int,
    config: DiverConfig,
    response_lengths: Optional[Sequence[int]] = None,
    valid: Optional[Sequence[bool]] = None,
) -> DiverBonus:
    """DIVER's shaping term for a batch of rollouts (add it to the reward, then group-normalise as GRPO does).

    Args:
        texts: `(Sequence[str])` (N,) decoded responses.
        rewards: `(Sequence[float])` (N,) verifier rewards; a response is correct iff its reward is > 0 (0/1 and
            DAPO's +-1 rewards alike).
        group_ids: `(Sequence[Hashable])` (N,) prompt ids (verl's ``uid``); the diversity of a response is taken
            within its group only.
        step: `(int)` the training step (verl's ``global_steps``).
        config: :class:`DiverConfig`.
        response_lengths: `(Sequence[int] | None)` (N,) response lengths in tokens; needed when gamma < 1.
        valid: `(Sequence[bool] | None)` (N,) False for padding rows, which are left out of every group.
    Returns:
        :class:`DiverBonus`.
    """
    size = len(texts)
    rewards = np.asarray(rewards, dtype=np.float64)
    if len(rewards) != size or len(group_ids) != size:
        raise ValueError(
            f"texts, rewards and group_ids must have one entry per rollout, got {size}, {len(rewards)}, "
            f"{len(group_ids)}"
        )
    if not np.all(np.isfinite(rewards)):
        raise ValueError("DIVER needs finite rewards; got NaN or inf")
    valid = np.ones(size, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    if config.gamma < 1.0:
        if response_lengths is None or len(response_lengths) != size:
            raise ValueError("DIVER with gamma < 1 needs one response length per rollout")
        discount = np.power(config.gamma, np.asarray(response_lengths, dtype=np.float64))
    else:
        discount = np.ones(size)

    weight = diver_weight(step, config)
    bonus = np.zeros(size)
    correct = (rewards > 0) & valid
    textual, equation, intrinsic_all = [], [], []
    valid_rows = np.flatnonzero(valid)
    layout = layout_groups([group_ids[row] for row in valid_rows])
    gated_groups = 0
    if weight > 0 and config.coef > 0:
        for slots, present in zip(layout.index.numpy(), layout.mask.numpy()):
            rows = valid_rows[slots[present]]
            hits = correct[rows]
            if not hits.any() or (config.gate == "all_correct" and not hits.all()):
                continue  # nobody in the group would get a bonus: skip the O(G^2) metrics
            gated_groups += 1
            parts = group_intrinsic_reward([texts[r] for r in rows], config)
            accuracy = hits.mean() if config.scale_by_group_accuracy else 1.0
            bonus[rows] = config.coef * weight * accuracy * discount[rows] * parts["intrinsic"] * hits
            intrinsic_all.append(parts["intrinsic"][hits])
            textual.append(parts["textual"][hits])
            equation.append(parts["equation"][hits])

    def _mean(chunks: list[np.ndarray]) -> float:
        values = np.concatenate(chunks) if chunks else np.zeros(0)
        values = values[np.isfinite(values)]
        return float(values.mean()) if values.size else 0.0

    metrics = {
        "diver/lambda": config.coef * weight,
        "diver/bonus/mean": float(bonus[correct].mean()) if correct.any() else 0.0,
        "diver/bonus/max": float(bonus.max()) if size else 0.0,
        "diver/intrinsic/mean": _mean(intrinsic_all),
        "diver/shaped_groups": float(gated_groups),
    }
    if config.metric in ("textual", "mix"):
        metrics["diver/textual/mean"] = _mean(textual)
    if config.metric in ("equation", "mix"):
        metrics["diver/equation/mean"] = _mean(equation)
    return DiverBonus(bonus=bonus, metrics=metrics)
