"""The Transformer of "Attention Is All You Need" as one Keras model.

The model exposes what training, decoding and export need and nothing else:
`call` (teacher forcing), `encode`, `decode`, and the cached pair `init_cache` /
`decode_step` that beam search drives through `symbols_to_logits_fn`.
"""

import inspect

import keras
from keras import ops

from t2t_lite import kernels as kernel_sets
from t2t_lite.layers import masks
from t2t_lite.layers.decoder_layer import TransformerDecoderLayer
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.embedding import TokenEmbedding
from t2t_lite.layers.encoder_layer import TransformerEncoderLayer
from t2t_lite.layers.normalization import LayerNorm
from t2t_lite.layers.positions import LearnedPositionEmbedding, SinusoidalPositionEncoding
from t2t_lite.models import source_pointer as pointer_lib
from t2t_lite.models.cached_decoding import CachedDecoding


def _arguments(cls) -> list:
    """The names of `cls.__init__`'s arguments between self and the final **kwargs."""
    return list(inspect.signature(cls.__init__).parameters)[1:-1]


def shift_targets_right(targets):
    """Decoder input for teacher forcing: [t0, t1, ..., t_{T-1}] -> [0, t0, ..., t_{T-2}].

    Args:
        targets: int [B, T].

    Returns:
        int [B, T], starting with the padding id 0 (DESIGN.md).
    """
    return ops.pad(targets, ((0, 0), (1, 0)))[:, :-1]


