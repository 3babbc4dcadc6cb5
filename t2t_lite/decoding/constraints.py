"""Step constraints for search: a per-step mask over the vocabulary, with a state of its own.

A search given a `StepConstraint` asks it, before every step, which tokens each hypothesis
may take next (`allowed`), gives every other token zero probability, and after the step
advances the constraint's state of each surviving hypothesis by the token it took
(`update`). The state is a nest of tensors whose leading dimension is the hypothesis; the
search tiles it over beams and reorders it with the hypotheses, as it does its caches.
The search knows nothing else about a constraint.

Only what differs between hypotheses belongs in the state, since the search gathers all of it
every step. What is fixed per batch row (a row's leaves, its length limit) stays in the
constraint, [B, ...], and is read by row: with B rows and N = B * beam_size hypotheses,
hypothesis n belongs to row n // beam_size for the whole search (`hypothesis_rows`), because
the search tiles row b's state to hypotheses b * beam_size ... b * beam_size + beam_size - 1
and only ever reorders hypotheses within a row.

`BracketConstraint` is the one this package ships: it admits exactly the token sequences
that are a well-formed bracketing over a given sequence of leaf tokens, for linearized
constituency trees (`(NP the dog )NP`). See its docstring for the rules.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from t2t_lite.ids import EOS_ID


class StepConstraint(Protocol):
    """What a search needs of a constraint (N = hypotheses, V = vocabulary size)."""

    def initial_state(self) -> Any:
        """The state of each batch row before the first step: a nest of [B, ...] tensors."""

    def allowed(self, state: Any, i: tf.Tensor) -> tf.Tensor:
        """[N, V] bool: the tokens each hypothesis may take as its token number i + 1.

        Args:
            state: the nest of [N, ...] tensors of the hypotheses; N is a multiple of B, and
                hypothesis n belongs to batch row n // (N // B).
            i: the tokens each hypothesis has generated so far (a scalar int32).
        """

    def update(self, state: Any, tokens: tf.Tensor) -> Any:
        """The state after each hypothesis took `tokens` [N] (an allowed token)."""

    # Optional: `max_final_lengths(state, i) -> [N] int32`, the most tokens (EOS included)
    # any admitted completion of each hypothesis, after its i tokens, can have. Beam search
    # then bounds an alive hypothesis's score at that length, not the row's limit, and
    # stops as soon as that bound shows its best is final (the same best, sooner).


def hypothesis_rows(num_hypotheses: tf.Tensor | int, batch: tf.Tensor | int) -> tf.Tensor:
    """[N] int32: the batch row of each of N hypotheses over B rows, n // (N // B)."""
    beam_size = num_hypotheses // tf.maximum(batch, 1)  # no division by zero on an empty batch
    return tf.range(num_hypotheses) // beam_size


