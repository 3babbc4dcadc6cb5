"""Decoding text files and typed lines with a trained model: the decoder command's library.

It restores runs with `t2t_lite.runs` and searches with `t2t_lite.search`; what is written
and how it is scored belongs to the problem (`Problem.outputs`, `score`, `format_scores`).
`scoring` reads how probable the model finds given targets (forced decoding).
"""

from t2t_lite.inference.decode import Decoder, DecodeResult, decode_file, interactive
from t2t_lite.inference.scoring import Scorer, score_file
from t2t_lite.inference.text_files import DecodeError, read_lines, write_lines

__all__ = [
    "DecodeError",
    "DecodeResult",
    "Decoder",
    "Scorer",
    "decode_file",
    "interactive",
    "read_lines",
    "score_file",
    "write_lines",
]
