"""Beam search with tensor2tensor's alive / finished scheme and length penalty.

The search keeps two sets of `beam_size` hypotheses for every batch row:

* alive: hypotheses that have not produced EOS yet and may still grow;
* finished: the best hypotheses that ended with EOS, scored with the length penalty.

Each step extends every alive hypothesis by every vocabulary token and keeps the best
`2 * beam_size` candidates. At most one candidate per alive hypothesis ends with EOS, so at least
`beam_size` of them are still alive: the best `beam_size` of those become the new alive set, and
the EOS-ended ones compete with the finished set for its `beam_size` places. Without the doubling,
EOS-ended candidates could crowd the alive set out.

Scores follow Wu et al. (2016), "Google's Neural Machine Translation System", section 7:
score = log P(Y | X) / lp(Y) with lp(Y) = ((5 + |Y|) / 6) ** alpha, where |Y| counts the generated
tokens including EOS. Since log-probabilities only fall as a hypothesis grows and lp grows with
length (alpha >= 0), no alive hypothesis can score above its current log-probability divided by
lp(decode_length). The search stops as soon as the finished set beats that bound for every row.

Loop state (`_BeamState`), with N = B * beam_size and L = decode_length + 1:

    i                [] int32             tokens generated so far; column i of a sequence is its
                                          last token.
    alive_seq        [B, beam, L] int32   column 0 = initial id, columns > i are 0.
    alive_log_probs  [B, beam] float32    log P of each alive hypothesis (not normalised), best
                                          first; the padding beams of step 0 hold NEG_INF.
    finished_seq     [B, beam, L] int32   zeros after EOS and in empty slots.
    finished_scores  [B, beam] float32    length-normalised scores, best first; NEG_INF when empty.
    finished_flags   [B, beam] bool       True where the slot holds a hypothesis ended by EOS.
    states           nest of [N, ...]     the caller's states, tiled over beams and gathered
                                          along axis 0 by the parent beam of each alive hypothesis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf

EOS_ID = 1
# Score of empty slots and of the padding beams at step 0. Finite so that it survives arithmetic
# (no -inf - -inf) and JSON; real log-probabilities never come near it.
NEG_INF = -1.0e9

SymbolsToLogitsFn = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class _Search:
    """The fixed arguments of one search, shared by its steps."""

    symbols_to_logits_fn: SymbolsToLogitsFn
    beam_size: int
    vocab_size: int
    alpha: float
    eos_id: int
    use_states: bool
    padded_ids: bool


class _BeamState(NamedTuple):
    i: tf.Tensor  # [] int32
    alive_seq: tf.Tensor  # [B, beam, L] int32
    alive_log_probs: tf.Tensor  # [B, beam] float32
    finished_seq: tf.Tensor  # [B, beam, L] int32
    finished_scores: tf.Tensor  # [B, beam] float32
    finished_flags: tf.Tensor  # [B, beam] bool
    states: Any  # nest of [B * beam, ...]


def length_penalty(length: tf.Tensor | int, alpha: float) -> tf.Tensor:
    """GNMT length penalty ((5 + length) / 6) ** alpha, as a float32 scalar."""
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))


def write_column(seq: tf.Tensor, column: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """Returns `seq` [..., L] with `seq[..., column] = values` [...]; XLA-friendly (no scatter)."""
    at_column = tf.equal(tf.range(tf.shape(seq)[-1]), column)  # [L]
    return tf.where(at_column, values[..., tf.newaxis], seq)


def check_step_mode(use_states: bool, padded_ids: bool, caller: str) -> None:
    """Rejects step-function contracts that cannot work where `caller` is being traced.

    Under XLA (`tf.function(jit_compile=True)`), a prefix `ids[:, :i + 1]` has a dynamic shape
    that XLA pads to its bound without telling the model: `ids[:, -1]` then reads a padding
    column and the search silently decodes garbage. Such callers must use `padded_ids=True`.
    """
    if padded_ids and not use_states:
        raise ValueError(
            f"{caller}: padded_ids=True needs the stateful contract "
            "symbols_to_logits_fn(ids, i, states) -> (logits, states), because the padded ids "
            "alone do not tell the current position; pass states={} if there is no cache."
        )
    if not padded_ids and not tf.executing_eagerly() and _in_xla_context():
        raise ValueError(
            f"{caller}: running under XLA (jit_compile=True) with padded_ids=False; XLA pads "
            "the growing ids prefix to its maximum length, so ids[:, -1] would read padding. "
            "Pass padded_ids=True (and states, e.g. {}) and read the current token as ids[:, i]."
        )


def _in_xla_context() -> bool:
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # The private module moved; the check is a guard, not a requirement.
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def step_log_probs(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    seq: tf.Tensor,
    i: tf.Tensor,
    states: Any,
    use_states: bool,
    padded_ids: bool,
    vocab_size: int | None = None,
) -> tuple[tf.Tensor, Any]:
    """Calls the step function on hypotheses `seq` [N, L] and returns float32 log-probabilities.

    Returns:
        (log_probs [N, V] float32, new_states): `new_states` is `states` unchanged when the
        stateless contract `symbols_to_logits_fn(ids) -> logits` is used.
    """
    ids = seq if padded_ids else seq[:, : i + 1]  # [N, L] or [N, i + 1]
    if use_states:
        logits, new_states = symbols_to_logits_fn(ids, i, states)
        _check_same_states(states, new_states)
    else:
        logits, new_states = symbols_to_logits_fn(ids), states
    logits = tf.convert_to_tensor(logits)
    last_dim = logits.shape[-1]
    if logits.shape.rank != 2 or (vocab_size is not None and last_dim not in (None, vocab_size)):
        raise ValueError(
            f"symbols_to_logits_fn returned logits of shape {logits.shape}; expected "
            f"[batch * beam, vocab_size={vocab_size}]: check vocab_size and the model's output."
        )
    return tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1), new_states


def _check_same_states(states: Any, new_states: Any) -> None:
    try:
        tf.nest.assert_same_structure(states, new_states)
    except (ValueError, TypeError) as error:
        raise ValueError(
            "symbols_to_logits_fn returned states with a different structure from the states "
            f"it was given; return every state, updated or not ({error})"
        ) from error
    for index, (old, new) in enumerate(zip(tf.nest.flatten(states), tf.nest.flatten(new_states))):
        if not tf.TensorShape(old.shape).is_compatible_with(new.shape):
            raise ValueError(
                f"symbols_to_logits_fn changed the shape of state #{index} (tf.nest.flatten "
                f"order) from {old.shape} to {new.shape}; states must keep their shapes: use "
                "fixed-size caches and write step i's entry at index i."
            )


def beam_search(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: tf.Tensor,
    beam_size: int,
    decode_length: int | tf.Tensor,
    vocab_size: int,
    alpha: float,
    states: Any = None,
    eos_id: int = EOS_ID,
    stop_early: bool = True,
    padded_ids: bool = False,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Finds the `beam_size` best continuations of `initial_ids`, tensor2tensor's contract.

    Step contracts, with N = B * beam_size:
    * `states is None`: `symbols_to_logits_fn(ids) -> logits [N, V]`.
    * otherwise: `symbols_to_logits_fn(ids, i, states) -> (logits [N, V], new_states)`, where
      `states` is the caller's nest of [B, ...] tensors tiled to [N, ...] (row b * beam + k is
      beam k of batch row b) and gathered by parent beam after every step. States must keep
      their shapes: caches are fixed-size and the model writes step i's entry at index i.
    `ids` is [N, i + 1] (the hypotheses so far, the current token last), or with
    `padded_ids=True` the whole buffer [N, decode_length + 1] whose columns after i are 0; the
    current token is `ids[:, i]` in both cases. XLA needs `padded_ids=True` (checked).

    Args:
        symbols_to_logits_fn: the model's step function, as above. Logits may be any float
            dtype; log-softmax is computed in float32.
        initial_ids: [B] int ids every hypothesis starts from (0 in t2t_lite).
        beam_size: hypotheses kept per batch row (static int >= 1).
        decode_length: maximum number of tokens to generate, EOS included; a Python int under XLA.
        vocab_size: V, the last dimension of the logits (>= 2).
        alpha: length-penalty exponent (>= 0); 0 ranks by plain log-probability.
        states: optional nest of tensors with leading dimension B (encoder output, caches, ...).
        eos_id: the end-of-sequence id.
        stop_early: True stops once the best finished hypothesis can no longer be beaten
            (the first beam is exact); False stops once the worst of the `beam_size` finished
            ones can no longer be beaten (every beam is exact), or at decode_length.
        padded_ids: pass the fixed-size id buffer instead of the growing prefix (see above).

    Returns:
        (ids [B, beam, decode_length + 1] int32, scores [B, beam] float32), best first. Column 0
        is the initial id; ids after EOS and after the last generated token are 0, and the
        buffer is returned padded to decode_length + 1 columns so that its shape is static.
        Scores are log-probabilities divided by the length penalty. A row where no hypothesis
        reached EOS returns its alive hypotheses, scored the same way; in a row where fewer
        than `beam_size` did, the empty slots hold zeros and score NEG_INF. Hypotheses whose
        log-probability is at or below NEG_INF (zero-probability tokens) never count.
    """
    _validate(beam_size, decode_length, vocab_size, alpha)
    use_states = states is not None
    check_step_mode(use_states, padded_ids, "beam_search")
    state = _initial_state(initial_ids, beam_size, decode_length, states)
    search = _Search(
        symbols_to_logits_fn, beam_size, vocab_size, alpha, eos_id, use_states, padded_ids
    )

    def step(state: _BeamState) -> tuple[_BeamState]:
        seq, log_probs, scores, finished, parent, new_states = _grow_candidates(state, search)
        alive = _select_alive(state, seq, log_probs, finished, parent, new_states, beam_size)
        return (_merge_finished(alive, seq, scores, finished, beam_size),)

    def keep_going(state: _BeamState) -> tf.Tensor:
        return _keep_going(state, decode_length, alpha, stop_early)

    (final,) = tf.while_loop(keep_going, step, (state,))
    return _best_hypotheses(final, alpha)


