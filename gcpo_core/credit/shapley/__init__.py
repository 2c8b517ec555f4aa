"""Shapley credit of each rollout in the team game ``V(S) = log det(I + L_S)``, one module per concern.

* :mod:`~gcpo_core.credit.shapley.dispatch`: :func:`shapley_values`, the entry point: null players, classes of
  identical players, the method of each group (``auto``, ``exact``, ``mc``, ``loo``), batching.
* :mod:`~gcpo_core.credit.shapley.exact`: every coalition (copies collapsed into a multiplicity) by one
  Schur-complement sweep, then one matrix product with combinatorial weights.
* :mod:`~gcpo_core.credit.shapley.monte_carlo`: permutation sampling in independent units with a Student-t
  standard error, and :mod:`~gcpo_core.credit.shapley.position_control`, its control variate.
* :mod:`~gcpo_core.credit.shapley.leave_one_out`: ``V(all) - V(all \\ i)``, an ablation.
* :mod:`~gcpo_core.credit.shapley.memory`: the work-space budget of one batched step.

The class bookkeeping the estimators share (who is identical to whom) is :mod:`gcpo_core.credit.classes`.
"""
