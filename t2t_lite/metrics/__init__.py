"""Evaluation metrics: corpus BLEU (sacreBLEU and the paper's tokenized BLEU)."""

from t2t_lite.metrics.bleu import (
    SACREBLEU_LABEL,
    TOKENIZED_LABEL,
    BleuResult,
    bleu_report,
    moses_tokenize,
    multi_bleu,
    sacrebleu_corpus,
    split_compounds,
    tokenized_bleu,
    write_bleu_json,
)

__all__ = [
    "SACREBLEU_LABEL",
    "TOKENIZED_LABEL",
    "BleuResult",
    "bleu_report",
    "moses_tokenize",
    "multi_bleu",
    "sacrebleu_corpus",
    "split_compounds",
    "tokenized_bleu",
    "write_bleu_json",
]
