"""``shapley_values``: the credit of every rollout of a padded batch of groups, by the method each group needs.

Rollouts with ``q = 0`` have a zero row in L: their marginal contribution to every coalition is exactly 0, so
they are null players with ``phi = 0`` and the game is played by the ``c`` contributing rollouts only.
Identical rollouts (the same embedding and quality, bit for bit) get the same credit exactly, under every
method: the players of a group are put in a canonical order (by content, :mod:`gcpo_core.credit.classes`) and
the members of each class of identical players share one value.

Groups are bucketed by method and game size (the class profile, for ``exact``) and each bucket is solved in
batches bounded by the work budget (:mod:`gcpo_core.credit.shapley.memory`):

* ``exact``: one representative per class plays with its multiplicity (:mod:`gcpo_core.credit.shapley.exact`).
* ``mc``: the contributors play in their canonical order, one random stream per group
  (:mod:`gcpo_core.credit.shapley.monte_carlo`).
* ``loo``: leave-one-out, an ablation (:mod:`gcpo_core.credit.shapley.leave_one_out`).
* ``auto``: ``exact`` while a group's collapsed game has at most ``2^exact_max_contributors`` count vectors
  (i.e. ``exact_max_contributors`` distinct correct rollouts, or more with duplicates), else ``mc``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from gcpo_core.credit.classes import ClassStatistics, class_statistics, classes_of_game, dense_ranks, first_of_class
from gcpo_core.credit.shapley.exact import EXACT_LIMIT, coalition_count, exact_shapley, exact_work_bytes
from gcpo_core.credit.shapley.leave_one_out import leave_one_out_credit
from gcpo_core.credit.shapley.memory import work_budget
from gcpo_core.credit.shapley.monte_carlo import group_streams, monte_carlo_shapley

# what CreditConfig.method and the command line accept; auto picks exact or mc for each group. A fixed list, not a
# registry: each method is played differently below (exact: one player per class, bucketed by class profile;
# mc and loo: every contributor, mc with a random stream per group), so a new one needs its branch here anyway
SHAPLEY_METHODS = ("auto", "exact", "mc", "loo")


@dataclass
class ShapleyResult:
    """Per-rollout credit of a padded batch.

    Attributes:
        values: `(torch.Tensor)` float64 (B, G); exactly 0 for null players and padding, exactly equal for
            identical players.
        stderr: `(torch.Tensor)` float64 (B, G); Monte-Carlo standard error, scaled so that ``+- 1.96 stderr``
            is a 95 % interval; 0 where the value is exact (computed exactly, or exact by construction).
        methods: `(list[str])` length B, the method used for each group.
    """

    values: torch.Tensor
    stderr: torch.Tensor
    methods: list[str]


def _game_size(contributors: int, group_size: int, device: torch.device, largest: int) -> int:
    """Players in the sub-game of a group with ``contributors`` correct rollouts (or classes, for exact).

    On a CPU the work is what costs, so each group plays with its contributors only. On a GPU, kernel
    launches cost more than arithmetic, so groups are padded to a multiple of 4 players (the extra players
    are non-contributors: zero rows of L, null players whose marginals are exactly 0) and solved in a few
    large batches instead of one small batch per contributor count -- but never past ``largest`` players
    (an exact game's cost doubles with each player).
    """
    if device.type != "cuda":
        return contributors
    return max(contributors, min(group_size, -(-contributors // 4) * 4, largest))


def _chunk_size(method: str, profile: tuple[int, ...], device: torch.device) -> int:
    """Groups of one bucket (``method``, class ``profile``) solved in one batched call, within the work budget."""
    c = len(profile)
    if method == "exact":
        per_group = exact_work_bytes(profile)
    else:  # mc chunks its permutations itself: a group needs ~8 c x c matrices besides
        per_group = 8 * c * c * 8
    return max(1, int(work_budget(device) // max(per_group, 1)))


def shapley_values(
    weighted_kernel: torch.Tensor,
    contributing: torch.Tensor,
    method: str = "auto",
    exact_max_contributors: int = 16,
    permutations: int = 64,
    antithetic: bool = True,
    stratified: bool = True,
    seed: int = 0,
    classes: Optional[torch.Tensor] = None,
    group_keys: Optional[torch.Tensor] = None,
) -> ShapleyResult:
    """Credit every rollout of a padded batch of groups.

    Args:
        weighted_kernel: `(torch.Tensor)` L, shape (B, G, G); rows / columns of non-contributing slots are
            ignored (they are null players).
        contributing: `(torch.Tensor)` bool (B, G): valid rollouts with ``q > 0``.
        method: `(str)` ``auto`` | ``exact`` | ``mc`` | ``loo``.
        exact_max_contributors: `(int)` ``auto`` solves a group exactly when its collapsed game has at most
            ``2^exact_max_contributors`` coalitions (this many distinct correct rollouts, more with copies).
        permutations: `(int)` M for ``mc``.
        antithetic: `(bool)` reversed permutations for ``mc``.
        stratified: `(bool)` cyclic half-turns for ``mc``.
        seed: `(int)` seeds the permutations; the same group and seed give the same credit, wherever the group
            sits in whatever batch and in whatever order its rows come.
        classes: `(torch.Tensor | None)` int64 (B, G): identical rollouts (same embedding and quality bit for
            bit, see :func:`gcpo_core.credit.grouping.identical_members`) share a class id, ordered by content; None:
            rollouts whose rows of L are identical bit for bit.
        group_keys: `(torch.Tensor | None)` int64 (B,): a key of each group's content that does not depend on
            the order of its rows (see :func:`gcpo_core.credit.grouping.group_content_keys`); seeds the group's
            permutations together with ``seed`` and its size. None: the bits of its canonically ordered L.
    Returns:
        :class:`ShapleyResult` with values and stderr of shape (B, G).

    Example:
        Two copies of one solution, a different (orthogonal) one and a wrong rollout (q = 0). The copies share
        ``log 2 + log 1.5`` (the first copy is worth log 2, the second only log 1.5), the distinct one is
        worth log 2 whoever comes first, the wrong one nothing; the credit sums to ``log det(I + L) = log 6``.

        >>> import torch
        >>> e = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=torch.float64)
        >>> q = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
        >>> L = (q[:, None] * (e @ e.T) * q[None, :])[None]  # one group: (B, G, G) = (1, 4, 4)
        >>> result = shapley_values(L, (q > 0)[None], method="exact")
        >>> [round(v, 4) for v in result.values[0].tolist()]
        [0.5493, 0.5493, 0.6931, 0.0]
        >>> round(float(result.values.sum()), 4), result.methods
        (1.7918, ['exact'])
    """
    if method not in SHAPLEY_METHODS:
        raise ValueError(f"unknown shapley method {method!r}; allowed: {', '.join(SHAPLEY_METHODS)}")
    L = weighted_kernel.to(torch.float64)
    num_groups, group_size = contributing.shape
    device = L.device
    contributing = contributing.to(torch.bool)
    values = torch.zeros(num_groups, group_size, dtype=torch.float64, device=device)
    stderr = torch.zeros_like(values)
    methods = ["none"] * num_groups
    if classes is None:
        classes = classes_of_game(L, contributing)
    # the game is played by the contributors, in a canonical order: by class (content), copies adjacent
    key = torch.where(contributing, classes, torch.full_like(classes, group_size + 1))
    order = torch.argsort(key, dim=1, stable=True)
    stats = class_statistics(classes, contributing)
    counts = contributing.sum(dim=1).cpu().numpy()  # the host sync: class sizes decide the shapes
    sorted_sizes = stats.sizes.sort(dim=1, descending=True).values.cpu().numpy()
    profiles = [tuple(int(m) for m in row[row > 0]) for row in sorted_sizes]  # largest class first
    # exact buckets share a profile: classes sorted by multiplicity (largest first), then content
    chosen_by_group = []
    for c, profile in zip(counts, profiles):
        if c == 0:
            chosen_by_group.append("none")
        elif method != "auto":
            chosen_by_group.append(method)
        else:
            small = coalition_count(profile) <= 2**exact_max_contributors
            chosen_by_group.append("exact" if small else "mc")
    for g, chosen in enumerate(chosen_by_group):
        if chosen == "exact" and coalition_count(profiles[g]) > 2**EXACT_LIMIT:
            raise ValueError(
                f"exact Shapley of {counts[g]} players in {len(profiles[g])} classes needs "
                f"{coalition_count(profiles[g])} coalitions; at most 2^{EXACT_LIMIT} (= {EXACT_LIMIT} distinct "
                "players) are solved exactly (use method auto or mc)"
            )

    buckets: dict[tuple, list[int]] = {}
    largest = max(exact_max_contributors, 4) if method == "auto" else EXACT_LIMIT
    for g, chosen in enumerate(chosen_by_group):
        if chosen == "none":
            continue
        if chosen == "exact":
            profile = profiles[g]
            padded = _game_size(len(profile), group_size, device, largest)
            profile = profile + (1,) * (padded - len(profile))
        else:
            profile = (1,) * _game_size(int(counts[g]), group_size, device, group_size)
        buckets.setdefault((chosen, profile), []).append(g)
        methods[g] = chosen

    for (chosen, profile), members in sorted(buckets.items()):
        size = len(profile)
        step = _chunk_size(chosen, profile, device)
        for start in range(0, len(members), step):
            groups = members[start : start + step]
            index = torch.tensor(groups, device=device)
            if chosen == "exact":
                _solve_exact(L, contributing, classes, stats, index, profile, values)
                continue
            players = order[index, :size]
            sub_game = L[index[:, None, None], players[:, :, None], players[:, None, :]]
            active = torch.gather(contributing[index], 1, players)
            sub_game = sub_game * (active.unsqueeze(-1) & active.unsqueeze(-2))  # padding players: null
            player_classes = torch.where(
                active,
                torch.gather(classes[index], 1, players),
                group_size + 2 + torch.arange(size, device=device).expand(len(groups), -1),
            )
            player_classes = dense_ranks(player_classes)
            if chosen == "mc":
                keys = None if group_keys is None else group_keys[index]
                phi, err = monte_carlo_shapley(
                    sub_game,
                    permutations=permutations,
                    antithetic=antithetic,
                    stratified=stratified,
                    generator=group_streams(sub_game, seed, keys),
                    classes=player_classes,
                )
            else:
                phi, err = leave_one_out_credit(sub_game, classes=player_classes)
            values[index[:, None], players] = phi * active
            stderr[index[:, None], players] = err * active
    # padded players are null players: exactly 0, not the 1e-16 a weighted sum leaves
    values = first_of_class(values * contributing, classes, contributing)
    stderr = first_of_class(stderr * contributing, classes, contributing)
    return ShapleyResult(values=values, stderr=stderr, methods=methods)


def _solve_exact(
    L: torch.Tensor,
    contributing: torch.Tensor,
    classes: torch.Tensor,
    stats: ClassStatistics,
    index: torch.Tensor,
    profile: tuple[int, ...],
    values: torch.Tensor,
) -> None:
    """Exact credit of the groups ``index`` (all with class profile ``profile``, largest class first, padded with
    null classes of one copy) written into ``values``: one representative per class plays with its multiplicity."""
    k = len(profile)
    sorted_sizes = stats.sizes[index].sort(dim=1, descending=True).values
    width = min(k, sorted_sizes.shape[1])
    real = torch.zeros(len(index), k, dtype=torch.bool, device=L.device)
    real[:, :width] = sorted_sizes[:, :width] > 0
    representatives = torch.zeros(len(index), k, dtype=torch.long, device=L.device)
    representatives[:, :width] = stats.representative[index, :width]
    sub_game = L[index[:, None, None], representatives[:, :, None], representatives[:, None, :]]
    sub_game = sub_game * (real.unsqueeze(-1) & real.unsqueeze(-2))  # padding classes: null players
    phi, _ = exact_shapley(sub_game, multiplicities=profile)
    member = contributing[index]
    rank_of_slot = torch.gather(
        stats.rank[index], 1, torch.where(member, classes[index], torch.zeros_like(classes[index]))
    )
    per_slot = torch.gather(phi, 1, rank_of_slot.clamp_max(k - 1)) * member
    values[index] = per_slot
