"""Lexically constrained beam search: outputs that contain given phrases, by dynamic beam allocation.

Each batch row has phrases (token sequences) that its output must contain. The search is
`beam_search`'s alive / finished scheme (t2t_lite/decoding/beam_search.py) with two changes,
after Post & Vilar (2018), "Fast Lexically Constrained Decoding with Dynamic Beam
Allocation", in the vectorized form of Hu et al. (2019):

* Banks. A candidate's bank is the number of phrase tokens it has met (`PhraseTracker`:
  total - needed). Instead of the best 2 * beam candidates by log-probability, each step
  takes the best 2 * beam candidates of every bank, then picks 2 * beam of those by
  rank within their bank, and at equal rank from the highest bank down: the best of
  the most advanced bank, the best of the next, ..., then the second best of each, and so
  on. Hypotheses at every level of progress survive, so a phrase can be placed where the
  model likes it rather than forced at once; a bank with few good candidates gives its
  places to the others. The EOS-ended candidates among them go to the finished set, the
  first `beam_size` others become the alive set, as in `beam_search`.
* Masks. EOS is allowed only to hypotheses that have met every phrase, so a finished
  hypothesis always contains them all. A token is allowed only if the phrases can still
  be completed within the row's maximum length after it (i + 1 + needed + 1 <= limit),
  or if it completes them; the next token of the most advanced phrase always keeps that
  true, so the highest bank never runs into a dead end and some hypothesis meets every
  phrase by the limit. Rows whose phrases do not fit at all are searched without them
  and reported by `met` = False.

Scores are those of `beam_search` (log P / GNMT length penalty). With no phrases (every
length 0) there is one bank and no mask, and the search is `beam_search` itself, step for
step. The first `prefix_lengths[b]` tokens of row b can also be forced (`PrefixConstraint`).
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.decoding.beam_search import (
    NEG_INF,
    _BeamState,
    _best_hypotheses,
    _candidates,
    _freeze_rows,
    _initial_state,
    _merge_finished,
    _row_limits,
    _rows_done,
    _Search,
    _select_alive,
    _validate,
)
from t2t_lite.decoding.phrase_tracker import PhraseTracker
from t2t_lite.decoding.prefix import PrefixConstraint
from t2t_lite.decoding.step_contract import check_step_mode, step_log_probs
from t2t_lite.ids import EOS_ID


class _Progress:
    """The search's constraint state: the phrase tracker's and, with a prefix, the prefix's."""

    def __init__(self, tracker: PhraseTracker, prefix: PrefixConstraint | None):
        self.tracker, self.prefix = tracker, prefix

    def initial_state(self) -> dict:
        state = {"phrases": self.tracker.initial_state()}
        if self.prefix is not None:
            state["prefix"] = self.prefix.initial_state()
        return state

    def update(self, state: dict, tokens: tf.Tensor) -> dict:
        return {**state, "phrases": self.tracker.update(state["phrases"], tokens)}


