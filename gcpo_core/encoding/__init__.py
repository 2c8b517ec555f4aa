"""Rollouts to embeddings: the frozen sentence encoder, the response span it reads, long texts cut into word
pieces, and the texts -> embeddings -> credit pipeline the credit actor runs. Depends on credit."""

from gcpo_core._lazy import lazy_exports

_EXPORTS = {
    "EncoderConfig": "encoder",
    "RolloutEncoder": "encoder",
    "Encoded": "encoder",
    "select_span": "text_span",
    "PieceTokenizer": "word_pieces",
    "cut_into_pieces": "word_pieces",
    "RolloutCredit": "pipeline",
    "credit_rollouts": "pipeline",
    "credit_encoded": "pipeline",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
