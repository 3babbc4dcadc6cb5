"""Decoding text files and typed lines with a trained model: the decoder command's library.

It restores runs with `t2t_lite.runs` and searches with `t2t_lite.search`; what is written
and how it is scored belongs to the problem (`Problem.outputs`, `score`, `format_scores`).
"""

from t2t_lite.inference.decode import Decoder, DecodeResult, decode_file, interactive
from t2t_lite.inference.text_files import DecodeError, read_lines, write_lines

__all__ = [
    "DecodeError",
    "DecodeResult",
    "Decoder",
    "decode_file",
    "interactive",
    "read_lines",
    "write_lines",
]
