"""A dense layer whose kernel is stored [units, input_dim]: the FFN's W_1 in checkpoints."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_lite")
class TransposedDense(keras.layers.Layer):
    """activation(x K^T + b) over the last axis, with the kernel K stored [units, input_dim].

    The function of `keras.layers.Dense` with kernel K^T. The feed-forward network's
    first layer is stored this way because its input gradient is then the plain product
    dy K, which oneDNN computes faster than dy K^T when K is wide; checkpoints hold this
    layout (`kernel` [units, input_dim], `bias` [units]), so it stays whichever kernels
    compute the model.

    Args:
        units: output width.
        activation: a Keras activation name or None.
    """

    def __init__(self, units: int, activation=None, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.activation = keras.activations.get(activation)

    def build(self, inputs_shape):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.units, inputs_shape[-1]),
            initializer=keras.initializers.GlorotUniform(),
        )
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")
        self.built = True

    def call(self, inputs):
        # One 2-D product over all positions, then the bias and activation on its result:
        # TensorFlow runs this faster than Keras's product of the [B, T, in] tensor (which
        # goes through tf.tensordot and adds the bias after reshaping back).
        flat = ops.reshape(inputs, (-1, inputs.shape[-1]))  # [positions, input_dim]
        outputs = self.activation(ops.add(ops.matmul(flat, ops.transpose(self.kernel)), self.bias))
        return ops.reshape(outputs, (*ops.shape(inputs)[:-1], self.units))

    def compute_output_shape(self, inputs_shape):
        return (*inputs_shape[:-1], self.units)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"units": self.units, "activation": keras.activations.serialize(self.activation)}
        )
        return config
