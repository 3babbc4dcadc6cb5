"""A step constraint that forces each row's first tokens: decoding that completes a prefix.

`PrefixConstraint(prefix, prefix_lengths, vocab_size)` allows, at step i < prefix_lengths[b],
only the token prefix[b, i] to hypotheses of row b, and every token afterwards. Given to
`beam_search` (or to `lexically_constrained_beam_search`, which combines it with its own
constraints), the search spends the first steps on the prefix, with the model's
log-probabilities of its tokens counted in the scores as for any token, and then searches
freely: the continuation is the one the search finds with the prefix fed to the decoder.
"""

from __future__ import annotations

import tensorflow as tf


class PrefixConstraint:
    """Forces row b's first `prefix_lengths[b]` tokens to `prefix[b, :prefix_lengths[b]]`.

    Args:
        prefix: [B, T] int ids, padded (the padding is not read); T may be 0.
        prefix_lengths: [B] int, the number of forced tokens of each row (0 = none).
        vocab_size: V.
    """

    def __init__(self, prefix, prefix_lengths, vocab_size: int):
        prefix = tf.cast(prefix, tf.int32)
        # One column at least, so that reading column min(i, T - 1) is always in range.
        self.prefix = tf.pad(prefix, [[0, 0], [0, 1]])  # [B, T + 1]
        self.prefix_lengths = tf.cast(prefix_lengths, tf.int32)
        self.vocab_size = vocab_size

    def initial_state(self) -> dict:
        """Each hypothesis's batch row, [B]; the search tiles it over beams."""
        return {"rows": tf.range(tf.shape(self.prefix_lengths)[0])}

    def allowed(self, state: dict, i: tf.Tensor) -> tf.Tensor:
        """[N, V] bool: the prefix's token i while row's prefix lasts, every token after it."""
        rows = state["rows"]  # [N]
        column = tf.minimum(i, tf.shape(self.prefix)[1] - 1)
        forced = tf.gather(self.prefix[:, column], rows)  # [N]
        forcing = i < tf.gather(self.prefix_lengths, rows)  # [N]
        tokens = tf.range(self.vocab_size)[tf.newaxis, :]  # [1, V]
        return tf.logical_or(
            tf.logical_not(forcing)[:, tf.newaxis], tf.equal(tokens, forced[:, tf.newaxis])
        )

    def update(self, state: dict, tokens: tf.Tensor) -> dict:
        del tokens  # the step number alone says where a row is in its prefix
        return state


__all__ = ["PrefixConstraint"]