class _Bracketing:
    """The tables and row constants shared by the bracket constraints (see their Args)."""

    def __init__(
        self,
        leaves,
        num_leaves,
        boundary,
        max_lengths,
        open_labels,
        close_labels,
        eos_id: int = EOS_ID,
        max_depth: int = 64,
        max_open_run: int | None = None,
    ):
        open_labels = np.asarray(open_labels, np.int32)
        close_labels = np.asarray(close_labels, np.int32)
        if open_labels.shape != close_labels.shape or open_labels.ndim != 1:
            raise ValueError(
                f"open_labels {open_labels.shape} and close_labels {close_labels.shape} must "
                "both be [vocab_size]"
            )
        if np.any((open_labels >= 0) & (close_labels >= 0)):
            raise ValueError("a token cannot both open and close a constituent")
        if open_labels[eos_id] >= 0 or close_labels[eos_id] >= 0:
            raise ValueError(f"EOS (id {eos_id}) cannot be a bracket")
        self.leaves = tf.cast(leaves, tf.int32)
        self.num_leaves = tf.cast(num_leaves, tf.int32)
        self.boundary = tf.cast(boundary, tf.bool)
        self.max_lengths = tf.cast(max_lengths, tf.int32)
        self.vocab_size = int(open_labels.shape[0])
        self.open_labels = tf.constant(open_labels)
        self.close_labels = tf.constant(close_labels)
        self.is_open = tf.constant(open_labels >= 0)  # [V]
        self.is_bracket = tf.constant((open_labels >= 0) | (close_labels >= 0))  # [V]
        self.eos_id = eos_id
        self.max_depth = max_depth
        self.max_open_run = max_open_run or max_depth

    def _next_leaf(self, placed):
        """(rows [N], num_leaves [N], next leaf [N], all placed [N], at a boundary [N])."""
        rows = hypothesis_rows(tf.shape(placed)[0], tf.shape(self.num_leaves)[0])  # [N]
        num_leaves = tf.gather(self.num_leaves, rows)  # [N]
        width = tf.shape(self.leaves)[1]
        at = tf.stack([rows, tf.minimum(placed, tf.maximum(width - 1, 0))], axis=1)  # [N, 2]
        all_placed = placed >= num_leaves  # [N]
        at_boundary = tf.logical_or(all_placed, tf.gather_nd(self.boundary, at))
        return rows, num_leaves, tf.gather_nd(self.leaves, at), all_placed, at_boundary

    def _mask(self, may_open, close_label, single):
        """[N, V]: the opening tokens where `may_open`, the closing token of `close_label`
        (-2: none) and the one token `single` (-1: none)."""
        return tf.logical_or(
            tf.logical_or(
                tf.logical_and(may_open[:, tf.newaxis], self.is_open[tf.newaxis, :]),
                tf.equal(self.close_labels[tf.newaxis, :], close_label[:, tf.newaxis]),
            ),
            tf.one_hot(single, self.vocab_size, on_value=True, off_value=False, dtype=tf.bool),
        )

    def _moves(self, state: dict, tokens: tf.Tensor) -> tuple:
        """(opened [N], closed [N], placed a leaf [N], labels after the token [N, max_depth])."""
        tokens = tf.cast(tokens, tf.int32)
        opened = tf.gather(self.is_open, tokens)  # [N]
        closed = tf.gather(self.close_labels, tokens) >= 0
        leaf = tf.logical_not(
            tf.logical_or(tf.gather(self.is_bracket, tokens), tokens == self.eos_id)
        )
        at_depth = tf.equal(tf.range(self.max_depth)[tf.newaxis, :], state["depth"][:, tf.newaxis])
        labels = tf.where(
            tf.logical_and(opened[:, tf.newaxis], at_depth),
            tf.gather(self.open_labels, tokens)[:, tf.newaxis],
            state["labels"],
        )
        return opened, closed, leaf, labels

    def _leaves_left(self, state: dict) -> tf.Tensor:
        """[N]: the leaves each hypothesis has still to place."""
        rows = hypothesis_rows(tf.shape(state["placed"])[0], tf.shape(self.num_leaves)[0])
        return tf.gather(self.num_leaves, rows) - state["placed"]

    def _advanced(self, state: dict, tokens: tf.Tensor) -> tuple:
        """(opened [N], closed [N], leaf [N], the placed / depth / labels entries after them)."""
        opened, closed, leaf, labels = self._moves(state, tokens)
        depth = state["depth"] + tf.cast(opened, tf.int32) - tf.cast(closed, tf.int32)
        counts = {"placed": state["placed"] + tf.cast(leaf, tf.int32), "depth": depth}
        return opened, closed, leaf, {**counts, "labels": labels}

    def _top_label(self, state: dict) -> tf.Tensor:
        """[N]: the label of the innermost open constituent (any value where none is open)."""
        depth = tf.maximum(state["depth"] - 1, 0)[:, tf.newaxis]
        return tf.gather(state["labels"], depth, batch_dims=1)[:, 0]


