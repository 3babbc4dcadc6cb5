"""The model and its beam search as one traced function, for SavedModels.

`BeamSearcher.search(input_ids [B, S], beam_size [], alpha [])` runs the search of
`t2t_lite.search.Translator` (the model's `encode`, `init_cache` and cached
`decode_step` under `t2t_lite.decoding.beam_search`), with alpha a tensor and the beam
chosen among a fixed set of sizes, each a branch of the graph (a beam is a static
dimension). It checks its inputs first and fails with InvalidArgumentErrors that say what
was wrong: too long, ids out of the vocabulary, a beam size not offered, alpha outside
[0, 10] (`search.config.ALPHA_RANGE`).
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.search import SearchConfig, SearchFunction
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
        self.search = tf.function(
            self._search,
            input_signature=[
                tf.TensorSpec([None, None], tf.int32, name="input_ids"),
                tf.TensorSpec([], tf.int32, name="beam_size"),
                tf.TensorSpec([], tf.float32, name="alpha"),
            ],
        )

    def _search(self, input_ids, beam_size, alpha):
        """ids [B, S] int32 -> (ids [B, K, L] int32 without the start column, scores [B, K]).

        `beam_size` names one of `search_config.beam_sizes`; anything else is an
        InvalidArgumentError, as are inputs that are too long or out of the vocabulary.
        """
        sizes = self.search_config.beam_sizes
        allowed = tf.constant(sizes, tf.int32)
        offered = tf.equal(allowed, beam_size)  # [len(sizes)]
        checks = self._input_checks(input_ids, alpha)
        checks.append(
            tf.debugging.assert_equal(
                tf.reduce_any(offered),
                True,
                message=f"beam_size is not one this export offers; choose one of {list(sizes)}",
            )
        )
        with tf.control_dependencies(checks):
            input_ids = tf.identity(input_ids)
        ids, scores = self._function.value.search(input_ids, beam_size, alpha)
        return ids[:, :, 1:], scores  # [B, K, L], [B, K]

    def _input_checks(self, input_ids, alpha) -> list:
        limit = self.search_config.max_input_length
        return [
            tf.debugging.assert_less_equal(
                tf.shape(input_ids)[1],
                limit,
                message=(
                    f"an input is longer than this export's limit of {limit} ids (EOS "
                    "included): split long sentences, or export with a larger max_input_length"
                ),
            ),
            tf.debugging.assert_non_negative(input_ids, message="input ids must be >= 0"),
            tf.debugging.assert_less(
                input_ids,
                self._source_vocab_size,
                message=f"input ids must be below the vocabulary size {self._source_vocab_size}",
            ),
            tf.debugging.assert_non_negative(alpha, message="alpha must be >= 0"),
            tf.debugging.assert_less_equal(
                alpha, ALPHA_RANGE[1], message=f"alpha must be <= {ALPHA_RANGE[1]:g}"
            ),
        ]
