"""Signatures that show what a model does: the n-best list, the attention, the search options.

They sit in the text SavedModel beside the translation signatures, so that a client (the
page of `t2t_lite.serving`, or any TF Serving client) sees the model only through them
(B sentences, K beams, N offered beam sizes, S source and T target pieces, EOS included):

    translate_nbest   sentences string [B], beam_size int32 [], alpha float32 []
                      -> translations string [B, K], scores float32 [B, K],
                         lengths int32 [B, K], filled bool [B, K]
    attention         sentences string [B], targets string [B]
                      -> source_pieces string [B, S], target_pieces string [B, T],
                         source_lengths int32 [B], target_lengths int32 [B],
                         attention float32 [B, layers, heads, T, S]
    model_info        (no inputs)
                      -> problem string [], output_format string [], beam_sizes int32 [N],
                         beam_size int32 [], alpha float32 [], alpha_max float32 [],
                         max_input_length int32 []

`translate_nbest` is the search of `translate_ids_with_options` with every hypothesis
detokenized: `lengths` counts its pieces before EOS, `filled` is False for a beam slot no
hypothesis reached (its score is the search's NEG_INF). A blank sentence gets "" with
score 0 in slot 0, as in `translate_with_options`.

`attention` runs the model once, teacher-forced, in eval mode, over each sentence and the
target given for it (a hypothesis of `translate_nbest`, or any text), both tokenized as
the translation signatures tokenize: row t of a [T, S] map is the target position that
predicts target piece t, and its values are the encoder-decoder attention probabilities of
`t2t_lite.models.attention_maps` (eq. 1 of the paper, per layer and head). Rows are padded
to the batch's longest source and target: the first `source_lengths` columns and
`target_lengths` rows are the sentence's, padding pieces are "". Pieces are the
vocabulary's (`▁the`, `</s>` for EOS), as the `t2t_lite.attention` command labels them.

`model_info` says which beam sizes and alpha a request may use, the defaults, and how the
problem's outputs read (`Problem.output_format`: "text", "linearized_tree" for
bracketed trees such as `(S (NP John )NP )S`, or "in_order_tree" for the same trees in
order, `John (NP )NP`).
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.decoding.beam_search import NEG_INF
from t2t_lite.export.searcher import BeamSearcher
from t2t_lite.ids import EOS_ID, PAD_ID
from t2t_lite.search.config import ALPHA_RANGE

NBEST = "translate_nbest"
ATTENTION = "attention"
MODEL_INFO = "model_info"


class _Untracked:
    """Holds an object out of sight of tf.Module's attribute tracking (the Keras model)."""

    def __init__(self, value):
        self.value = value


def vocabulary_labels(encoder) -> list:
    """The label of every id of `encoder`'s vocabulary: `<pad>`, `</s>`, then its pieces.

    The labels of `t2t_lite.models.attention_maps.token_labels` (the attention command's):
    a SentencePiece vocabulary's pieces (`▁the`), else each id's decoded text.
    """
    pieces = encoder.pieces() if hasattr(encoder, "pieces") else None
    reserved = {PAD_ID: "<pad>", EOS_ID: "</s>"}
    labels = []
    for token_id in range(encoder.vocab_size):
        if token_id in reserved:
            labels.append(reserved[token_id])
        else:
            labels.append(pieces[token_id] if pieces else encoder.decode([token_id]))
    return labels