def lexically_constrained_beam_search(
    symbols_to_logits_fn,
    initial_ids: tf.Tensor,
    beam_size: int,
    decode_length,
    vocab_size: int,
    alpha,
    phrases,
    phrase_lengths,
    states=None,
    eos_id: int = EOS_ID,
    stop_early: bool = True,
    padded_ids: bool = False,
    max_lengths=None,
    prefix=None,
    prefix_lengths=None,
    pad_id: int | None = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Beam search whose outputs contain every phrase of their row (see the module docstring).

    The step function, `states`, `padded_ids`, `decode_length`, `max_lengths`, `alpha`,
    `eos_id`, `stop_early` and `pad_id` are those of `beam_search`.

    Args:
        phrases: [B, P, W] int ids of each row's phrases, 0-padded; P and W may be 0.
        phrase_lengths: [B, P] int tokens of each phrase, 0 for padding phrases.
        prefix: optional [B, T] ids forced as each row's first tokens.
        prefix_lengths: [B] int forced tokens of each row (with `prefix`).

    Returns:
        (ids [B, beam, decode_length + 1] int32, scores [B, beam] float32, met [B, beam]
        bool): ids and scores as `beam_search` returns them; met[b, k] is True when
        hypothesis k contains every phrase of row b, False for a row whose phrases do not
        fit in its maximum length (searched without them) and for empty slots.
    """
    _validate(beam_size, decode_length, vocab_size, alpha)
    use_states = states is not None
    check_step_mode(use_states, padded_ids, "lexically_constrained_beam_search")
    batch = tf.shape(initial_ids)[0]
    limits = _row_limits(max_lengths, decode_length, batch)
    tracker = PhraseTracker(phrases, phrase_lengths, limits, vocab_size, prefix_lengths)
    forced = None if prefix is None else PrefixConstraint(prefix, prefix_lengths, vocab_size)
    progress = _Progress(tracker, forced)
    state = _initial_state(initial_ids, beam_size, decode_length, states, progress)
    state = state._replace(done=_rows_done(state, limits, alpha, stop_early))
    search = _Search(
        symbols_to_logits_fn, beam_size, vocab_size, alpha, eos_id, use_states, padded_ids,
        progress, pad_id,
    )  # fmt: skip

    def step(state: _BeamState) -> tuple[_BeamState]:
        seq, log_probs, scores, finished, parent, new_states = _grow_by_banks(state, search, limits)
        alive = _select_alive(state, seq, log_probs, finished, parent, new_states, search)
        grown = _freeze_rows(state, _merge_finished(alive, seq, scores, finished, beam_size))
        # _freeze_rows keeps a frozen row's hypotheses; their progress must stay with them.
        grown = grown._replace(
            constraint_states=_keep_frozen(state.done, state.constraint_states, grown)
        )
        return (grown._replace(done=_rows_done(grown, limits, alpha, stop_early)),)

    def keep_going(state: _BeamState) -> tf.Tensor:
        return tf.logical_and(state.i < decode_length, tf.logical_not(tf.reduce_all(state.done)))

    (final,) = tf.while_loop(keep_going, step, (state,))
    ids, scores = _best_hypotheses(final, alpha)
    return ids, scores, _met(final, tracker, beam_size)


def _keep_frozen(done: tf.Tensor, before: dict, after: _BeamState) -> dict:
    """`after`'s constraint states, except in rows done before the step: [N, ...] each."""
    rows_done = tf.repeat(done, tf.shape(after.alive_seq)[1])  # [N]

    def keep(old: tf.Tensor, new: tf.Tensor) -> tf.Tensor:
        return tf.where(tf.reshape(rows_done, [-1] + [1] * (new.shape.rank - 1)), old, new)

    return tf.nest.map_structure(keep, before, after.constraint_states)


def _met(final: _BeamState, tracker: PhraseTracker, beam_size: int) -> tf.Tensor:
    """[B, beam] bool: the returned hypothesis meets every phrase of a feasible row."""
    phrase_state = final.constraint_states["phrases"]
    needed = tf.reshape(tracker.needed(phrase_state), [-1, beam_size])  # [B, beam]
    alive_met = tf.logical_and(tf.equal(needed, 0), final.alive_log_probs > NEG_INF)
    any_finished = tf.reduce_any(final.finished_flags, axis=1, keepdims=True)  # [B, 1]
    met = tf.where(any_finished, final.finished_flags, alive_met)
    return tf.logical_and(met, tracker.feasible[:, tf.newaxis])


def _allowed(state: _BeamState, search: _Search, limits: tf.Tensor) -> tuple:
    """(allowed [N, V] bool, bank [N, V] int32: the bank each token would put the hypothesis in)."""
    tracker, forced = search.constraint.tracker, search.constraint.prefix
    phrase_state = state.constraint_states["phrases"]
    needed_now = tracker.needed(phrase_state)[:, tf.newaxis]  # [N, 1]
    needed_next = tracker.needed_after(phrase_state)  # [N, V]
    limit = tf.gather(limits, phrase_state["rows"])[:, tf.newaxis]  # [N, 1]
    # Room after this token for what is still needed and an EOS; nothing is needed once
    # every phrase is met, so such a hypothesis may run to its limit as in beam_search.
    room = tf.logical_or(needed_next == 0, state.i + 1 + needed_next + 1 <= limit)
    is_eos = tf.equal(tf.range(search.vocab_size), search.eos_id)[tf.newaxis, :]  # [1, V]
    allowed = tf.where(is_eos, needed_now == 0, room)  # [N, V]
    if forced is not None:
        allowed = tf.logical_and(
            allowed, forced.allowed(state.constraint_states["prefix"], state.i)
        )
    bank = tracker.bank(tf.where(is_eos, needed_now, needed_next), phrase_state["rows"])
    return allowed, bank


def _grow_by_banks(state: _BeamState, search: _Search, limits: tf.Tensor) -> tuple:
    """Extends every alive hypothesis by one token; keeps 2 * beam candidates across banks.

    Returns what `beam_search`'s `_grow_candidates` returns: seq [B, 2k, L], log_probs
    [B, 2k], scores [B, 2k], finished [B, 2k], parent [B, 2k], the new states [N, ...];
    the candidates in bank-interleaved order (not by score).
    """
    beam_size, vocab_size = search.beam_size, search.vocab_size
    batch = tf.shape(state.alive_seq)[0]
    flat_seq = tf.reshape(state.alive_seq, [batch * beam_size, -1])  # [N, L]
    log_probs, new_states = step_log_probs(
        search.symbols_to_logits_fn, flat_seq, state.i, state.states, search.use_states,
        search.padded_ids, vocab_size, search.pad_id,
    )  # fmt: skip
    allowed, bank = _allowed(state, search, limits)
    log_probs = tf.where(allowed, log_probs, NEG_INF)
    log_probs = tf.reshape(log_probs, [batch, beam_size, vocab_size])  # [B, beam, V]
    log_probs += state.alive_log_probs[:, :, tf.newaxis]
    flat_log_probs = tf.reshape(log_probs, [batch, beam_size * vocab_size])  # [B, kV]
    bank = tf.reshape(bank, [batch, beam_size * vocab_size])  # [B, kV]
    num_banks = tf.reduce_max(search.constraint.tracker.total) + 1
    levels = tf.range(num_banks)[tf.newaxis, :, tf.newaxis]  # [1, C + 1, 1]
    by_bank = tf.where(
        tf.equal(bank[:, tf.newaxis, :], levels), flat_log_probs[:, tf.newaxis, :], float("-inf")
    )  # [B, C + 1, kV]
    bank_log_probs, bank_index = tf.math.top_k(by_bank, k=2 * beam_size)  # [B, C + 1, 2k]
    # Order: rank within the bank first, then the higher bank; non-viable entries last.
    rank = tf.range(2 * beam_size)[tf.newaxis, tf.newaxis, :]  # [1, 1, 2k]
    order = rank * num_banks + (num_banks - 1 - levels)  # [1, C + 1, 2k]
    order += tf.where(bank_log_probs > NEG_INF, 0, 2 * beam_size * num_banks)
    order = tf.reshape(tf.cast(order, tf.float32), [batch, -1])  # [B, (C + 1) * 2k]
    _, pick = tf.math.top_k(-order, k=2 * beam_size)  # [B, 2k]
    top_log_probs = tf.gather(tf.reshape(bank_log_probs, [batch, -1]), pick, batch_dims=1)
    # Banks with fewer than 2k candidates fill with -inf; keep every score finite.
    top_log_probs = tf.maximum(top_log_probs, tf.float32.min)  # [B, 2k]
    top_index = tf.gather(tf.reshape(bank_index, [batch, -1]), pick, batch_dims=1)  # [B, 2k]
    return _candidates(state, search, top_log_probs, top_index, vocab_size) + (new_states,)


__all__ = ["lexically_constrained_beam_search"]
