"""Evaluation metrics: corpus BLEU (sacreBLEU and the paper's tokenized BLEU) and EVALB."""

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
    write_scores_json,
)
from t2t_lite.metrics.evalb import COLLINS, bracket_f1, evalb_score, format_report, load_params

__all__ = [
    "COLLINS",
    "bracket_f1",
    "evalb_score",
    "format_report",
    "load_params",
    "SACREBLEU_LABEL",
    "TOKENIZED_LABEL",
    "BleuResult",
    "bleu_report",
    "moses_tokenize",
    "multi_bleu",
    "sacrebleu_corpus",
    "split_compounds",
    "tokenized_bleu",
    "write_scores_json",
]