class BracketConstraint(_Bracketing):
    """Admits exactly the bracketings over a row's leaf tokens that close in its length limit.

    The vocabulary has opening tokens (each with a label), closing tokens (each with a
    label), EOS, and leaf tokens (everything else). A row's output must be one tree:

    - the leaves, in order, are exactly the row's leaf sequence `leaves[b, :num_leaves[b]]`
      (a word's SentencePiece pieces, say, or one placeholder per word);
    - a bracket may stand only where `boundary` allows it (before a leaf that starts a
      word, or after the last leaf): the pieces of one word are never split;
    - the first token opens the root, and nothing but EOS follows the root's close;
    - a closing token must carry the label of the innermost open constituent, and may not
      directly follow an opening one (no empty constituent), so every constituent holds at
      least one leaf; a constituent is not opened once every leaf is placed;
    - at most `max_depth` constituents are open at once, and at most `max_open_run`
      opening brackets come in a row (None: any number);
    - EOS only when the tree is complete: every leaf placed and every constituent closed;
    - an opening bracket only while the tree can still be completed within the row's
      `max_lengths` tokens (EOS included): every continuation admitted can still close
      into such a tree, so the search never runs into a dead end.

    A row with no leaves may only take EOS.

    Args:
        leaves: [B, W] int32, each row's leaf tokens, padded (the padding is not read).
        num_leaves: [B] int32, the number of leaves of each row.
        boundary: [B, W] bool, True where a bracket may come before leaf w.
        max_lengths: [B] int32, each row's maximum number of tokens, EOS included.
        open_labels: [V] ints, the label number (>= 0) of each opening token, -1 elsewhere.
        close_labels: [V] ints, the label number of each closing token, -1 elsewhere.
        eos_id: the end-of-sequence token.
        max_depth: the most constituents open at once.
        max_open_run: the most opening brackets in a row, or None.
    """

    def initial_state(self) -> dict:
        """The state of a hypothesis: only what its tokens change (the row's leaves, boundaries
        and limit stay in the constraint, read by row)."""
        batch = tf.shape(self.num_leaves)[0]
        zeros = tf.zeros([batch], tf.int32)
        return {
            "placed": zeros,  # leaves placed so far
            "depth": zeros,  # constituents open
            "labels": tf.zeros([batch, self.max_depth], tf.int32),  # open labels, outermost first
            "open_run": zeros,  # opening brackets since the last other token
            "started": tf.zeros([batch], tf.bool),  # the root has been opened
        }

    def allowed(self, state: dict, i: tf.Tensor) -> tf.Tensor:
        placed, depth = state["placed"], state["depth"]
        rows, num_leaves, next_leaf, all_placed, at_boundary = self._next_leaf(placed)
        # Tokens that any completion still needs after this one: the leaves left, a close
        # for every open constituent, and EOS.
        used = i + 1
        needed = num_leaves - placed + depth + 1
        may_open = tf.reduce_all(
            [
                at_boundary,
                tf.logical_not(all_placed),
                depth < self.max_depth,
                state["open_run"] < self.max_open_run,
                tf.logical_or(depth > 0, tf.logical_not(state["started"])),
                used + needed + 1 <= tf.gather(self.max_lengths, rows),  # + its close
            ],
            axis=0,
        )
        may_close = tf.reduce_all(
            [
                depth > 0,
                at_boundary,
                state["open_run"] == 0,
                tf.logical_or(depth > 1, all_placed),  # the root closes last
            ],
            axis=0,
        )
        may_place = tf.logical_and(depth > 0, tf.logical_not(all_placed))
        may_end = tf.reduce_all(
            [all_placed, depth == 0, tf.logical_or(state["started"], num_leaves == 0)], axis=0
        )
        # Few passes over [N, V]: placing a leaf and ending exclude each other, so one
        # one-hot holds the single token either allows (-1: none); a label of -2 closes nothing.
        single = tf.where(may_place, next_leaf, tf.where(may_end, self.eos_id, -1))  # [N]
        close_label = tf.where(may_close, self._top_label(state), -2)  # [N]
        return self._mask(may_open, close_label, single)  # [N, V]

    def max_final_lengths(self, state: dict, i: tf.Tensor) -> tf.Tensor:
        """[N] int32: i plus the most tokens a completion can add (see `StepConstraint`).

        Each leaf left may come after at most `max_open_run` opening brackets (a bracket
        never follows an opening one before a leaf has come), every constituent open or
        still to open needs its close, and EOS ends the tree.
        """
        left = self._leaves_left(state)  # [N]
        return i + left * (1 + 2 * self.max_open_run) + state["depth"] + 1

    def update(self, state: dict, tokens: tf.Tensor) -> dict:
        opened, _, _, counts = self._advanced(state, tokens)
        return {
            **counts,
            "open_run": tf.where(opened, state["open_run"] + 1, 0),
            "started": tf.logical_or(state["started"], opened),
        }