class Inspector(tf.Module):
    """The n-best, attention and model_info signatures of one text SavedModel.

    Args:
        model: the built Transformer (its variables are tracked by `searcher`).
        searcher: the export's BeamSearcher.
        source_codec, target_codec: the in-graph codecs of the translation signatures.
        source_labels, target_labels: the label of every source and target id
            (`vocabulary_labels`).
        problem_name: the problem's name.
        output_format: the problem's `output_format`.
        max_position: the model's longest sequence (source or target, EOS included).
    """

    def __init__(
        self,
        model,
        searcher: BeamSearcher,
        source_codec,
        target_codec,
        source_labels: list,
        target_labels: list,
        problem_name: str,
        output_format: str,
        max_position: int,
    ):
        super().__init__(name="inspector")
        self._model_ref = _Untracked(model)
        self._searcher = _Untracked(searcher)
        self._source_codec = _Untracked(source_codec)
        self._target_codec = _Untracked(target_codec)
        self._source_labels = list(source_labels)
        self._target_labels = list(target_labels)
        self._problem_name = problem_name
        self._output_format = output_format
        self._max_position = max_position

    def nbest(self, sentences, beam_size, alpha) -> dict:
        """sentences [B] -> every hypothesis [B, K] with its score, length and slot state."""
        codec = self._target_codec.value
        ids = self._source_codec.value.tokenize(sentences)  # [B, (S)] with EOS
        input_ids = tf.cast(ids.to_tensor(default_value=0), tf.int32)  # [B, S]
        output_ids, scores = self._searcher.value.search(input_ids, beam_size, alpha)
        shape = tf.shape(output_ids)  # [B, K, L]
        flat = tf.reshape(output_ids, [-1, shape[2]])  # [B * K, L]
        texts = tf.reshape(codec.detokenize(flat), shape[:2])  # [B, K]
        before_eos = tf.math.cumsum(tf.cast(output_ids == EOS_ID, tf.int32), axis=2) == 0
        lengths = tf.reduce_sum(tf.cast(before_eos & (output_ids != 0), tf.int32), axis=2)
        filled = scores > NEG_INF
        # As translate_with_options: a blank sentence gives "" with score 0, in slot 0 only.
        blank = tf.equal(tf.strings.length(tf.strings.strip(sentences)), 0)[:, None]  # [B, 1]
        first = tf.equal(tf.range(shape[1]), 0)[None, :]  # [1, K]
        return {
            "translations": tf.where(blank, "", texts),
            "scores": tf.where(blank, 0.0, scores),
            "lengths": tf.where(blank, 0, lengths),
            "filled": tf.where(blank, first, filled),
        }

    def attention(self, sentences, targets) -> dict:
        """Encoder-decoder attention [B, layers, heads, T, S] of sentence and target pairs."""
        source = self._source_codec.value.tokenize(sentences)  # [B, (S)] with EOS
        target = self._target_codec.value.tokenize(targets)  # [B, (T)] with EOS
        source_ids = tf.cast(source.to_tensor(default_value=0), tf.int32)  # [B, S]
        target_ids = tf.cast(target.to_tensor(default_value=0), tf.int32)  # [B, T]
        limit = self._max_position
        checks = [
            tf.debugging.assert_less_equal(
                tf.shape(ids)[1],
                limit,
                message=(
                    f"a {side} has more pieces than the model's {limit} positions (EOS "
                    f"included): give a shorter {side}"
                ),
            )
            for side, ids in (("sentence", source_ids), ("target", target_ids))
        ]
        with tf.control_dependencies(checks):
            source_ids, target_ids = tf.identity(source_ids), tf.identity(target_ids)
        model = self._model_ref.value
        encoder_output, encoder_mask = model.encode(source_ids, training=False)
        # Teacher forcing as in training: the decoder reads the targets shifted right by one.
        decoder_input = tf.pad(target_ids, [[0, 0], [1, 0]])[:, :-1]  # [B, T], from id 0
        _, layers = model.decode(
            decoder_input, encoder_output, encoder_mask, training=False, return_attention=True
        )
        cross = tf.stack([tf.cast(layer["cross_attention"], tf.float32) for layer in layers])
        return {
            "source_pieces": _labels(self._source_labels, source_ids),
            "target_pieces": _labels(self._target_labels, target_ids),
            "source_lengths": tf.cast(source.row_lengths(), tf.int32),
            "target_lengths": tf.cast(target.row_lengths(), tf.int32),
            "attention": tf.transpose(cross, [1, 0, 2, 3, 4]),  # [B, layers, H, T, S]
        }

    def model_info(self) -> dict:
        """The search options a request may use and how the problem's outputs read."""
        config = self._searcher.value.search_config
        return {
            "problem": tf.constant(self._problem_name),
            "output_format": tf.constant(self._output_format),
            "beam_sizes": tf.constant(config.beam_sizes, tf.int32),
            "beam_size": tf.constant(config.beam_size, tf.int32),
            "alpha": tf.constant(config.alpha, tf.float32),
            "alpha_max": tf.constant(ALPHA_RANGE[1], tf.float32),
            "max_input_length": tf.constant(config.max_input_length, tf.int32),
        }

    def signatures(self) -> dict:
        """{name: tf.function} of the three signatures."""
        sentences = tf.TensorSpec([None], tf.string, name="sentences")
        targets = tf.TensorSpec([None], tf.string, name="targets")
        beam_size = tf.TensorSpec([], tf.int32, name="beam_size")
        alpha = tf.TensorSpec([], tf.float32, name="alpha")
        return {
            NBEST: tf.function(
                self.nbest, autograph=False, input_signature=[sentences, beam_size, alpha]
            ),
            ATTENTION: tf.function(
                self.attention, autograph=False, input_signature=[sentences, targets]
            ),
            MODEL_INFO: tf.function(self.model_info, autograph=False, input_signature=[]),
        }


def _labels(labels: list, ids) -> tf.Tensor:
    """The label of each id [B, L]; padding (id 0) becomes ""."""
    table = tf.constant([""] + labels[1:])  # [V]: id 0 only ever pads here
    return tf.gather(table, ids)


def inspector_for(trained, encoders: dict, searcher, source_codec, target_codec) -> Inspector:
    """The Inspector of an export: `trained` (a TrainedModel) and its problem's encoders.

    An ensemble's `attention` is its first model's: the models' maps need not even have
    the same layers and heads.
    """
    return Inspector(
        trained.members[0].model if trained.members else trained.model,
        searcher,
        source_codec,
        target_codec,
        vocabulary_labels(encoders["inputs"]),
        vocabulary_labels(encoders["targets"]),
        trained.problem.name,
        trained.problem.output_format,
        trained.hp.max_position,
    )