def _initial_state(
    initial_ids: tf.Tensor, beam_size: int, decode_length: Any, states: Any
) -> _BeamState:
    """Beam 0 of each row holds the initial id; the other beams are padding."""
    initial_ids = tf.cast(initial_ids, tf.int32)
    batch = tf.shape(initial_ids)[0]
    initial_column = tf.tile(initial_ids[:, tf.newaxis, tf.newaxis], [1, beam_size, 1])
    alive_seq = tf.concat(  # [B, beam, L]
        [initial_column, tf.zeros([batch, beam_size, decode_length], tf.int32)], axis=2
    )
    # Only beam 0 is real at step 0; the others start at NEG_INF so they are not copies of it.
    first_log_probs = tf.constant([[0.0] + [NEG_INF] * (beam_size - 1)], tf.float32)
    return _BeamState(
        i=tf.constant(0, tf.int32),
        alive_seq=alive_seq,
        alive_log_probs=tf.tile(first_log_probs, [batch, 1]),  # [B, beam]
        finished_seq=tf.zeros_like(alive_seq),
        finished_scores=tf.fill([batch, beam_size], NEG_INF),
        finished_flags=tf.zeros([batch, beam_size], tf.bool),
        # Row b * beam + k of every state is beam k of batch row b.
        states=tf.nest.map_structure(lambda s: tf.repeat(s, beam_size, axis=0), states or {}),
    )


