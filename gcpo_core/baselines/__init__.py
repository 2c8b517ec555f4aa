"""The related work's estimators that are not GCPO's credit: MC-GRPO, COPO, DIVER and Div-R1 (DQO and
DRA-GRPO are modes of the credit engine). Depends on credit."""

from gcpo_core._lazy import lazy_exports

_EXPORTS = {
    "median_centred_advantages": "mc_grpo",
    "copo_terms": "copo",
    "copo_advantages": "copo",
    "DiverConfig": "diver",
    "diver_bonus": "diver",
    "sampled_token_entropy": "div_r1",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
