"""An exact accuracy-diversity frontier of credit shape against dose (issue 56), on a CPU in minutes.

The miniature's task (``experiments/miniature``) reduced to its answer distribution: per category a softmax
policy over a finite set of one-word answers, the warm start's skew, stand-in embeddings, the engine's own
advantages (:mod:`.arms`, through ``gcpo_core.credit``), Adam on the logits, sampled groups of G, and exact
expected accuracy and distinct correct answers from the policy's probabilities (:mod:`.simulate`).
:mod:`.frontier` turns runs into the frontier (one curve per credit shape), its figure and results JSON;
:mod:`.theory` computes what each credit is the gradient of, by exact enumeration of every group. The
write-up is ``docs/method.md`` ("What each credit optimises") and ``docs/frontier.md``.
"""