def _best_hypotheses(final: _BeamState, alpha: float) -> tuple[tf.Tensor, tf.Tensor]:
    """The finished set of each row, or its alive set for rows where nothing finished."""
    any_finished = tf.reduce_any(final.finished_flags, axis=1)  # [B]
    alive_viable = final.alive_log_probs > NEG_INF  # [B, beam]
    alive_seq = tf.where(alive_viable[:, :, tf.newaxis], final.alive_seq, 0)
    alive_scores = tf.where(
        alive_viable, final.alive_log_probs / length_penalty(final.i, alpha), NEG_INF
    )
    ids = tf.where(any_finished[:, tf.newaxis, tf.newaxis], final.finished_seq, alive_seq)
    scores = tf.where(any_finished[:, tf.newaxis], final.finished_scores, alive_scores)
    return ids, scores


def _validate(beam_size: int, decode_length: Any, vocab_size: int, alpha: Any) -> None:
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_search: beam_size must be an int >= 1, got {beam_size!r}.")
    if not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"beam_search: vocab_size must be an int >= 2, got {vocab_size!r}.")
    if isinstance(decode_length, int) and decode_length < 0:
        raise ValueError(f"beam_search: decode_length must be >= 0, got {decode_length}.")
    if isinstance(alpha, int | float) and alpha < 0:
        raise ValueError(
            f"beam_search: alpha must be >= 0, got {alpha}; a negative exponent breaks the bound "
            "that early stopping relies on."
        )


