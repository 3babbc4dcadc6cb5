"""Greedy decoding and sampling: one hypothesis per batch row, one token per step.

Both run the same loop and differ only in how a step picks its token: the argmax of the model's
distribution, or a draw from it (optionally sharpened by a temperature and cut to the top k).
They call the model through `step_contract`, as documented in `beam_search.beam_search`, with
N = B.

Loop state (`_DecodeState`), with L = decode_length + 1:

    i         [] int32          tokens generated so far; column i of `seq` is the last token.
    seq       [B, L] int32      column 0 = initial id; 0 after EOS and after column i.
    scores    [B] float32       summed model log-probabilities of the generated tokens.
    finished  [B] bool          True once the row has produced EOS or reached its maximum length.
    states    nest of [B, ...]  the caller's states as returned by the last step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf

from t2t_lite.decoding.step_contract import (
    SymbolsToLogitsFn,
    check_step_mode,
    step_log_probs,
    write_column,
)
from t2t_lite.ids import EOS_ID

# Picks the next token [B] int32 from log-probabilities [B, V] float32 at step i.
ChooseFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


class _DecodeState(NamedTuple):
    i: tf.Tensor  # [] int32
    seq: tf.Tensor  # [B, L] int32
    scores: tf.Tensor  # [B] float32
    finished: tf.Tensor  # [B] bool
    states: Any  # nest of [B, ...]


def greedy_search(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: tf.Tensor,
    decode_length: int | tf.Tensor,
    states: Any = None,
    eos_id: int = EOS_ID,
    padded_ids: bool = False,
    max_lengths: tf.Tensor | None = None,
    pad_id: int | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Decodes by taking the most probable token at every step.

    Args:
        symbols_to_logits_fn: `fn(ids) -> logits [B, V]` when `states` is None, else
            `fn(ids, i, states) -> (logits [B, V], new_states)`; `ids` is [B, i + 1], or
            [B, decode_length + 1] with `padded_ids=True` (required under XLA).
        initial_ids: [B] int ids to start from.
        decode_length: maximum number of tokens to generate, EOS included.
        states: optional nest of [B, ...] tensors that keep their shapes across steps.
        eos_id: the end-of-sequence id.
        padded_ids: pass the fixed-size id buffer instead of the growing prefix.
        max_lengths: optional [B] int, row b's own maximum number of tokens (<= decode_length,
            which then only bounds the loop), as if the row were decoded alone with it.
        pad_id: optional id never to choose (the padding id of a model's vocabulary).

    Returns:
        (ids [B, decode_length + 1] int32, scores [B] float32): column 0 is the initial id,
        ids after EOS are 0, and scores are the summed log-probabilities of the chosen tokens.
    """
    return _decode(
        symbols_to_logits_fn,
        initial_ids,
        decode_length,
        states,
        eos_id,
        padded_ids,
        _argmax,
        "greedy_search",
        max_lengths,
        pad_id,
    )


