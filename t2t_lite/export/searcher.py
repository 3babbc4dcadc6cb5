"""The model and its beam search as one traced function, for SavedModels.

`BeamSearcher.search(input_ids [B, S], beam_size [], alpha [])` runs the search of
`t2t_lite.search.Translator` (the model's `encode`, `init_cache` and cached
`decode_step` under `t2t_lite.decoding.beam_search`), with alpha a tensor and the beam
chosen among a fixed set of sizes, each a branch of the graph (a beam is a static
dimension). It checks its inputs first and fails with InvalidArgumentErrors that say what
was wrong, one sentence each: a beam size not offered, alpha outside [0, 10]
(`search.config.ALPHA_RANGE`), too long, ids out of the vocabulary, a row without EOS.
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.ids import EOS_ID
from t2t_lite.search import SearchConfig, SearchFunction, row_limits
from t2t_lite.search.compiled import SEARCH_SIGNATURE
from t2t_lite.search.config import ALPHA_RANGE


class _Untracked:
    """Holds an object out of sight of tf.Module's attribute tracking."""

    def __init__(self, value):
        self.value = value


def backing_variables(model) -> list:
    """The tf.Variables behind a Keras 3 model's variables.

    A SavedModel must track these, not the Keras wrappers: for a wrapper, the saver writes
    the value into a copy of the variable while the functions read the original, so
    graph-mode loaders (TensorFlow Serving, `saved_model_cli run`) find the original
    uninitialised ("Could not find variable ..."). Only `tf.saved_model.load`, which
    restores by object, would hide the problem.
    """
    found = []
    for variable in model.variables:
        value = getattr(variable, "value", variable)
        if not isinstance(value, tf.Variable):
            raise TypeError(
                f"model variable {variable.path} is backed by a {type(value).__name__}, not a "
                "tf.Variable; export needs the TensorFlow backend (KERAS_BACKEND=tensorflow)"
            )
        found.append(value)
    return found


