"""In-graph twins of the problems' text encoders, for SavedModels that take and give text.

Each codec is a `tf.Module` with

    tokenize(texts string [B]) -> int64 RaggedTensor [B, (S)], EOS appended
    detokenize(ids int [B, L]) -> string [B], stopping at the first EOS, padding skipped

that gives exactly the ids and text of the Python encoder it mirrors.
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.ids import EOS_ID
from t2t_lite.problems.algorithmic import SymbolEncoder
from t2t_lite.problems.vocab import SentencePieceEncoder

_FIRST_SYMBOL_ID = 2


class SymbolCodec(tf.Module):
    """`SymbolEncoder` in the graph: "3 1 4" <-> ids [5, 3, 6] (+ EOS), core TF ops only.

    Args:
        num_symbols: symbols are the integers 0 .. num_symbols - 1.
    """

    def __init__(self, num_symbols: int):
        super().__init__(name="symbols")
        self.num_symbols = num_symbols

    def tokenize(self, texts) -> tf.RaggedTensor:
        """Ids of space-separated integers; an InvalidArgumentError names a bad token."""
        tokens = tf.strings.split(tf.convert_to_tensor(texts, tf.string))  # [B, (S)]
        flat = tokens.flat_values  # [N]
        numbers = tf.strings.regex_full_match(flat, "[0-9]{1,9}")  # [N]
        # Each assertion's only data is its whole message, so that its error is one
        # sentence without a tensor dump.
        found = tf.strings.reduce_join(tf.boolean_mask(flat, ~numbers)[:1])
        digits = tf.debugging.Assert(
            tf.reduce_all(numbers),
            [
                tf.strings.join(
                    [
                        f"sentences must be integers 0..{self.num_symbols - 1} separated by "
                        "spaces; found token ",
                        found,
                    ]
                )
            ],
        )
        with tf.control_dependencies([digits]):
            symbols = tf.strings.to_number(flat, tf.int64)  # [N]
        in_range = tf.debugging.Assert(
            tf.reduce_all(symbols < self.num_symbols),
            [f"symbols must be below {self.num_symbols}"],
        )
        with tf.control_dependencies([in_range]):
            ids = tokens.with_flat_values(symbols + _FIRST_SYMBOL_ID)  # [B, (S)]
        eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, tf.int64))
        return tf.concat([ids, eos], axis=1)  # [B, (S + 1)]

    def detokenize(self, ids) -> tf.Tensor:
        """Space-separated symbols of each row up to its first EOS."""
        ids = tf.cast(ids, tf.int64)  # [B, L]
        before_eos = tf.math.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1) == 0
        kept = tf.ragged.boolean_mask(ids, before_eos & (ids >= _FIRST_SYMBOL_ID))  # [B, (T)]
        words = tf.strings.as_string(kept - _FIRST_SYMBOL_ID)
        return tf.strings.reduce_join(words, axis=1, separator=" ")  # [B]


def codec_for(encoder, problem_name: str) -> tf.Module:
    """The in-graph codec matching a problem's Python `TextEncoder`.

    Raises:
        ValueError: for an encoder without an in-graph version.
    """
    if isinstance(encoder, SentencePieceEncoder):
        return encoder.tokenizer()
    if isinstance(encoder, SymbolEncoder):
        return SymbolCodec(encoder.num_symbols)
    raise ValueError(
        f"problem {problem_name} uses a {type(encoder).__name__}, which has no in-graph "
        "version; give it a SentencePiece vocabulary (problems/vocab.py) to export text "
        "signatures"
    )
