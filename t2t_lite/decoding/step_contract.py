"""The step-function contract every search shares: beam search, greedy decoding, sampling.

A search calls the model only through `symbols_to_logits_fn`: statelessly, `fn(ids) -> logits`,
or with states, `fn(ids, i, states) -> (logits, new_states)`, where `ids` is the growing prefix
[N, i + 1] or, with `padded_ids=True`, the fixed-size buffer [N, L] (see `beam_search`). This
module calls it, checks what it returns and writes the chosen tokens into the id buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

SymbolsToLogitsFn = Callable[..., Any]

# Log-probability of what cannot happen: empty beam slots, padding beams, tokens that must
# not be chosen. Finite so that it survives arithmetic (no -inf - -inf) and JSON; real
# log-probabilities never come near it.
NEG_INF = -1.0e9


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
    pad_id: int | None = None,
) -> tuple[tf.Tensor, Any]:
    """Calls the step function on hypotheses `seq` [N, L] and returns float32 log-probabilities.

    With `pad_id`, that id's log-probability is set to `NEG_INF` after normalisation: padding is
    never a token to choose, and the other tokens keep the model's own log-probabilities
    (their scores stay those of forced decoding).

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
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    if pad_id is not None:
        is_pad = tf.equal(tf.range(tf.shape(log_probs)[-1]), pad_id)  # [V]
        log_probs = tf.where(is_pad, tf.constant(NEG_INF, tf.float32), log_probs)
    return log_probs, new_states


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