def _grow_candidates(state: _BeamState, search: _Search) -> tuple[tf.Tensor, ...]:
    """Extends every alive hypothesis by one token and keeps the best 2 * beam candidates.

    Returns:
        seq [B, 2k, L], log_probs [B, 2k], scores [B, 2k] (normalised), finished [B, 2k] bool,
        parent [B, 2k] (the alive beam each candidate extends) and the new states [N, ...],
        all candidates ordered best first.
    """
    beam_size, vocab_size = search.beam_size, search.vocab_size
    batch = tf.shape(state.alive_seq)[0]
    flat_seq = tf.reshape(state.alive_seq, [batch * beam_size, -1])  # [N, L]
    log_probs, new_states = step_log_probs(
        search.symbols_to_logits_fn,
        flat_seq,
        state.i,
        state.states,
        search.use_states,
        search.padded_ids,
        vocab_size,
    )
    log_probs = tf.reshape(log_probs, [batch, beam_size, vocab_size])  # [B, beam, V]
    log_probs += state.alive_log_probs[:, :, tf.newaxis]
    flat_log_probs = tf.reshape(log_probs, [batch, beam_size * vocab_size])  # [B, beam * V]
    # One penalty for every candidate of this step, so ranking by log-prob ranks by score.
    top_log_probs, top_index = tf.math.top_k(flat_log_probs, k=2 * beam_size)  # [B, 2k]
    # Extensions of the padding beams and zero-probability tokens sit at or below NEG_INF:
    # they rank last and never count as finished.
    viable = top_log_probs > NEG_INF
    top_scores = top_log_probs / length_penalty(state.i + 1, search.alpha)
    parent = top_index // vocab_size  # [B, 2k]
    token = top_index % vocab_size  # [B, 2k]
    top_seq = tf.gather(state.alive_seq, parent, batch_dims=1)  # [B, 2k, L]
    top_seq = write_column(top_seq, state.i + 1, token)
    finished = tf.logical_and(tf.equal(token, search.eos_id), viable)
    return top_seq, top_log_probs, top_scores, finished, parent, new_states


def _select_alive(
    state: _BeamState,
    seq: tf.Tensor,
    log_probs: tf.Tensor,
    finished: tf.Tensor,
    parent: tf.Tensor,
    new_states: Any,
    beam_size: int,
) -> _BeamState:
    """Keeps the first `beam_size` candidates (best first) that did not end with EOS."""
    # Exact selection by position rather than by a large negative score added to EOS-ended
    # candidates, which could tie with the NEG_INF padding beams.
    rank = tf.range(2 * beam_size, dtype=tf.float32)  # [2k]
    order_key = -(rank + tf.cast(finished, tf.float32) * (2 * beam_size))  # [B, 2k]
    _, keep = tf.math.top_k(order_key, k=beam_size)  # [B, k]
    batch = tf.shape(seq)[0]
    alive_parent = tf.gather(parent, keep, batch_dims=1)  # [B, k]
    flat_parent = tf.reshape(alive_parent + beam_size * tf.range(batch)[:, tf.newaxis], [-1])
    return state._replace(
        i=state.i + 1,
        alive_seq=tf.gather(seq, keep, batch_dims=1),
        alive_log_probs=tf.gather(log_probs, keep, batch_dims=1),
        states=tf.nest.map_structure(lambda s: tf.gather(s, flat_parent, axis=0), new_states),
    )


def _merge_finished(
    state: _BeamState, seq: tf.Tensor, scores: tf.Tensor, finished: tf.Tensor, beam_size: int
) -> _BeamState:
    """Keeps the best `beam_size` of the finished set and this step's EOS-ended candidates."""
    all_seq = tf.concat([state.finished_seq, seq], axis=1)  # [B, 3k, L]
    all_scores = tf.concat([state.finished_scores, scores], axis=1)  # [B, 3k]
    all_flags = tf.concat([state.finished_flags, finished], axis=1)  # [B, 3k]
    rank_key = tf.where(all_flags, all_scores, float("-inf"))
    _, keep = tf.math.top_k(rank_key, k=beam_size)  # [B, k]
    flags = tf.gather(all_flags, keep, batch_dims=1)
    return state._replace(
        finished_seq=tf.where(flags[:, :, tf.newaxis], tf.gather(all_seq, keep, batch_dims=1), 0),
        finished_scores=tf.where(flags, tf.gather(all_scores, keep, batch_dims=1), NEG_INF),
        finished_flags=flags,
    )


def _keep_going(state: _BeamState, decode_length: Any, alpha: float, stop_early: bool) -> tf.Tensor:
    """True while some row's finished set can still be beaten by one of its alive hypotheses."""
    best_alive_bound = tf.reduce_max(state.alive_log_probs, axis=1) / length_penalty(
        decode_length, alpha
    )  # [B]
    finished_scores = tf.where(state.finished_flags, state.finished_scores, float("-inf"))
    if stop_early:
        threshold = tf.reduce_max(finished_scores, axis=1)  # [B]
    else:
        threshold = tf.reduce_min(finished_scores, axis=1)  # [B]; -inf while a slot is empty
    bound_met = tf.reduce_all(threshold > best_alive_bound)
    return tf.logical_and(state.i < decode_length, tf.logical_not(bound_met))