def sample(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: tf.Tensor,
    decode_length: int | tf.Tensor,
    states: Any = None,
    eos_id: int = EOS_ID,
    temperature: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    padded_ids: bool = False,
    max_lengths: tf.Tensor | None = None,
    pad_id: int | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Decodes by drawing every token from the model's (tempered, truncated) distribution.

    Rows draw independently. Step i uses the stateless seed `fold_in([seed, 0], i)`, so a given
    seed reproduces the same ids on the same device and compiler (XLA draws differ from the
    non-XLA kernels). Without a seed, each call draws a fresh one.

    Args:
        symbols_to_logits_fn: the step function, as for `greedy_search`.
        initial_ids: [B] int ids to start from.
        decode_length: maximum number of tokens to generate, EOS included.
        states: optional nest of [B, ...] tensors that keep their shapes across steps.
        eos_id: the end-of-sequence id.
        temperature: logits are divided by it before drawing; 0 means argmax (greedy).
        top_k: if > 0, draw only among the k most probable tokens (ties at the k-th kept).
        seed: an int for reproducible draws, or None.
        padded_ids: pass the fixed-size id buffer instead of the growing prefix.
        max_lengths: optional [B] int, each row's own maximum (see `greedy_search`).
        pad_id: optional id never to draw (see `greedy_search`).

    Returns:
        (ids [B, decode_length + 1] int32, scores [B] float32) as for `greedy_search`; scores
        are the model's own log-probabilities of the drawn tokens (temperature 1, no top-k cut).
    """
    if temperature < 0:
        raise ValueError(f"sample: temperature must be >= 0, got {temperature}.")
    if not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"sample: top_k must be an int >= 0 (0 = no cut), got {top_k!r}.")
    if temperature == 0:
        choose = _argmax
    else:
        if seed is None:
            seed_pair = tf.random.uniform([2], maxval=tf.int32.max, dtype=tf.int32)
        else:
            seed_pair = tf.constant([seed, 0], tf.int32)
        choose = _sampler(temperature, top_k, seed_pair)
    return _decode(
        symbols_to_logits_fn,
        initial_ids,
        decode_length,
        states,
        eos_id,
        padded_ids,
        choose,
        "sample",
        max_lengths,
        pad_id,
    )


def _argmax(log_probs: tf.Tensor, i: tf.Tensor) -> tf.Tensor:
    del i  # Greedy choices do not depend on the step.
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


def _sampler(temperature: float, top_k: int, seed_pair: tf.Tensor) -> ChooseFn:
    def choose(log_probs: tf.Tensor, i: tf.Tensor) -> tf.Tensor:
        logits = log_probs / temperature  # [B, V]
        vocab_size = logits.shape[-1]
        if top_k and (vocab_size is None or top_k < vocab_size):
            kth_best = tf.math.top_k(logits, k=top_k).values[:, -1:]  # [B, 1]
            logits = tf.where(logits < kth_best, float("-inf"), logits)
        step_seed = tf.random.experimental.stateless_fold_in(seed_pair, i)
        drawn = tf.random.stateless_categorical(logits, 1, seed=step_seed, dtype=tf.int32)
        return drawn[:, 0]  # [B]

    return choose


def _decode(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: tf.Tensor,
    decode_length: int | tf.Tensor,
    states: Any,
    eos_id: int,
    padded_ids: bool,
    choose: ChooseFn,
    caller: str,
    max_lengths: tf.Tensor | None,
    pad_id: int | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    if isinstance(decode_length, int) and decode_length < 0:
        raise ValueError(f"{caller}: decode_length must be >= 0, got {decode_length}.")
    use_states = states is not None
    check_step_mode(use_states, padded_ids, caller)
    initial_ids = tf.cast(initial_ids, tf.int32)
    batch = tf.shape(initial_ids)[0]
    limits = tf.fill([batch], tf.cast(decode_length, tf.int32))  # [B]
    if max_lengths is not None:
        limits = tf.minimum(tf.cast(max_lengths, tf.int32), limits)
    state = _DecodeState(
        i=tf.constant(0, tf.int32),
        seq=tf.concat(  # [B, L]
            [initial_ids[:, tf.newaxis], tf.zeros([batch, decode_length], tf.int32)], axis=1
        ),
        scores=tf.zeros([batch], tf.float32),
        finished=tf.zeros([batch], tf.bool),
        states=states if use_states else {},
    )

    def step(state: _DecodeState) -> tuple[_DecodeState]:
        log_probs, new_states = step_log_probs(
            symbols_to_logits_fn,
            state.seq,
            state.i,
            state.states,
            use_states,
            padded_ids,
            pad_id=pad_id,
        )  # [B, V]
        ended = tf.logical_or(state.finished, state.i >= limits)  # [B]
        token = tf.where(ended, 0, choose(log_probs, state.i))  # [B]; 0 after EOS
        token_log_prob = tf.gather(log_probs, token, batch_dims=1)  # [B]
        return (
            _DecodeState(
                i=state.i + 1,
                seq=write_column(state.seq, state.i + 1, token),
                scores=state.scores + tf.where(ended, 0.0, token_log_prob),
                finished=tf.logical_or(ended, tf.equal(token, eos_id)),
                states=new_states,
            ),
        )

    def keep_going(state: _DecodeState) -> tf.Tensor:
        return tf.logical_and(
            state.i < decode_length,
            tf.logical_not(tf.reduce_all(tf.logical_or(state.finished, state.i >= limits))),
        )

    (final,) = tf.while_loop(keep_going, step, (state,))
    return final.seq, final.scores