class InOrderBracketConstraint(_Bracketing):
    """Admits exactly the in-order bracketings over a row's leaf tokens that end in its limit.

    In the in-order form (`t2t_lite.problems.trees`, `order="in_order"`) a constituent's
    opening token comes right after its first child, which it takes over: `a (NP b )NP` is
    `(NP a b)`, `a (NP )NP (S b )S` is `(S (NP a) b)`. A row's output must be one tree:

    - the leaves, in order, are exactly the row's leaf sequence, and a bracket may stand
      only where `boundary` allows it (the pieces of one word are never split);
    - the first token is the first leaf; an opening token only right after a finished piece
      (a whole word, or a closing token), which becomes its first child;
    - a closing token must carry the label of the innermost open constituent (right after
      its opening token it closes a constituent of one child);
    - a leaf, once the first word is placed, only inside an open constituent: one outside
      could never join the tree;
    - at most `max_depth` constituents are open at once, and at most `max_open_run`
      opening tokens come between two leaves (None: any number), which bounds unary chains;
    - EOS only when the tree is complete: every leaf placed, every constituent closed and
      at least one constituent made;
    - an opening or closing token only while the tree can still be completed within the
      row's `max_lengths` tokens (EOS included), so the search never runs into a dead end.

    A row with no leaves may only take EOS. Args as `BracketConstraint`'s.
    """

    def initial_state(self) -> dict:
        """The state of a hypothesis: only what its tokens change."""
        batch = tf.shape(self.num_leaves)[0]
        zeros = tf.zeros([batch], tf.int32)
        no = tf.zeros([batch], tf.bool)
        return {
            "placed": zeros,  # leaves placed so far
            "depth": zeros,  # constituents open
            "labels": tf.zeros([batch, self.max_depth], tf.int32),  # open labels, outermost first
            "open_run": zeros,  # opening tokens since the last leaf
            "after_piece": no,  # the last token was a leaf or a closing token
            "made": no,  # a constituent has been opened
        }

    def _rest(self, left, depth, made):
        """[N]: the fewest tokens (EOS included) that complete a tree from such a state."""
        # Outside every constituent with leaves left (or nothing made yet), a root is still
        # to open and close.
        root = tf.logical_and(depth == 0, tf.logical_or(left > 0, tf.logical_not(made)))
        return left + depth + 1 + 2 * tf.cast(root, tf.int32)

    def allowed(self, state: dict, i: tf.Tensor) -> tf.Tensor:
        placed, depth, made = state["placed"], state["depth"], state["made"]
        rows, num_leaves, next_leaf, all_placed, at_boundary = self._next_leaf(placed)
        left = num_leaves - placed
        limit = tf.gather(self.max_lengths, rows)
        used = i + 1
        piece_done = tf.logical_and(state["after_piece"], at_boundary)
        may_open = tf.reduce_all(
            [
                piece_done,
                depth < self.max_depth,
                state["open_run"] < self.max_open_run,
                used + self._rest(left, depth + 1, True) <= limit,
            ],
            axis=0,
        )
        # Closing the root before the last leaf leaves a piece that a new root must take.
        reopen = tf.logical_and(depth == 1, tf.logical_not(all_placed))
        may_close = tf.reduce_all(
            [
                depth > 0,
                at_boundary,
                tf.logical_or(tf.logical_not(reopen), state["open_run"] < self.max_open_run),
                used + self._rest(left, depth - 1, made) <= limit,
            ],
            axis=0,
        )
        inside_word = tf.logical_not(at_boundary)
        may_place = tf.logical_and(
            tf.logical_not(all_placed),
            tf.reduce_any([inside_word, depth > 0, placed == 0], axis=0),
        )
        may_end = tf.logical_or(
            tf.reduce_all([all_placed, depth == 0, made, state["after_piece"]], axis=0),
            num_leaves == 0,
        )
        single = tf.where(may_place, next_leaf, tf.where(may_end, self.eos_id, -1))  # [N]
        close_label = tf.where(may_close, self._top_label(state), -2)  # [N]
        return self._mask(may_open, close_label, single)  # [N, V]

    def max_final_lengths(self, state: dict, i: tf.Tensor) -> tf.Tensor:
        """[N] int32: i plus the most tokens a completion can add (see `StepConstraint`).

        Before each leaf left and after the last come at most `max_open_run` opening tokens,
        each with its close; every constituent open needs its close, and EOS ends the tree.
        """
        left = self._leaves_left(state)  # [N]
        return i + left + 2 * self.max_open_run * (left + 1) + state["depth"] + 1

    def update(self, state: dict, tokens: tf.Tensor) -> dict:
        opened, closed, leaf, counts = self._advanced(state, tokens)
        return {
            **counts,
            "open_run": tf.where(leaf, 0, state["open_run"] + tf.cast(opened, tf.int32)),
            "after_piece": tf.logical_or(leaf, closed),
            "made": tf.logical_or(state["made"], opened),
        }


__all__ = ["BracketConstraint", "InOrderBracketConstraint", "StepConstraint", "hypothesis_rows"]
