"""Searches with a Transformer: encode once, then beam search or greedy decoding (or
sampling) through the model's cached `decode_step`.

The cache is split (`model.split_cache`) into what a step changes (the self-attention
keys and values) and what it does not (the encoder-decoder keys and values, the encoder
mask, the encoder output). Beam search reorders only the changing part by parent hypothesis
after every step; the constant part stays one per sentence, read by the hypotheses of a
sentence together.

A sentence's output does not depend on the batch it is decoded in: each row generates at
most its own length (EOS included) + `extra_length` tokens, as it would alone, and stops
when its own search is done (the searches' `max_lengths`; beam search freezes a row once
it is done). The batch's width + `extra_length` only bounds the loop.
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.decoding import beam_search, greedy_search, sample
from t2t_lite.decoding.lexical import lexically_constrained_beam_search
from t2t_lite.ids import PAD_ID


def row_limits(inputs, extra_length: int):
    """Each row's own decode length: ids [B, S] -> int32 [B] = its length (to EOS) + extra_length.

    A row's length is the position of its last non-padding id plus one, so a row decodes
    as far as it would alone, whatever the width of the batch it is padded to.
    """
    positions = tf.range(1, tf.shape(inputs)[1] + 1)  # [S]
    lengths = tf.reduce_max(tf.where(inputs != 0, positions[tf.newaxis, :], 0), axis=1)  # [B]
    return lengths + extra_length


def search_inputs(model, inputs, extra_length: int, cache_block=None):
    """Encodes `inputs` once: (step function, start ids [B], states, decode length, limits [B]).

    `states` is the changing part of the cache, [B, ...]; the constant part, read by the
    step function, stays [B, ...] for every beam size (row b * beam_size + k of a step is
    beam k of row b, the searches' order). The decode length (the loop's bound) is the batch's
    width + extra_length; each row stops at its own length + extra_length (`row_limits`).

    `cache_block`: None gives the self-attention cache all decode-length slots from the
    start. An int starts it with that many and adds as many again whenever a step reaches
    its end (graph mode only: the cache's shape changes inside the loop), so a step's work
    follows the length decoded so far rather than the maximum length.
    """
    encoder_output, encoder_mask = model.encode(inputs, training=False)
    decode_length = tf.shape(inputs)[1] + extra_length
    cache_length = decode_length if cache_block is None else tf.minimum(cache_block, decode_length)
    cache = model.init_cache(encoder_output, encoder_mask, cache_length)
    states, constants = model.split_cache(cache)
    if cache_block is not None:
        states = _growable(states)
    start = tf.zeros([tf.shape(inputs)[0]], tf.int32)

    def step(ids, i, states):
        if cache_block is not None:
            states = _grown(states, i, cache_block, decode_length)
        return model.decode_step(ids[:, i], i, states, constants)

    return step, start, states, decode_length, row_limits(inputs, extra_length)


def _growable(states):
    """`states` with the length of the self-attention caches (axis 2 of [N, H, C, Dh])
    statically unknown, as the search's loop requires of a tensor whose shape changes from
    step to step."""
    return _map_self_attention(
        lambda cache: tf.compat.v1.placeholder_with_default(
            cache, [*cache.shape[:2], None, *cache.shape[3:]]
        ),
        states,
    )


def _map_self_attention(function, states):
    """`states` with `function` applied to every tensor under a "self_attention" key."""

    def visit(name, value):
        if name == "self_attention":
            return tf.nest.map_structure(function, value)
        if isinstance(value, dict):
            return {key: visit(key, item) for key, item in value.items()}
        if isinstance(value, (tuple, list)):  # an ensemble's states: one entry per model
            return type(value)(visit("", item) for item in value)
        return value

    return visit("", states)


def _grown(states, i, block: int, decode_length):
    """`states` whose self-attention caches [N, H, C, Dh] get `block` more zero slots (at
    most decode_length in all) when step i is about to write slot C."""

    def grow(cache):
        size = tf.shape(cache)[2]
        padding = [[0, 0], [0, 0], [0, tf.minimum(block, decode_length - size)]]
        padding += [[0, 0]] * (cache.shape.rank - 3)
        return tf.cond(i < size, lambda: cache, lambda: tf.pad(cache, padding))

    return _map_self_attention(grow, states)


def model_beam_search(
    model,
    inputs,
    beam_size: int,
    alpha,
    extra_length: int,
    stop_early=True,
    constraint=None,
    cache_block=None,
):
    """Cached beam search with `model`: ids [B, S] -> (ids [B, K, S + extra + 1], scores [B, K]).

    `alpha` may be a tensor (a per-request option of an exported model). `constraint`, if
    given, is called as `constraint(inputs, row limits)` for the search's `StepConstraint`.
    `cache_block`: grow the self-attention cache in blocks (`search_inputs`); None: full size.
    """
    step, start, states, decode_length, limits = search_inputs(
        model, inputs, extra_length, cache_block
    )
    vocab_size = model.target_vocab_size or model.vocab_size
    return beam_search(
        step,
        start,
        beam_size,
        decode_length,
        vocab_size,
        alpha,
        states=states,
        stop_early=stop_early,
        padded_ids=True,
        max_lengths=limits,
        constraint=constraint(inputs, limits) if constraint is not None else None,
        pad_id=PAD_ID,
    )


def model_guided_search(
    model,
    inputs,
    beam_size: int,
    alpha,
    extra_length: int,
    guidance,
    stop_early=True,
    cache_block=None,
):
    """Beam search whose outputs contain given phrases and start with a given prefix.

    Args:
        model, inputs, beam_size, alpha, extra_length, stop_early, cache_block: as
            `model_beam_search`.
        guidance: (phrases [B, P, W], phrase_lengths [B, P], prefix [B, T],
            prefix_lengths [B]) target ids, 0-padded (`lexically_constrained_beam_search`).

    Returns:
        (ids [B, K, S + extra + 1], scores [B, K], met [B, K] bool: the hypothesis contains
        every phrase of its row).
    """
    phrases, phrase_lengths, prefix, prefix_lengths = guidance
    step, start, states, decode_length, limits = search_inputs(
        model, inputs, extra_length, cache_block
    )
    return lexically_constrained_beam_search(
        step,
        start,
        beam_size,
        decode_length,
        model.target_vocab_size or model.vocab_size,
        alpha,
        phrases,
        phrase_lengths,
        states=states,
        stop_early=stop_early,
        padded_ids=True,
        max_lengths=limits,
        prefix=prefix,
        prefix_lengths=prefix_lengths,
        pad_id=PAD_ID,
    )


def model_greedy_search(model, inputs, config, cache_block=None):
    """Greedy decoding or sampling (`config.method`): ids [B, S] -> (ids [B, L], scores [B]).

    `cache_block`: as `model_beam_search`.
    """
    step, start, states, decode_length, limits = search_inputs(
        model, inputs, config.extra_length, cache_block
    )
    if config.method == "greedy":
        return greedy_search(
            step,
            start,
            decode_length,
            states=states,
            padded_ids=True,
            max_lengths=limits,
            pad_id=PAD_ID,
        )
    return sample(
        step,
        start,
        decode_length,
        states=states,
        temperature=config.temperature,
        top_k=config.top_k,
        seed=config.seed,
        padded_ids=True,
        max_lengths=limits,
        pad_id=PAD_ID,
    )
