"""One encoder layer: self-attention and a feed-forward network (section 3.1)."""

import keras

from t2t_lite import kernels as kernel_sets
from t2t_lite.layers.attention import MultiHeadAttention
from t2t_lite.layers.feed_forward import FeedForwardNetwork
from t2t_lite.layers.residual import build_norm_and_dropout


@keras.saving.register_keras_serializable(package="t2t_lite")
class TransformerEncoderLayer(keras.layers.Layer):
    """Self-attention then FFN, each wrapped in a residual connection and LayerNorm.

    Post-norm (the paper, `normalize_first=False`): x = LayerNorm(x + Dropout(Sublayer(x))).
    Pre-norm (`normalize_first=True`): x = x + Dropout(Sublayer(LayerNorm(x))); the model
    then adds one LayerNorm after the last layer.

    Args:
        hidden_size: D.
        filter_size: d_ff.
        num_heads: h.
        dropout: P_drop on each sub-layer output before the residual sum.
        attention_dropout: dropout on the attention weights.
        relu_dropout: dropout inside the feed-forward network.
        normalize_first: pre-norm instead of the paper's post-norm.
        layer_norm_epsilon: LayerNorm's epsilon.
        kernels: "keras" or "cpu", passed to every sub-layer (see `t2t_lite.kernels`).
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
        self.kernels = kernel_sets.check(kernels, "TransformerEncoderLayer")

    def build(self, inputs_shape):
        self.self_attention = MultiHeadAttention(
            self.num_heads,
            self.hidden_size,
            dropout=self.attention_dropout,
            kernels=self.kernels,
            name="self_attention",
            dtype=self.dtype_policy,
        )
        self.self_attention.build(inputs_shape)
        build_norm_and_dropout(self, "self_attention", inputs_shape)
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

    def call(self, inputs, attention_mask=None, training=None, return_attention=False):
        """Maps [B, S, D] to [B, S, D].

        Args:
            inputs: [B, S, D].
            attention_mask: bool broadcastable to [B, S, S]; True = may attend
                (`masks.attention_mask(padding_mask(ids), query_length=S)`).
            training: enables dropout.
            return_attention: also return the self-attention probabilities.

        Returns:
            [B, S, D], or with `return_attention` ([B, S, D], probabilities [B, H, S, S]).
        """
        # Self-attention block.
        residual = inputs
        x = self.self_attention_layer_norm(inputs) if self.normalize_first else inputs
        x = self.self_attention(
            x, attention_mask=attention_mask, training=training, return_attention=return_attention
        )
        if return_attention:
            x, probabilities = x
        x = residual + self.self_attention_dropout(x, training=training)
        if not self.normalize_first:
            x = self.self_attention_layer_norm(x)

        # Feed-forward block.
        residual = x
        if self.normalize_first:
            x = self.feed_forward_layer_norm(x)
        x = self.feed_forward(x, training=training)
        x = residual + self.feed_forward_dropout(x, training=training)
        if not self.normalize_first:
            x = self.feed_forward_layer_norm(x)
        return (x, probabilities) if return_attention else x

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
