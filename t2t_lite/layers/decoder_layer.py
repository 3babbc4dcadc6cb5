"""One decoder layer: masked self-attention, encoder-decoder attention, FFN (section 3.1)."""

import keras
from keras import ops

from t2t_lite import kernels as kernel_sets
from t2t_lite.layers import masks
from t2t_lite.layers.attention import MultiHeadAttention
from t2t_lite.layers.feed_forward import FeedForwardNetwork
from t2t_lite.layers.residual import build_norm_and_dropout


@keras.saving.register_keras_serializable(package="t2t_lite")
class TransformerDecoderLayer(keras.layers.Layer):
    """Causal self-attention, attention over the encoder output, then FFN.

    Each sub-layer is wrapped as in `TransformerEncoderLayer`: post-norm
    LayerNorm(x + Dropout(Sublayer(x))) by default, pre-norm with `normalize_first`.

    Two ways to call it:
    - full sequence (teacher forcing): `layer(x, encoder_output=e, cross_attention_mask=m)`;
      the self-attention mask defaults to the causal mask.
    - one cached step: `layer(x, cross_key_value=kv, cross_attention_mask=m, cache=c,
      cache_index=i)` with x [B, 1, D]; returns (y, new_cache). `kv` comes from
      `compute_cross_key_value(encoder_output)`, `c` holds {"key", "value"} [B, H, L, Dh]
      and the self-attention mask defaults to slots 0..i.

    Args: as `TransformerEncoderLayer`.
    """

    def __init__(
        self,
        hidden_size: int,
        filter_size: int,
        num_heads: int,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        relu_dropout: float = 0.0,
        normalize_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        kernels: str = kernel_sets.KERAS,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.filter_size = filter_size
        self.num_heads = num_heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.normalize_first = normalize_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernels = kernel_sets.check(kernels, "TransformerDecoderLayer")

    def build(self, inputs_shape, encoder_output_shape=None):
        encoder_output_shape = encoder_output_shape or inputs_shape
        for name, memory_shape in (
            ("self_attention", inputs_shape),
            ("cross_attention", encoder_output_shape),
        ):
            attention = MultiHeadAttention(
                self.num_heads,
                self.hidden_size,
                dropout=self.attention_dropout,
                kernels=self.kernels,
                name=name,
                dtype=self.dtype_policy,
            )
            attention.build(inputs_shape, memory_shape)
            setattr(self, name, attention)
            build_norm_and_dropout(self, name, inputs_shape)
        self.feed_forward = FeedForwardNetwork(
            self.hidden_size,
            self.filter_size,
            relu_dropout=self.relu_dropout,
            kernels=self.kernels,
            name="feed_forward",
            dtype=self.dtype_policy,
        )
        self.feed_forward.build(inputs_shape)
        build_norm_and_dropout(self, "feed_forward", inputs_shape)
        self.built = True

    def compute_cross_key_value(self, encoder_output):
        """Encoder-decoder keys/values, once per sentence: {"key", "value"} [B, H, S, Dh]."""
        return self.cross_attention.compute_key_value(encoder_output)

    def call(
        self,
        inputs,
        encoder_output=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        cross_key_value=None,
        cache=None,
        cache_index=None,
        training=None,
        return_attention=False,
    ):
        """Maps [B, T, D] to [B, T, D] (or one cached step [B, 1, D]).

        Args:
            inputs: [B, T, D] decoder states (T = 1 for a cached step).
            encoder_output: [B, S, D]; not needed when `cross_key_value` is given.
            self_attention_mask: bool broadcastable to [B, T, T] (or [B, 1, L] when
                cached); defaults to `causal_mask(T)` (or `step_mask(i, L)`).
            cross_attention_mask: bool broadcastable to [B, T, S]; True at real source tokens.
            cross_key_value: precomputed encoder-decoder {"key", "value"} [B, H, S, Dh].
            cache: this layer's self-attention cache {"key", "value"} [B, H, L, Dh].
            cache_index: scalar int i, the position decoded by a cached step.
            training: enables dropout.
            return_attention: also return the attention probabilities (full sequence only).

        Returns:
            [B, T, D], or ([B, 1, D], new_cache) when `cache` is given, or with
            `return_attention` ([B, T, D], {"self_attention": [B, H, T, T],
            "cross_attention": [B, H, T, S]}).
        """
        if encoder_output is None and cross_key_value is None:
            raise ValueError(
                "TransformerDecoderLayer needs encoder_output or cross_key_value to attend to"
            )
        if self_attention_mask is None:
            if cache is None:
                self_attention_mask = masks.causal_mask(ops.shape(inputs)[1])[None]
            else:
                cache_length = ops.shape(cache["key"])[2]
                self_attention_mask = masks.step_mask(cache_index, cache_length)[None]

        # Self-attention block.
        residual = inputs
        x = self.self_attention_layer_norm(inputs) if self.normalize_first else inputs
        x = self.self_attention(
            x,
            attention_mask=self_attention_mask,
            cache=cache,
            cache_index=cache_index,
            training=training,
            return_attention=return_attention,
        )
        new_cache, probabilities = None, {}
        if cache is not None:
            x, new_cache = x
        if return_attention:
            x, probabilities["self_attention"] = x
        x = residual + self.self_attention_dropout(x, training=training)
        if not self.normalize_first:
            x = self.self_attention_layer_norm(x)

        # Encoder-decoder attention block.
        residual = x
        if self.normalize_first:
            x = self.cross_attention_layer_norm(x)
        x = self.cross_attention(
            x,
            value=encoder_output,
            key_value=cross_key_value,
            attention_mask=cross_attention_mask,
            training=training,
            return_attention=return_attention,
        )
        if return_attention:
            x, probabilities["cross_attention"] = x
        x = residual + self.cross_attention_dropout(x, training=training)
        if not self.normalize_first:
            x = self.cross_attention_layer_norm(x)

        # Feed-forward block.
        residual = x
        if self.normalize_first:
            x = self.feed_forward_layer_norm(x)
        x = self.feed_forward(x, training=training)
        x = residual + self.feed_forward_dropout(x, training=training)
        if not self.normalize_first:
            x = self.feed_forward_layer_norm(x)
        if return_attention:
            return x, probabilities
        return x if new_cache is None else (x, new_cache)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_size": self.hidden_size,
                "filter_size": self.filter_size,
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "relu_dropout": self.relu_dropout,
                "normalize_first": self.normalize_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernels": self.kernels,
            }
        )
        return config