class BeamSearcher(tf.Module):
    """The model and its beam search as one traced function, shared by every signature.

    `search` is a `tf.function` with a fixed input signature, so it is traced once (one
    branch per offered beam size) however many signatures and SavedModels call it.

    Args:
        model: a built Transformer with `encode`, `init_cache` and `decode_step`.
        search_config: the export's SearchConfig (beam search, with `max_input_length`).
        constraint: the problem's `search_constraint`, or None (see `Translator`).
    """

    def __init__(self, model, search_config: SearchConfig, constraint=None, jit_compile=None):
        super().__init__(name="beam_searcher")
        self._model_ref = _Untracked(model)
        self._constraint = _Untracked(constraint)
        # The in-process Translator's function: the same graph, compiled the same way.
        self._function = _Untracked(SearchFunction(model, search_config, constraint, jit_compile))
        self.weights = backing_variables(model)
        self.search_config = search_config
        self._source_vocab_size = model.vocab_size
        # Not an attribute the SavedModel saver can see: it would trace the function once
        # more in its own context (a second copy of the whole search in the export, and
        # as long again to write). Signatures reach it through their own graphs.
        self._search_function = _Untracked(
            tf.function(self._search, autograph=False, input_signature=list(SEARCH_SIGNATURE))
        )

    def search(self, input_ids, beam_size, alpha):
        """(input_ids [B, S], beam_size [], alpha []) -> (ids [B, K, L], scores [B, K]): the
        traced search (`_search`), one trace for every signature that calls it."""
        return self._search_function.value(input_ids, beam_size, alpha)

    def concrete_search(self):
        """The search's concrete function (its one trace)."""
        return self._search_function.value.get_concrete_function()

    @property
    def supports_guidance(self) -> bool:
        """Whether `search_guided` works: beam search without a problem's own constraint."""
        return self._constraint.value is None and self.search_config.method == "beam"

    def search_guided(self, input_ids, beam_size, alpha, guidance):
        """`search` with required phrases and prefixes: (ids [B, K, L], scores [B, K], met [B, K]).

        `guidance` is (phrases [B, P, W], phrase_lengths [B, P], prefix [B, T],
        prefix_lengths [B]) target ids. Besides `search`'s checks, a prefix must leave room
        for EOS within its row's maximum length (InvalidArgumentError otherwise).
        """
        phrases, phrase_lengths, prefix, prefix_lengths = guidance
        limits = row_limits(input_ids, self.search_config.extra_length)  # [B]
        checked = tf.no_op()
        for ok, message in self._checks(input_ids, alpha, self._offered(beam_size)) + [
            (
                tf.reduce_all(prefix_lengths < limits),
                "a prefix is as long as its sentence's maximum output (input length + "
                f"{self.search_config.extra_length}); shorten the prefix",
            )
        ]:
            with tf.control_dependencies([checked]):
                checked = tf.debugging.Assert(ok, [message])
        with tf.control_dependencies([checked]):
            input_ids = tf.identity(input_ids)
        ids, scores, met = self._function.value.search_guided(
            input_ids, beam_size, alpha, phrases, phrase_lengths, prefix, prefix_lengths
        )
        empty = tf.reduce_sum(tf.cast(input_ids != 0, tf.int32), axis=1) == 1  # [B]
        ids = tf.where(empty[:, tf.newaxis, tf.newaxis], 0, ids[:, :, 1:])  # [B, K, L]
        return ids, tf.where(empty[:, tf.newaxis], 0.0, scores), met

    def _offered(self, beam_size):
        return tf.equal(tf.constant(self.search_config.beam_sizes, tf.int32), beam_size)

    def _search(self, input_ids, beam_size, alpha):
        """ids [B, S] int32 -> (ids [B, K, L] int32 without the start column, scores [B, K]).

        `beam_size` names one of `search_config.beam_sizes`; anything else is an
        InvalidArgumentError, as are inputs that are too long, out of the vocabulary or
        without EOS. A row of EOS alone gets no ids (zeros) and score 0.
        """
        sizes = self.search_config.beam_sizes
        offered = tf.equal(tf.constant(sizes, tf.int32), beam_size)  # [len(sizes)]
        checked = tf.no_op()
        # One after the other, so that the first failed check is always the one reported
        # (the CTranslate2 service checks in the same order, with the same messages).
        for ok, message in self._checks(input_ids, alpha, offered):
            with tf.control_dependencies([checked]):
                checked = tf.debugging.Assert(ok, [message])
        with tf.control_dependencies([checked]):
            input_ids = tf.identity(input_ids)
        ids, scores = self._function.value.search(input_ids, beam_size, alpha)
        # An empty input (EOS alone) translates to nothing with score 0, as a blank sentence
        # does in the text signatures and the decoder, and as CTranslate2 answers it.
        empty = tf.reduce_sum(tf.cast(input_ids != 0, tf.int32), axis=1) == 1  # [B]
        ids = tf.where(empty[:, tf.newaxis, tf.newaxis], 0, ids[:, :, 1:])  # [B, K, L]
        return ids, tf.where(empty[:, tf.newaxis], 0.0, scores)  # [B, K], [B, K]

    def _checks(self, input_ids, alpha, offered) -> list:
        """[(condition, message)]: each message one sentence, as the client will read it.

        Each assertion has its message as its only data, so that its error says just that
        (tf.debugging.assert_* would add "Condition x >= 0 did not hold" and the tensor).
        """
        limit = self.search_config.max_input_length
        vocab = self._source_vocab_size
        return [
            (
                tf.reduce_any(offered),
                "beam_size is not one this export offers; choose one of "
                f"{list(self.search_config.beam_sizes)}",
            ),
            (alpha >= ALPHA_RANGE[0], f"alpha must be >= {ALPHA_RANGE[0]:g}"),
            (alpha <= ALPHA_RANGE[1], f"alpha must be <= {ALPHA_RANGE[1]:g}"),
            (
                tf.shape(input_ids)[1] <= limit,
                f"an input is longer than this export's limit of {limit} ids (EOS "
                "included): split long sentences, or export with a larger max_input_length",
            ),
            (tf.reduce_all(input_ids >= 0), "input ids must be >= 0"),
            (
                tf.reduce_all(input_ids < vocab),
                f"input ids must be below the vocabulary size {vocab}",
            ),
            self._eos_check(input_ids),
        ]

    @staticmethod
    def _eos_check(input_ids) -> tuple:
        """(every row's last non-zero id is EOS, a message naming the first row that is not)."""
        positions = tf.range(1, tf.shape(input_ids)[1] + 1)[tf.newaxis, :]  # [1, S]
        # The 1-based position of each row's last non-padding id and of its last EOS;
        # over an empty row (S = 0) the maximum is the smallest int32, never > 0.
        last = tf.reduce_max(positions * tf.cast(input_ids != 0, tf.int32), axis=1)  # [B]
        last_eos = tf.reduce_max(positions * tf.cast(input_ids == EOS_ID, tf.int32), axis=1)
        ok = (last > 0) & (last_eos == last)  # [B]
        first_bad = tf.strings.reduce_join(tf.strings.as_string(tf.where(~ok)[:1, 0]))
        message = tf.strings.join(
            [
                "input row ",
                first_bad,
                f" does not end with EOS (id {EOS_ID}): end each row with {EOS_ID}, then pad "
                "with 0",
            ]
        )
        return tf.reduce_all(ok), message
