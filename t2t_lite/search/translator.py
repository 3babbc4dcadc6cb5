"""A trained model joined to a search: ids in, best hypotheses out, inside one tf.function.

`Translator.search(inputs)` encodes a batch, builds the decoder cache once, and runs
beam search (or greedy decoding, or sampling) through the model's cached
`decode_step`. The decoder command, the trainer's BLEU evaluation and the SavedModel
exporter all call this same function, so they produce the same outputs.

A sentence's output does not depend on the batch it is decoded in: each row generates at
most its own length (EOS included) + `extra_length` tokens, as it would alone, and stops
when its own search is done (the searches' `max_lengths`; beam search freezes a row once
it is done). The batch's width + `extra_length` only bounds the loop.
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.decoding import beam_search, greedy_search, sample
from t2t_lite.search.config import SearchConfig


class Translator:
    """Searches with `model` (a built Transformer) under `config`.

    Args:
        model: the Transformer, with `encode`, `init_cache` and `decode_step`.
        config: the SearchConfig.
        jit_compile: compile the whole search with XLA (one compilation per input shape).
        constraint: the problem's `search_constraint(data_dir)`, or None: what beam search
            may output (a tree over the input's words, for parsing). Greedy decoding and
            sampling do not take it.
    """

    def __init__(self, model, config: SearchConfig, jit_compile: bool = False, constraint=None):
        self.model = model
        self.config = config
        self.jit_compile = jit_compile
        self.constraint = constraint
        self.search = tf.function(
            self._search,
            input_signature=[tf.TensorSpec([None, None], tf.int32)],
            jit_compile=jit_compile,
        )

    @property
    def target_vocab_size(self) -> int:
        return self.model.target_vocab_size or self.model.vocab_size

    def _search(self, inputs):
        """ids [B, S] int32 (EOS-terminated, 0-padded) -> (ids [B, K, L] int32, scores [B, K]).

        K is the beam size (1 for greedy and sampling); L = S + extra_length + 1, column 0
        is the start id 0 and ids after EOS are 0.
        """
        config = self.config
        if config.method == "beam":
            return model_beam_search(
                self.model,
                inputs,
                config.beam_size,
                config.alpha,
                config.extra_length,
                config.stop_early,
                constraint=self.constraint,
            )
        step, start, cache, decode_length, limits = _search_inputs(
            self.model, inputs, config.extra_length
        )
        if config.method == "greedy":
            ids, scores = greedy_search(
                step, start, decode_length, states=cache, padded_ids=True, max_lengths=limits
            )
        else:
            ids, scores = sample(
                step,
                start,
                decode_length,
                states=cache,
                temperature=config.temperature,
                top_k=config.top_k,
                seed=config.seed,
                padded_ids=True,
                max_lengths=limits,
            )
        return ids[:, None, :], scores[:, None]


def row_limits(inputs, extra_length: int):
    """Each row's own decode length: ids [B, S] -> int32 [B] = its length (to EOS) + extra_length.

    A row's length is the position of its last non-padding id plus one, so a row decodes
    as far as it would alone, whatever the width of the batch it is padded to.
    """
    positions = tf.range(1, tf.shape(inputs)[1] + 1)  # [S]
    lengths = tf.reduce_max(tf.where(inputs != 0, positions[tf.newaxis, :], 0), axis=1)  # [B]
    return lengths + extra_length


def _search_inputs(model, inputs, extra_length: int):
    """Encodes `inputs` once: (step function, start ids [B], cache, decode length, limits [B]).

    The decode length (the loop's bound) is the batch's width + extra_length; each row
    stops at its own length + extra_length (`row_limits`, the searches' `max_lengths`).
    """
    encoder_output, encoder_mask = model.encode(inputs, training=False)
    decode_length = tf.shape(inputs)[1] + extra_length
    cache = model.init_cache(encoder_output, encoder_mask, decode_length)
    start = tf.zeros([tf.shape(inputs)[0]], tf.int32)

    def step(ids, i, states):
        return model.decode_step(ids[:, i], i, states)

    return step, start, cache, decode_length, row_limits(inputs, extra_length)


def model_beam_search(
    model, inputs, beam_size: int, alpha, extra_length: int, stop_early=True, constraint=None
):
    """Cached beam search with `model`: ids [B, S] -> (ids [B, K, S + extra + 1], scores [B, K]).

    `alpha` may be a tensor (a per-request option of an exported model). `constraint`, if
    given, is called as `constraint(inputs, row limits)` for the search's `StepConstraint`.
    """
    step, start, cache, decode_length, limits = _search_inputs(model, inputs, extra_length)
    vocab_size = model.target_vocab_size or model.vocab_size
    return beam_search(
        step,
        start,
        beam_size,
        decode_length,
        vocab_size,
        alpha,
        states=cache,
        stop_early=stop_early,
        padded_ids=True,
        max_lengths=limits,
        constraint=constraint(inputs, limits) if constraint is not None else None,
    )
