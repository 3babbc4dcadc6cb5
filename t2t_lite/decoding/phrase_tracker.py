"""Which required phrases a hypothesis has placed, and how many tokens it still needs.

Lexically constrained search (`t2t_lite.decoding.lexical`) asks of every hypothesis: which
of its row's phrases appear in it already, and how far into each phrase its last tokens
go. `PhraseTracker` keeps that as a state of [N, ...] tensors that the search gathers
by parent hypothesis, like its caches:

    progress  [N, P] int32  tokens of phrase p matched by the hypothesis's last tokens
    met       [N, P] bool   phrase p occurs in the hypothesis (padding phrases start met)
    rows      [N] int32     the hypothesis's batch row

A phrase is matched token by token: the next token of the phrase advances it, a token
equal to the phrase's first token restarts it at 1, any other token resets it to 0. Each
phrase is tracked on its own, so two phrases may share tokens ("a b" and "b c" are both
met by "a b c"). A phrase that repeats its own beginning ("a a b" after "a a a b") can be
missed by this matching; then the search places it again. Once met, a phrase stays met,
so `met` never claims an occurrence that is not there.

`needed` is the number of tokens a hypothesis still has to generate to meet every phrase,
finishing the most advanced unmet phrase first and then the others one after another:
sum of unmet lengths - the largest progress among unmet phrases. Its bank (Post & Vilar,
2018) is total - needed, where total is the row's phrase tokens; generating the next token
of its most advanced phrase always lowers `needed` by one.

A row whose phrases cannot all fit in its maximum length (prefix + phrases + EOS > limit)
is searched without them (its phrases count as met) and reported by `feasible`.
"""

from __future__ import annotations

import tensorflow as tf


class PhraseTracker:
    """The phrases of each row, and the state of each hypothesis towards them.

    Args:
        phrases: [B, P, W] int ids of each row's phrases, padded with 0.
        phrase_lengths: [B, P] int, each phrase's tokens; 0 for padding phrases.
        max_lengths: [B] int, each row's maximum number of tokens, EOS included.
        vocab_size: V.
        prefix_lengths: optional [B] int, tokens forced at the start of each row, which
            take room from the phrases.
    """

    def __init__(self, phrases, phrase_lengths, max_lengths, vocab_size: int, prefix_lengths=None):
        phrases = tf.cast(phrases, tf.int32)
        # At least one phrase of one token, so that every gather below is in range.
        shape = tf.shape(phrases)
        pad_p, pad_w = tf.maximum(1 - shape[1], 0), tf.maximum(1 - shape[2], 0)
        self.phrases = tf.pad(phrases, [[0, 0], [0, pad_p], [0, pad_w]])  # [B, P, W]
        lengths = tf.pad(tf.cast(phrase_lengths, tf.int32), [[0, 0], [0, pad_p]])  # [B, P]
        reserved = tf.reduce_sum(lengths, axis=1) + 1  # [B], phrases + EOS
        if prefix_lengths is not None:
            reserved += tf.cast(prefix_lengths, tf.int32)
        self.feasible = reserved <= tf.cast(max_lengths, tf.int32)  # [B]
        self.lengths = tf.where(self.feasible[:, tf.newaxis], lengths, 0)  # [B, P]
        self.total = tf.reduce_sum(self.lengths, axis=1)  # [B]
        self.vocab_size = vocab_size

    def initial_state(self) -> dict:
        """[B, ...] state before the first token: nothing matched, padding phrases met."""
        batch = tf.shape(self.lengths)[0]
        return {
            "progress": tf.zeros_like(self.lengths),
            "met": tf.equal(self.lengths, 0),
            "rows": tf.range(batch),
        }

    def _row_phrases(self, state: dict) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """phrases [N, P, W], lengths [N, P] and the next token of each phrase [N, P]."""
        rows = state["rows"]
        phrases = tf.gather(self.phrases, rows)  # [N, P, W]
        lengths = tf.gather(self.lengths, rows)  # [N, P]
        column = tf.minimum(state["progress"], tf.shape(phrases)[2] - 1)  # [N, P]
        next_token = tf.gather(phrases, column[:, :, tf.newaxis], batch_dims=2)[:, :, 0]
        return phrases, lengths, next_token

    def needed(self, state: dict) -> tf.Tensor:
        """[N] int32: tokens the hypothesis must still generate to meet every phrase."""
        lengths = tf.gather(self.lengths, state["rows"])  # [N, P]
        return _needed(lengths, state["progress"], state["met"])

    def needed_after(self, state: dict) -> tf.Tensor:
        """[N, V] int32: `needed` after the hypothesis takes each token of the vocabulary."""
        phrases, lengths, next_token = self._row_phrases(state)
        tokens = tf.range(self.vocab_size)[tf.newaxis, tf.newaxis, :]  # [1, 1, V]
        advances = tf.equal(tokens, next_token[:, :, tf.newaxis])  # [N, P, V]
        restarts = tf.equal(tokens, phrases[:, :, :1])  # [N, P, V]
        progress = tf.where(
            advances, state["progress"][:, :, tf.newaxis] + 1, tf.cast(restarts, tf.int32)
        )  # [N, P, V]
        met = tf.logical_or(state["met"][:, :, tf.newaxis], progress >= lengths[:, :, None])
        return _needed(lengths[:, :, tf.newaxis], progress, met, axis=1)  # [N, V]

    def bank(self, needed: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
        """Constraint tokens met (total - needed), the shape of `needed`; rows [N] or [B]."""
        total = tf.gather(self.total, rows)
        return tf.reshape(total, [-1] + [1] * (needed.shape.rank - 1)) - needed

    def update(self, state: dict, tokens: tf.Tensor) -> dict:
        """The state after each hypothesis took `tokens` [N]."""
        phrases, lengths, next_token = self._row_phrases(state)
        tokens = tf.cast(tokens, tf.int32)[:, tf.newaxis]  # [N, 1]
        progress = tf.where(
            tf.equal(tokens, next_token),
            state["progress"] + 1,
            tf.cast(tf.equal(tokens, phrases[:, :, 0]), tf.int32),
        )  # [N, P]
        met = tf.logical_or(state["met"], progress >= lengths)
        return {**state, "progress": tf.where(met, 0, progress), "met": met}


def _needed(lengths, progress, met, axis: int = -1) -> tf.Tensor:
    """Unmet phrase tokens less the largest unmet progress, summed over the phrase axis."""
    unmet = tf.logical_not(met)
    remaining = tf.reduce_sum(tf.where(unmet, lengths, 0), axis=axis)
    return remaining - tf.reduce_max(tf.where(unmet, progress, 0), axis=axis)


__all__ = ["PhraseTracker"]