@keras.saving.register_keras_serializable(package="t2t_lite")
class Transformer(CachedDecoding, keras.Model):
    """Encoder-decoder Transformer (section 3) with tied embeddings (section 3.4).

    Vocabularies: with `target_vocab_size=None` and `shared_embedding=True`, one
    [V, D] matrix (`token_embedding`) embeds source and target tokens and gives the
    pre-softmax projection. Otherwise `source_embedding` embeds the source and
    `target_embedding` embeds the target and gives the pre-softmax projection.

    Dropout `dropout` applies to embeddings + positions and to every sub-layer output;
    `attention_dropout` to attention weights, `relu_dropout` inside the FFN. With
    `normalize_first` (pre-norm) a final LayerNorm follows each stack.

    Args:
        vocab_size: V, source vocabulary size (and target size when shared).
        target_vocab_size: target vocabulary size, or None for the source's vocabulary.
        num_encoder_layers, num_decoder_layers: N of each stack.
        hidden_size: D. filter_size: d_ff. num_heads: h.
        shared_embedding: one matrix for both vocabularies (needs target_vocab_size None).
        position_encoding: "sinusoid" (section 3.5) or "learned" (Table 3, row E).
        max_position: rows of the learned position table.
        normalize_first: pre-norm instead of the paper's post-norm.
        dropout, attention_dropout, relu_dropout: the rates above.
        layer_norm_epsilon: LayerNorm's epsilon.
        source_pointer: add to each decoder input the encoder output at the source position
            of the next token to copy (`t2t_lite.models.source_pointer`).
        non_copy_ids: the target ids that are not copies (brackets), with `source_pointer`.
        kernels: "keras" or "cpu", how every layer computes (`t2t_lite.kernels`); the
            weights are the same either way.
        **kwargs: `name`, `dtype` (a dtype policy such as "mixed_bfloat16"), ...
    """

    def __init__(
        self,
        vocab_size: int,
        target_vocab_size: int | None = None,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        hidden_size: int = 512,
        filter_size: int = 2048,
        num_heads: int = 8,
        shared_embedding: bool = True,
        position_encoding: str = "sinusoid",
        max_position: int = 1024,
        normalize_first: bool = False,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        relu_dropout: float = 0.0,
        layer_norm_epsilon: float = 1e-6,
        source_pointer: bool = False,
        non_copy_ids=None,
        kernels: str = kernel_sets.KERAS,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.target_vocab_size = target_vocab_size
        self.num_encoder_layers = num_encoder_layers
        self.num_decoder_layers = num_decoder_layers
        self.hidden_size = hidden_size
        self.filter_size = filter_size
        self.num_heads = num_heads
        self.shared_embedding = shared_embedding
        self.position_encoding = position_encoding
        self.max_position = max_position
        self.normalize_first = normalize_first
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.source_pointer = source_pointer
        self.non_copy_ids = sorted({int(i) for i in non_copy_ids or ()})
        if source_pointer and not self.non_copy_ids:
            raise ValueError(
                "Transformer: source_pointer needs non_copy_ids, the target ids that are not "
                "copies of source tokens (the problem's target_non_copy_ids)"
            )
        if position_encoding not in ("sinusoid", "learned"):
            raise ValueError(
                f"Transformer: position_encoding must be 'sinusoid' or 'learned', "
                f"got {position_encoding!r}"
            )
        self.kernels = kernel_sets.check(kernels, "Transformer")
        if source_pointer:
            self._non_copy_table = pointer_lib.non_copy_table(
                self.non_copy_ids, target_vocab_size or vocab_size
            )
        self._create_layers()

    @property
    def shares_vocabulary(self) -> bool:
        """True when one matrix embeds source and target and gives the logits."""
        return self.target_vocab_size is None and self.shared_embedding

    def _create_layers(self):
        policy = self.dtype_policy
        vocabularies = {"token_embedding": self.vocab_size}
        if not self.shares_vocabulary:
            target = self.target_vocab_size or self.vocab_size
            vocabularies = {"source_embedding": self.vocab_size, "target_embedding": target}
        for name, size in vocabularies.items():
            setattr(self, name, TokenEmbedding(size, self.hidden_size, name=name, dtype=policy))
        if self.position_encoding == "learned":
            self.position_embedding = LearnedPositionEmbedding(
                self.max_position, self.hidden_size, name="position_embedding", dtype=policy
            )
        else:
            self.position_embedding = SinusoidalPositionEncoding(
                name="position_embedding", dtype=policy
            )
        common = {"kernels": self.kernels, "dtype": policy}
        for stack in ("encoder", "decoder"):
            name = f"{stack}_embedding_dropout"
            setattr(self, name, Dropout(self.dropout, name=name, **common))
        # Every layer gets the model's value of each of its arguments.
        block = {key: getattr(self, key) for key in _arguments(TransformerEncoderLayer)}
        # One attribute per layer (not a list): tf.train.Checkpoint and SavedModel track
        # attributes, and Keras 3 lists of layers are invisible to them.
        for stack, count, layer_class in (
            ("encoder", self.num_encoder_layers, TransformerEncoderLayer),
            ("decoder", self.num_decoder_layers, TransformerDecoderLayer),
        ):
            for i in range(count):
                name = f"{stack}_layer_{i}"
                setattr(self, name, layer_class(name=name, dtype=policy, **block))
        for stack in ("encoder", "decoder"):
            name = f"{stack}_layer_norm"
            layer_norm = None
            if self.normalize_first:
                layer_norm = LayerNorm(epsilon=self.layer_norm_epsilon, name=name, **common)
            setattr(self, name, layer_norm)

    @property
    def encoder_layers(self) -> list:
        """The encoder stack, attributes `encoder_layer_0` .. `encoder_layer_{N-1}`."""
        return [getattr(self, f"encoder_layer_{i}") for i in range(self.num_encoder_layers)]

    @property
    def decoder_layers(self) -> list:
        """The decoder stack, attributes `decoder_layer_0` .. `decoder_layer_{N-1}`."""
        return [getattr(self, f"decoder_layer_{i}") for i in range(self.num_decoder_layers)]

    def build(self, input_shape=None):
        """Creates every weight; shapes come from the config, not from `input_shape`."""
        states = (None, None, self.hidden_size)  # [B, T, D]
        for embedding in {id(e): e for e in (self._source(), self._target())}.values():
            embedding.build((None, None))
        self.position_embedding.build(states)
        for layer in self.encoder_layers:
            layer.build(states)
        for layer in self.decoder_layers:
            layer.build(states, states)
        for layer_norm in (self.encoder_layer_norm, self.decoder_layer_norm):
            if layer_norm is not None:
                layer_norm.build(states)
        self.built = True

    def _source(self) -> TokenEmbedding:
        return self.token_embedding if self.shares_vocabulary else self.source_embedding

    def _target(self) -> TokenEmbedding:
        return self.token_embedding if self.shares_vocabulary else self.target_embedding

    def _embed(self, embedding, ids, start_index, dropout, training, pointed=None):
        """Token embedding * sqrt(D) + position encoding (+ `pointed`), then dropout: [B, T, D]."""
        x = embedding(ids)  # [B, T, D]
        x = x + self.position_embedding(x, start_index=start_index)
        if pointed is not None:
            x = x + ops.cast(pointed, x.dtype)
        return dropout(x, training=training)

    def call(self, features, training=False):
        """Teacher-forced logits.

        Args:
            features: {"inputs": int [B, S], "targets": int [B, T]}; 0 is padding.
            training: enables dropout.

        Returns:
            float32 logits [B, T, V_target] for predicting `targets`.
        """
        missing = sorted({"inputs", "targets"} - set(features))
        if missing:
            raise KeyError(
                f"Transformer.call: features lack {missing}; pass a dict with int tensors "
                "'inputs' [B, S] and 'targets' [B, T]"
            )
        encoder_output, encoder_mask = self.encode(features["inputs"], training=training)
        decoder_input = shift_targets_right(features["targets"])
        return self.decode(decoder_input, encoder_output, encoder_mask, training=training)

    def encode(self, inputs, training=False, return_attention=False):
        """Runs the encoder stack.

        Args:
            inputs: int source ids [B, S]; 0 is padding.
            training: enables dropout.
            return_attention: also return each layer's self-attention probabilities
                (for `t2t_lite.models.attention_maps`).

        Returns:
            (encoder_output [B, S, D] in the compute dtype, encoder_mask bool [B, S]),
            and with `return_attention` a third item: a list of [B, H, S, S], one per layer.
        """
        encoder_mask = masks.padding_mask(inputs)  # [B, S]
        x = self._embed(self._source(), inputs, 0, self.encoder_embedding_dropout, training)
        attention_mask = masks.attention_mask(encoder_mask, query_length=ops.shape(inputs)[1])
        probabilities = []
        for layer in self.encoder_layers:
            x = layer(
                x, attention_mask=attention_mask, training=training,
                return_attention=return_attention,
            )  # fmt: skip
            if return_attention:
                x, layer_probabilities = x
                probabilities.append(layer_probabilities)
        if self.encoder_layer_norm is not None:
            x = self.encoder_layer_norm(x)
        return (x, encoder_mask, probabilities) if return_attention else (x, encoder_mask)

    def decode(
        self, decoder_input_ids, encoder_output, encoder_mask, training=False,
        return_attention=False,
    ):  # fmt: skip
        """Runs the decoder stack over a whole (shifted-right) target sequence.

        Args:
            decoder_input_ids: int [B, T], starting with 0.
            encoder_output: [B, S, D] from `encode`.
            encoder_mask: bool [B, S] from `encode`.
            training: enables dropout.
            return_attention: also return each layer's attention probabilities.

        Returns:
            float32 logits [B, T, V_target]; with `return_attention`, (logits, a list
            with one {"self_attention": [B, H, T, T], "cross_attention": [B, H, T, S]}
            per layer).
        """
        pointed = None
        if self.source_pointer:
            copies = pointer_lib.copies(decoder_input_ids, self._non_copy_table)  # [B, T]
            pointed = pointer_lib.read(encoder_output, ops.cumsum(copies, axis=1))
        x = self._embed(
            self._target(), decoder_input_ids, 0, self.decoder_embedding_dropout, training,
            pointed,
        )  # fmt: skip
        length = ops.shape(decoder_input_ids)[1]
        self_attention_mask = masks.causal_mask(length)[None]  # [1, T, T]
        cross_attention_mask = masks.attention_mask(encoder_mask, query_length=length)
        probabilities = []
        for layer in self.decoder_layers:
            x = layer(
                x,
                encoder_output=encoder_output,
                self_attention_mask=self_attention_mask,
                cross_attention_mask=cross_attention_mask,
                training=training,
                return_attention=return_attention,
            )
            if return_attention:
                x, layer_probabilities = x
                probabilities.append(layer_probabilities)
        return (self._logits(x), probabilities) if return_attention else self._logits(x)

    def _logits(self, x):
        """Final LayerNorm (pre-norm only) and the tied pre-softmax projection, float32."""
        if self.decoder_layer_norm is not None:
            x = self.decoder_layer_norm(x)
        return ops.cast(self._target().attend(x), "float32")  # [B, T, V]

    def get_config(self):
        arguments = {name: getattr(self, name) for name in _arguments(Transformer)}
        return {**super().get_config(), **arguments}
