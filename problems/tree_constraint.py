"""The search constraint of parsing: beam search outputs only trees over the input's words."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from t2t_lite.decoding.constraints import BracketConstraint, InOrderBracketConstraint
from t2t_lite.ids import EOS_ID
from t2t_lite.problems import trees
from t2t_lite.problems.vocab import SPACE_MARK


class TreeConstraint:
    """Builds the search's `BracketConstraint` (`InOrderBracketConstraint` for in-order
    targets) for a batch of encoded sentences.

    The vocabulary's bracket pieces (`▁(NP`, `▁)NP`) open and close constituents. With
    lexicalized targets (`leaves="word"`) the leaves are the input's own pieces, copied in
    order, and brackets stand only before a piece that starts a word (`▁...`); with
    placeholder targets every word is one `XX`. Either way each decoded output is a tree
    whose leaves are exactly the input's words.

    Args:
        pieces: the SentencePiece piece of every id of the target vocabulary.
        leaves: the problem's `leaves` ("word", "placeholder" or "tag").
        max_open_run: the most opening brackets in a row (between two leaves in order
            "in_order"), or None.
        order: the targets' order, "top_down" or "in_order" (`trees.linearize`).
    """

    def __init__(
        self,
        pieces: Sequence[str],
        leaves: str,
        max_open_run: int | None = None,
        order: str = "top_down",
    ):
        if order not in trees.ORDERS:
            raise ValueError(f"order must be one of {trees.ORDERS}, got {order!r}")
        self.order = order
        if leaves == "tag":
            raise ValueError("a tree constraint needs targets with words or XX as leaves")
        labels, open_labels, close_labels = {}, [], []
        for piece in pieces:
            symbol = piece[1:]
            bracket = is_bracket_piece(piece)
            label = labels.setdefault(symbol[1:], len(labels)) if bracket else -1
            open_labels.append(label if bracket and symbol[0] == "(" else -1)
            close_labels.append(label if bracket and symbol[0] == ")" else -1)
        if not any(label >= 0 for label in open_labels):
            raise ValueError("the target vocabulary has no bracket pieces; rerun datagen")
        self.open_labels, self.close_labels = open_labels, close_labels
        self.word_start = [piece.startswith(SPACE_MARK) for piece in pieces]
        self.leaves = leaves
        self.max_open_run = max_open_run
        self.placeholder_id = None
        if leaves == "placeholder":
            self.placeholder_id = pieces.index(SPACE_MARK + trees.POS_PLACEHOLDER)

    def __call__(self, inputs, max_lengths):
        """`BracketConstraint` for ids [B, S] (EOS-terminated, 0-padded) and row limits [B]."""
        inputs = tf.cast(inputs, tf.int32)
        pieces = tf.where(inputs > EOS_ID, inputs, 0)  # the words' pieces, EOS dropped
        starts = tf.logical_and(tf.gather(tf.constant(self.word_start), pieces), pieces > 0)
        if self.leaves == "word":
            leaves, boundary = pieces, starts
            count = tf.reduce_sum(tf.cast(pieces > 0, tf.int32), axis=1)
        else:
            leaves = tf.fill(tf.shape(inputs), self.placeholder_id)
            boundary = tf.ones_like(starts)
            count = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
        kind = InOrderBracketConstraint if self.order == "in_order" else BracketConstraint
        return kind(
            leaves, count, boundary, max_lengths, self.open_labels, self.close_labels, EOS_ID,
            max_open_run=self.max_open_run,
        )  # fmt: skip


def is_bracket_piece(piece: str) -> bool:
    """True for a bracket symbol of `vocab_symbols`: `▁(NP`, `▁)NP`."""
    return piece.startswith(SPACE_MARK) and piece[1:2] in ("(", ")") and len(piece) > 2
