"""A trained model joined to a search: ids in, best hypotheses out, inside one tf.function.

`Translator.search(inputs)` runs the `SearchFunction` of `t2t_lite.search.compiled`, the
function an exported SavedModel runs too (`t2t_lite.export.BeamSearcher`): it encodes a
batch, builds the decoder cache once, and runs beam search (or greedy decoding, or
sampling) through the model's cached `decode_step`, compiled with XLA. The decoder
command, the trainer's BLEU evaluation and the SavedModel exporter all call it, so they
produce the same outputs at the same speed.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from t2t_lite.search.compiled import SearchFunction
from t2t_lite.search.config import SearchConfig


class Translator:
    """Searches with `model` (a built Transformer) under `config`.

    Args:
        model: the Transformer, with `encode`, `init_cache`, `split_cache` and `decode_step`.
        config: the SearchConfig.
        jit_compile: compile the search with XLA (one compilation per input shape); None =
            as an export does (`SearchFunction`: yes unless there is a constraint).
        constraint: the problem's `search_constraint(data_dir)`, or None: what beam search
            may output (a tree over the input's words, for parsing). Greedy decoding and
            sampling do not take it.
    """

    def __init__(self, model, config: SearchConfig, jit_compile=None, constraint=None):
        self.model = model
        self.config = config
        self.constraint = constraint
        # Only the configured beam is ever asked for here: one branch, traced once (an
        # export offers several, `t2t_lite.export.BeamSearcher`).
        single = dataclasses.replace(config, beam_sizes=(config.beam_size,))
        self.function = SearchFunction(model, single, constraint, jit_compile)
        self.jit_compile = self.function.jit_compile

    @property
    def target_vocab_size(self) -> int:
        return self.model.target_vocab_size or self.model.vocab_size

    def search(self, inputs):
        """ids [B, S] int32 (EOS-terminated, 0-padded) -> (ids [B, K, L] int32, scores [B, K]).

        K is the beam size (1 for greedy and sampling); L = S + extra_length + 1, column 0
        is the start id 0 and ids after EOS are 0.
        """
        return self.function.search(
            tf.convert_to_tensor(inputs, tf.int32),
            tf.constant(self.config.beam_size, tf.int32),
            tf.constant(self.config.alpha, tf.float32),
        )

    def search_guided(self, inputs, guidance):
        """Beam search with required phrases and prefixes: (ids, scores, met [B, K]).

        `guidance` is (phrases [B, P, W], phrase_lengths [B, P], prefix [B, T],
        prefix_lengths [B]) target ids (`t2t_lite.search.guidance_batch`).
        """
        return self.function.search_guided(
            tf.convert_to_tensor(inputs, tf.int32),
            tf.constant(self.config.beam_size, tf.int32),
            tf.constant(self.config.alpha, tf.float32),
            *[tf.convert_to_tensor(part, tf.int32) for part in guidance],
        )
