"""The position-wise feed-forward network (section 3.3)."""

import keras

from t2t_lite import kernels as kernel_sets
from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.transposed_dense import TransposedDense


@keras.saving.register_keras_serializable(package="t2t_lite")
class FeedForwardNetwork(keras.layers.Layer):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, eq. 2, applied at every position.

    W_1 is stored transposed, as `filter_dense.kernel` of shape [d_ff, D] (see
    `TransposedDense`); W_2 is `output_dense.kernel`, [d_ff, D].

    Args:
        hidden_size: D, the output width.
        filter_size: d_ff, the inner width.
        relu_dropout: dropout rate on the ReLU activations.
        kernels: "keras" or "cpu", for the dropout (see `t2t_lite.kernels`).
    """

    def __init__(
        self,
        hidden_size: int,
        filter_size: int,
        relu_dropout: float = 0.0,
        kernels: str = kernel_sets.KERAS,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.filter_size = filter_size
        self.relu_dropout = relu_dropout
        self.kernels = kernel_sets.check(kernels, "FeedForwardNetwork")

    def build(self, inputs_shape):
        self.filter_dense = TransposedDense(
            self.filter_size, activation="relu", name="filter_dense", dtype=self.dtype_policy
        )
        self.filter_dense.build(inputs_shape)
        self.filter_dropout = Dropout(
            self.relu_dropout,
            kernels=self.kernels,
            name="filter_dropout",
            dtype=self.dtype_policy,
        )
        self.output_dense = keras.layers.Dense(
            self.hidden_size, name="output_dense", dtype=self.dtype_policy
        )
        self.output_dense.build((*inputs_shape[:-1], self.filter_size))
        self.built = True

    def call(self, inputs, training=None):
        """Maps [B, T, D] to [B, T, D]."""
        hidden = self.filter_dense(inputs)  # [B, T, d_ff]
        hidden = self.filter_dropout(hidden, training=training)
        return self.output_dense(hidden)  # [B, T, D]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_size": self.hidden_size,
                "filter_size": self.filter_size,
                "relu_dropout": self.relu_dropout,
                "kernels": self.kernels,
            }
        )
        return config
